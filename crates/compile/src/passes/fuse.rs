//! Elementwise fusion (the `fuse_elementwise` stage): a chain of elementwise float ops of
//! one output shape, whose intermediate values have no other user, becomes one
//! `FusedElementwise` node that makes a single pass over memory. A single add, subtract
//! or multiply read by several such loops is recomputed in each of them instead of being
//! stored (see [`recomputable`]). The members the loops absorbed are left for DCE.
//!
//! ```
//! use spore_compile::{pass::Pass, passes::{Dce, ElementwiseLoops}};
//! use spore_core::{trace::trace, DType, TensorType};
//! let mut g = trace("f", &[TensorType::new(&[8], DType::F32)], |x| Ok(vec![x[0].exp()?.add_scalar(1.0)?.log()?])).unwrap();
//! ElementwiseLoops.run(&mut g).unwrap();
//! Dce.run(&mut g).unwrap();
//! assert_eq!(g.op_count(), 1);
//! assert_eq!(g.nodes[g.outputs[0]].op().unwrap().name(), "FusedElementwise");
//! ```

use std::collections::HashMap;

use spore_core::Result;
use spore_core::ir::{Graph, NodeKind, ValueId};
use spore_core::op::Op;
use spore_core::prims::fused::{FusedInstr, FusedProgram};
use spore_kernels::{BinaryFn, DType};

use crate::pass::Pass;

/// The `fuse_elementwise` stage.
pub struct ElementwiseLoops;

/// The float dtype a node computes in, if it can join a fused loop.
pub(super) fn compute_dtype(g: &Graph, i: usize) -> Option<DType> {
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
    // A loop over 16-bit values rounds each step's result to 16 bits, as the ops do
    // one by one in PyNative mode (see `spore_core::prims::fused`).
    d.is_float().then_some(d)
}

/// Members of one loop (node indices; the root last once sorted) and its float dtype.
pub(super) struct Group {
    pub(super) members: Vec<usize>,
    pub(super) dtype: DType,
}

impl Pass for ElementwiseLoops {
    fn name(&self) -> &'static str {
        "fuse_elementwise"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let uses = consumer_counts(g);
        let recompute = recomputable(g);
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
                } else if recompute[a] && group_of.get(&a).is_some_and(|ga| ga.members == [a]) {
                    // A copy of `a` joins this loop; `a` itself dies once every reader
                    // has taken one, and DCE removes it.
                    group.members.push(a);
                }
            }
            group.members.push(i);
            group_of.insert(i, group);
        }
        let mut changed = false;
        // Roots in node order, so that the graph changes the same way on every run.
        let mut roots: Vec<(ValueId, Group)> = group_of.into_iter().collect();
        roots.sort_unstable_by_key(|(root, _)| *root);
        for (root, mut group) in roots {
            if group.members.len() < 2 {
                continue;
            }
            group.members.sort_unstable();
            group.members.dedup();
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

/// Values cheaper to recompute in each reader's loop than to store: one add, subtract or
/// multiply (float) read by several nodes, all elementwise ops of its shape and dtype, and
/// not a graph output or update. Why: BatchNorm's `x - μ` is read by the variance's sum
/// and by the backward pass; stored, it cost a full pass over the activation per layer.
/// At most one input may have the value's full shape (the others broadcast), so that
/// recomputing keeps no more memory alive than storing did.
fn recomputable(g: &Graph) -> Vec<bool> {
    let n = g.nodes.len();
    let mut readers: Vec<Vec<usize>> = vec![vec![]; n];
    for (i, node) in g.nodes.iter().enumerate() {
        for a in node.args() {
            if !readers[a].contains(&i) {
                readers[a].push(i);
            }
        }
    }
    let mut escapes = vec![false; n];
    for &v in g.outputs.iter().chain(g.updates.iter().map(|(_, v)| v)) {
        escapes[v] = true;
    }
    (0..n)
        .map(|v| {
            let NodeKind::Op {
                op: Op::Binary(BinaryFn::Add | BinaryFn::Sub | BinaryFn::Mul),
                args,
            } = &g.nodes[v].kind
            else {
                return false;
            };
            let ty = g.nodes[v].ty();
            let full_inputs = args
                .iter()
                .filter(|&&a| g.nodes[a].ty().shape == ty.shape)
                .count();
            ty.dtype.is_float()
                && readers[v].len() > 1
                && !escapes[v]
                && full_inputs <= 1
                && readers[v].iter().all(|&r| {
                    compute_dtype(g, r) == Some(ty.dtype) && g.nodes[r].ty().shape == ty.shape
                })
        })
        .collect()
}

/// How many nodes (and graph outputs or updates) use each value, a node that reads a
/// value twice counting once (`Graph::use_counts` counts every read). Why: the gradient
/// of `d * d` is `g * d + g * d`, whose `Add` reads one product twice; that product has a
/// single consumer and can live inside the same loop.
pub(super) fn consumer_counts(g: &Graph) -> Vec<usize> {
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
/// external inputs (not yet contracted: that is the `contract` stage).
pub(super) fn build_program(g: &Graph, group: &Group) -> (FusedProgram, Vec<ValueId>) {
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
