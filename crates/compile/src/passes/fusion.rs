//! All of fusion as one pass, for callers that want it at once (`default_passes` lists
//! its stages one by one, so that `save_graphs` prints the graph after each):
//! `pool_relu`, `conv_relu`, `product_sums`, `fuse_elementwise`, `fuse_sum`, `contract`,
//! `matmul_epilogue`, `conv_epilogue`, `widening_casts` and `narrowing_casts`, with `dce`
//! clean-ups between them.
//!
//! ```
//! use spore_compile::{pass::Pass, passes::{Dce, FuseElementwise}};
//! use spore_core::{trace::trace, DType, TensorType};
//! let mut g = trace("f", &[TensorType::new(&[8], DType::F32)], |x| Ok(vec![x[0].exp()?.add_scalar(1.0)?.log()?])).unwrap();
//! FuseElementwise.run(&mut g).unwrap();
//! assert_eq!(g.op_count(), 1);
//! assert_eq!(g.nodes[g.outputs[0]].op().unwrap().name(), "FusedElementwise");
//! ```

use spore_core::Result;
use spore_core::ir::Graph;

use super::{
    Contract, ConvEpilogue, ConvRelu, Dce, ElementwiseLoops, MatMulEpilogue, NarrowingCasts,
    PoolRelu, ProductSums, SumLoops, WideningCasts,
};
use crate::pass::Pass;

/// The stages of fusion in order. Why this order: the two folds that are not elementwise
/// come first (what they leave dead must not count as readers of the loops), and sums of
/// products before the loops would take their additions; sums take
/// whole loops, so they follow the loops; contraction rewrites finished programs; and
/// the epilogue folds recognise contracted loops (`m * 0.9 + dW` and a BatchNorm's
/// `y * scale + shift` are each one `MulAdd`).
pub fn fusion_passes() -> Vec<Box<dyn Pass>> {
    vec![
        Box::new(PoolRelu),
        Box::new(ConvRelu),
        Box::new(ProductSums),
        Box::new(Dce),
        Box::new(ElementwiseLoops),
        Box::new(Dce),
        Box::new(SumLoops),
        Box::new(Contract),
        Box::new(Dce),
        Box::new(MatMulEpilogue),
        Box::new(ConvEpilogue),
        // Last: a product's epilogue takes its float32 addend as it is, and the loops
        // left read 16-bit values past their casts (the pipeline's `dce` then drops them).
        Box::new(WideningCasts),
        // After it: a loop that rounds its result to 16 bits no longer has the float32
        // result that `widening_casts` looks for.
        Box::new(NarrowingCasts),
        Box::new(Dce),
    ]
}

/// Whether `name` is one of fusion's stages (not a clean-up): the passes a dump skips.
pub fn is_fusion_stage(name: &str) -> bool {
    fusion_passes()
        .iter()
        .any(|p| p.name() == name && name != "dce")
}

/// Every stage of fusion, run as one pass.
pub struct FuseElementwise;

impl Pass for FuseElementwise {
    fn name(&self) -> &'static str {
        "fusion"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut changed = false;
        for pass in fusion_passes() {
            changed |= pass.run(g)?;
        }
        Ok(changed)
    }
}
