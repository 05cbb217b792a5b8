//! Fusion checked bit for bit: a graph fused, then run in the interpreter and the
//! executor against the unfused graph (the product and convolution epilogue tests).

use spore_compile::pass::Pass;
use spore_compile::passes::{Dce, FuseElementwise};
use spore_core::ir::Graph;
use spore_core::{DType, Tensor, TensorType};

use super::assert_close;

/// Random f32 inputs of `types`, seeded from `seed`.
pub fn random_inputs(types: &[TensorType], seed: u64) -> Vec<Tensor> {
    types
        .iter()
        .enumerate()
        .map(|(k, t)| Tensor::randn(&t.shape, DType::F32, Some(seed + k as u64)).unwrap())
        .collect()
}

/// Fuses `g` and returns its IR, after checking that the fused graph's results equal the
/// unfused graph's bit for bit, in the interpreter and in the executor over two runs.
pub fn fuse_keeping_bits(mut g: Graph, inputs: &[Tensor]) -> String {
    let before = g.interpret(inputs).unwrap();
    assert!(FuseElementwise.run(&mut g).unwrap());
    Dce.run(&mut g).unwrap();
    g.verify().unwrap();
    let ir = g.to_ir();
    let after = g.interpret(inputs).unwrap();
    let mut exe = spore_compile::executor::Executable::new(g).unwrap();
    for run in 0..2 {
        let outputs = exe.run(inputs).unwrap();
        for (k, want) in before.outputs.iter().enumerate() {
            assert_close(&after.outputs[k], want, 0.0, &format!("interpreted\n{ir}"));
            assert_close(
                &outputs[k],
                want,
                0.0,
                &format!("executed, run {run}\n{ir}"),
            );
        }
    }
    ir
}

/// The IR of `g` after fusion.
pub fn fused_ir(mut g: Graph) -> String {
    FuseElementwise.run(&mut g).unwrap();
    Dce.run(&mut g).unwrap();
    g.to_ir()
}
