//! Narrowing casts stored by loops (the `narrowing_casts` stage): a `Cast` from float32 to
//! float16 or bfloat16 whose input is a float32 elementwise loop (or a single
//! elementwise op) that nothing else reads becomes that loop, rounding each chunk of its
//! result to 16 bits as it stores it; the `dce` stage after it drops the float32 loop.
//! Rounding the loop's float32 value once is what the cast did, so the results are bit
//! for bit those of the loop and the cast run apart.
//!
//! ```
//! use spore_compile::passes::{Dce, NarrowingCasts};
//! use spore_compile::pass::Pass;
//! use spore_core::{trace, DType, TensorType};
//! // Mixed precision's BatchNorm output (float32) cast to bfloat16 for the next layer.
//! let types = [TensorType::new(&[8], DType::F32), TensorType::new(&[8], DType::F32)];
//! let mut g = trace::trace("bn_out", &types, |x| Ok(vec![x[0].mul(&x[1])?.cast(DType::BF16)?])).unwrap();
//! NarrowingCasts.run(&mut g).unwrap();
//! Dce.run(&mut g).unwrap(); // the float32 product, now read by nothing
//! let ir = g.to_ir();
//! assert!(ir.contains("FusedElementwise") && !ir.contains("= Cast("), "{ir}");
//! ```
//!
//! Why: an amp O2 step casts every BatchNorm output to 16 bits for the next layer; the
//! loop wrote a float32 tensor that the cast read back, twice the bytes of the result.

use spore_core::ir::{Graph, NodeKind};
use spore_core::op::Op;
use spore_core::prims::fused::{FusedInstr, FusedProgram};
use spore_core::{DType, Result};

use super::fuse::consumer_counts;
use crate::pass::Pass;

/// The `narrowing_casts` stage.
pub struct NarrowingCasts;

impl Pass for NarrowingCasts {
    fn name(&self) -> &'static str {
        "narrowing_casts"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let uses = consumer_counts(g);
        let mut changed = false;
        for i in 0..g.nodes.len() {
            let NodeKind::Op {
                op: Op::Cast(half),
                args,
            } = &g.nodes[i].kind
            else {
                continue;
            };
            let (half, source) = (*half, args[0]);
            // The float32 loop's value must have no other reader (graph outputs and
            // updates count as readers): it is no longer stored.
            if !half.is_half() || uses[source] != 1 {
                continue;
            }
            let Some((mut program, loop_args)) = float32_loop(g, source) else {
                continue;
            };
            program.out_dtype = half;
            g.nodes[i].kind = NodeKind::Op {
                op: Op::Fused(program),
                args: loop_args,
            };
            // The loop keeps its own scope name and source line (profiles and dumps
            // charge it to the cell that computed it, not to the next cell's cast).
            let (name, location) = (g.nodes[source].name.clone(), g.nodes[source].location);
            g.nodes[source].name = std::mem::replace(&mut g.nodes[i].name, name);
            g.nodes[source].location = std::mem::replace(&mut g.nodes[i].location, location);
            changed = true;
        }
        Ok(changed)
    }
}

/// Node `i` as a float32 loop with a float32 result, and its arguments: its own program,
/// or a one-instruction program of a single float32 elementwise op.
fn float32_loop(g: &Graph, i: usize) -> Option<(FusedProgram, Vec<usize>)> {
    let NodeKind::Op { op, args } = &g.nodes[i].kind else {
        return None;
    };
    if g.nodes[i].ty().dtype != DType::F32 {
        return None;
    }
    let single = |instr: FusedInstr| FusedProgram {
        num_inputs: args.len(),
        instrs: vec![instr],
        compute: DType::F32,
        out_dtype: DType::F32,
    };
    let program = match op {
        Op::Fused(p) if p.compute == DType::F32 => p.clone(),
        Op::Unary(f) => single(FusedInstr::Unary(*f, 0)),
        Op::Binary(f) => single(FusedInstr::Binary(*f, 0, 1)),
        _ => return None,
    };
    Some((program, args.clone()))
}
