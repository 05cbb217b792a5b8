//! Widening casts read inside loops (the `widening_casts` stage): a float32 elementwise
//! loop (or a single elementwise op, which becomes a one-instruction loop, or a sum,
//! which becomes a fused sum of its one input) that reads a
//! `Cast` from float16 or bfloat16 to float32 reads the 16-bit value itself instead,
//! widening each chunk as it loads it; the `dce` stage after it drops a cast that no
//! other op reads. Widening is exact, so
//! the results are bit for bit those of the cast and the loop run apart. A custom op
//! whose result does not change under widening (`same_on_widened_inputs`: amp's
//! overflow check) reads the 16-bit values too.
//!
//! ```
//! use spore_compile::passes::{Dce, WideningCasts};
//! use spore_compile::pass::Pass;
//! use spore_core::{trace, DType, Tensor, TensorType};
//! // Mixed precision's unscale: a bfloat16 gradient cast to float32, divided by the scale.
//! let types = [TensorType::new(&[8], DType::BF16), TensorType::new(&[], DType::F32)];
//! let mut g = trace::trace("unscale", &types, |x| Ok(vec![x[0].cast(DType::F32)?.div(&x[1])?])).unwrap();
//! WideningCasts.run(&mut g).unwrap();
//! Dce.run(&mut g).unwrap(); // the cast, now read by nothing
//! let ir = g.to_ir();
//! assert!(ir.contains("FusedElementwise") && !ir.contains("= Cast("), "{ir}");
//! ```
//!
//! Why: an amp O2 step casts every 16-bit gradient to float32 and then unscales it; the
//! cast was a pass over memory of its own for each parameter.

use spore_core::ir::{Graph, NodeKind};
use spore_core::op::Op;
use spore_core::prims::fused::{FusedInstr, FusedProgram};
use spore_core::prims::fused_reduce::sum_split;
use spore_core::{DType, Result};
use spore_kernels::ReduceFn;

use crate::pass::Pass;

/// The `widening_casts` stage.
pub struct WideningCasts;

impl Pass for WideningCasts {
    fn name(&self) -> &'static str {
        "widening_casts"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut changed = false;
        for i in 0..g.nodes.len() {
            let args = g.nodes[i].args();
            // The 16-bit value behind each argument that is a widening cast. Every loop
            // reading the cast reads the 16-bit value instead (half the bytes); the cast
            // itself goes once no other op reads it.
            let sources: Vec<Option<usize>> = args.iter().map(|&a| widened_from(g, a)).collect();
            if sources.iter().all(Option::is_none) {
                continue;
            }
            let new_args: Vec<usize> = args
                .iter()
                .zip(&sources)
                .map(|(&a, s)| s.unwrap_or(a))
                .collect();
            if let NodeKind::Op {
                op: Op::Custom(custom),
                args,
            } = &mut g.nodes[i].kind
                && custom.0.same_on_widened_inputs()
            {
                *args = new_args;
                changed = true;
                continue;
            }
            let Some(program) = loop_of(g, i) else {
                continue;
            };
            g.nodes[i].kind = match &g.nodes[i].kind {
                NodeKind::Op {
                    op:
                        Op::FusedReduceSum {
                            axes, keep_dims, ..
                        }
                        | Op::Reduce {
                            axes, keep_dims, ..
                        },
                    ..
                } => NodeKind::Op {
                    op: Op::FusedReduceSum {
                        program,
                        axes: axes.clone(),
                        keep_dims: *keep_dims,
                    },
                    args: new_args,
                },
                _ => NodeKind::Op {
                    op: Op::Fused(program),
                    args: new_args,
                },
            };
            changed = true;
        }
        Ok(changed)
    }
}

/// The 16-bit value `a` widens, if `a` is a `Cast` to float32 of a float16 or bfloat16
/// value.
fn widened_from(g: &Graph, a: usize) -> Option<usize> {
    let NodeKind::Op {
        op: Op::Cast(DType::F32),
        args,
    } = &g.nodes[a].kind
    else {
        return None;
    };
    g.nodes[args[0]].ty().dtype.is_half().then_some(args[0])
}

/// Node `i` as a float32 loop that may read 16-bit inputs: its own program, or a
/// one-instruction program of a single elementwise op computing in float32.
fn loop_of(g: &Graph, i: usize) -> Option<FusedProgram> {
    let NodeKind::Op { op, args } = &g.nodes[i].kind else {
        return None;
    };
    let program = match op {
        Op::Fused(p) | Op::FusedReduceSum { program: p, .. } => p.clone(),
        // A sum of a widened value: a fused sum whose program is its one input (BatchNorm's
        // mean under amp O2, which would otherwise keep a float32 copy of the activation).
        Op::Reduce {
            kind: ReduceFn::Sum,
            axes,
            ..
        } if sum_split(&g.nodes[args[0]].ty().shape, axes).is_some() => FusedProgram {
            num_inputs: 1,
            instrs: vec![],
            compute: DType::F32,
            out_dtype: DType::F32,
        },
        Op::Unary(f) => single(args.len(), FusedInstr::Unary(*f, 0), DType::F32),
        Op::Binary(f) => single(args.len(), FusedInstr::Binary(*f, 0, 1), DType::F32),
        _ => return None,
    };
    let float32_out = g.nodes[i].ty().dtype == DType::F32;
    let sum = matches!(op, Op::FusedReduceSum { .. } | Op::Reduce { .. });
    (program.compute == DType::F32 && (float32_out || sum)).then_some(program)
}

fn single(num_inputs: usize, instr: FusedInstr, dtype: DType) -> FusedProgram {
    FusedProgram {
        num_inputs,
        instrs: vec![instr],
        compute: dtype,
        out_dtype: dtype,
    }
}
