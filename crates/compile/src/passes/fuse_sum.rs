//! Sum fusion (the `fuse_sum` stage): an elementwise loop (or a single elementwise op)
//! whose only reader is a `ReduceSum` over adjacent axes runs inside the sum as one
//! `FusedReduceSum`: the full-size result is never written, only summed chunk by chunk.
//! Why: BatchNorm's `Σ (x - μ)²` and the sums of its backward pass would otherwise write
//! and read back a tensor the size of the activation.
//!
//! ```
//! use spore_compile::pass::{Pass, run_passes};
//! use spore_compile::passes::{Dce, ElementwiseLoops, SumLoops};
//! use spore_core::{trace::trace, DType, TensorType};
//! let mut g = trace("f", &[TensorType::new(&[4, 8], DType::F32)], |x| {
//!     Ok(vec![x[0].sub_scalar(1.0)?.square()?.sum(&[0], false)?])
//! }).unwrap();
//! let stages: Vec<Box<dyn Pass>> = vec![Box::new(ElementwiseLoops), Box::new(Dce), Box::new(SumLoops), Box::new(Dce)];
//! run_passes(&mut g, &stages, None).unwrap();
//! assert_eq!(g.op_count(), 1);
//! assert_eq!(g.nodes[g.outputs[0]].op().unwrap().name(), "FusedReduceSum");
//! ```

use spore_core::Result;
use spore_core::ir::{Graph, NodeKind};
use spore_core::op::Op;
use spore_core::prims::fused::FusedProgram;
use spore_core::prims::fused_reduce::sum_split;
use spore_kernels::ReduceFn;

use super::fuse::{Group, build_program, compute_dtype, consumer_counts};
use crate::pass::Pass;

/// The `fuse_sum` stage.
pub struct SumLoops;

impl Pass for SumLoops {
    fn name(&self) -> &'static str {
        "fuse_sum"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let uses = consumer_counts(g);
        let mut changed = false;
        for r in 0..g.nodes.len() {
            let NodeKind::Op {
                op:
                    Op::Reduce {
                        kind: ReduceFn::Sum,
                        axes,
                        keep_dims,
                    },
                args,
            } = &g.nodes[r].kind
            else {
                continue;
            };
            let a = args[0];
            let ty = g.nodes[a].ty();
            if uses[a] != 1 || sum_split(&ty.shape, axes).is_none() {
                continue;
            }
            let Some((program, inputs)) = loop_of(g, a) else {
                continue;
            };
            // 16-bit sums stay a ReduceSum of their own, which sums in float32 and rounds
            // once (a fused sum would round its terms' loop, not the sum, to 16 bits).
            if program.compute != ty.dtype || ty.dtype.is_half() {
                continue;
            }
            let (axes, keep_dims) = (axes.clone(), *keep_dims);
            g.nodes[r].kind = NodeKind::Op {
                op: Op::FusedReduceSum {
                    program,
                    axes,
                    keep_dims,
                },
                args: inputs,
            };
            changed = true;
        }
        Ok(changed)
    }
}

/// The loop that computes value `a`: its fused program, or a one-instruction program of a
/// single elementwise float op; with the loop's inputs.
fn loop_of(g: &Graph, a: usize) -> Option<(FusedProgram, Vec<usize>)> {
    match &g.nodes[a].kind {
        NodeKind::Op {
            op: Op::Fused(program),
            args,
        } => Some((program.clone(), args.clone())),
        _ => {
            let dtype = compute_dtype(g, a)?;
            let group = Group {
                members: vec![a],
                dtype,
            };
            Some(build_program(g, &group))
        }
    }
}
