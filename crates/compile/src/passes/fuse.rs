//! Elementwise fusion: a chain of elementwise float ops of one output shape, whose
//! intermediate values have no other user, becomes one `FusedElementwise` node that
//! makes a single pass over memory. A chain whose only reader is a `ReduceSum` runs
//! inside it instead (`FusedReduceSum`): the full-size result is never written, only
//! summed chunk by chunk (BatchNorm's `Σ (x - μ)²` and the sums of its backward pass).
//!
//! ```
//! use spore_compile::{pass::Pass, passes::{Dce, FuseElementwise}};
//! use spore_core::{trace::trace, DType, TensorType};
//! let mut g = trace("f", &[TensorType::new(&[8], DType::F32)], |x| Ok(vec![x[0].exp()?.add_scalar(1.0)?.log()?])).unwrap();
//! FuseElementwise.run(&mut g).unwrap();
//! Dce.run(&mut g).unwrap();
//! assert_eq!(g.op_count(), 1);
//! assert_eq!(g.nodes[g.outputs[0]].op().unwrap().name(), "FusedElementwise");
//! ```

use std::collections::HashMap;

use spore_core::Result;
use spore_core::ir::{Graph, NodeKind, ValueId};
use spore_core::op::Op;
use spore_core::prims::fused::{FusedInstr, FusedProgram};
use spore_core::prims::fused_reduce::sum_split;
use spore_kernels::{DType, ReduceFn};

use crate::pass::Pass;

pub struct FuseElementwise;

/// The float dtype a node computes in, if it can join a fused loop.
fn compute_dtype(g: &Graph, i: usize) -> Option<DType> {
    let NodeKind::Op { op, args } = &g.nodes[i].kind else {
        return None;
    };
    let arg_ty = |k: usize| g.nodes[args[k]].ty().dtype;
    let d = match op {
        Op::Unary(_) | Op::Binary(_) => g.nodes[i].ty().dtype,
        Op::Compare(_) => arg_ty(0),
        Op::Select => g.nodes[i].ty().dtype,
        _ => return None,
    };
    d.is_float().then_some(d)
}

struct Group {
    members: Vec<usize>,
    dtype: DType,
}

impl Pass for FuseElementwise {
    fn name(&self) -> &'static str {
        "fuse_elementwise"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let uses = consumer_counts(g);
        // group_of[v]: the group whose current root is v.
        let mut group_of: HashMap<ValueId, Group> = HashMap::new();
        for i in 0..g.nodes.len() {
            let Some(dtype) = compute_dtype(g, i) else {
                continue;
            };
            let shape = g.nodes[i].ty().shape.clone();
            let mut group = Group {
                members: vec![],
                dtype,
            };
            for a in g.nodes[i].args() {
                let joinable = uses[a] == 1
                    && g.nodes[a].ty().shape == shape
                    && group_of.get(&a).is_some_and(|ga| ga.dtype == dtype);
                if joinable && let Some(ga) = group_of.remove(&a) {
                    group.members.extend(ga.members);
                }
            }
            group.members.push(i);
            group_of.insert(i, group);
        }
        let mut changed = false;
        // A sum that is the only reader of a group's result takes the group inside it.
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
            let summable = |group: &Group| {
                let ty = g.nodes[a].ty();
                ty.dtype == group.dtype && sum_split(&ty.shape, axes).is_some()
            };
            if uses[a] != 1 || !group_of.get(&a).is_some_and(summable) {
                continue;
            }
            let (axes, keep_dims) = (axes.clone(), *keep_dims);
            let Some(mut group) = group_of.remove(&a) else {
                continue;
            };
            group.members.sort_unstable();
            let (program, inputs) = build_program(g, &group);
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
        for (root, mut group) in group_of {
            if group.members.len() < 2 {
                continue;
            }
            group.members.sort_unstable();
            let (program, inputs) = build_program(g, &group);
            g.nodes[root].kind = NodeKind::Op {
                op: Op::Fused(program),
                args: inputs,
            };
            changed = true;
        }
        Ok(changed)
    }
}

/// How many nodes (and graph outputs or updates) use each value, a node that reads a
/// value twice counting once (`Graph::use_counts` counts every read). Why: the gradient
/// of `d * d` is `g * d + g * d`, whose `Add` reads one product twice; that product has a
/// single consumer and can live inside the same loop.
fn consumer_counts(g: &Graph) -> Vec<usize> {
    let mut uses = g.use_counts();
    for n in &g.nodes {
        let args = n.args();
        for (k, &a) in args.iter().enumerate() {
            if args[..k].contains(&a) {
                uses[a] -= 1;
            }
        }
    }
    uses
}

/// Lowers a group (members in topological order, the root last) to a program and its
/// external inputs.
fn build_program(g: &Graph, group: &Group) -> (FusedProgram, Vec<ValueId>) {
    let mut inputs: Vec<ValueId> = vec![];
    for &m in &group.members {
        for a in g.nodes[m].args() {
            if !group.members.contains(&a) && !inputs.contains(&a) {
                inputs.push(a);
            }
        }
    }
    let mut reg: HashMap<ValueId, usize> =
        inputs.iter().enumerate().map(|(r, &v)| (v, r)).collect();
    let mut instrs = vec![];
    for (k, &m) in group.members.iter().enumerate() {
        let NodeKind::Op { op, args } = &g.nodes[m].kind else {
            continue;
        };
        let r = |v: &ValueId| reg[v];
        let ins = match op {
            Op::Unary(f) => FusedInstr::Unary(*f, r(&args[0])),
            Op::Binary(f) => FusedInstr::Binary(*f, r(&args[0]), r(&args[1])),
            Op::Compare(f) => FusedInstr::Compare(*f, r(&args[0]), r(&args[1])),
            Op::Select => FusedInstr::Select(r(&args[0]), r(&args[1]), r(&args[2])),
            _ => unreachable!("only elementwise ops join a group"),
        };
        instrs.push(ins);
        reg.insert(m, inputs.len() + k);
    }
    let root = *group.members.last().unwrap_or(&0);
    let program = FusedProgram {
        num_inputs: inputs.len(),
        instrs,
        compute: group.dtype,
        out_dtype: g.nodes[root].ty().dtype,
    };
    (program, inputs)
}
