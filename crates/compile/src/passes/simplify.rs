//! Algebraic simplification: identities that leave a value unchanged are removed
//! (`x + 0`, `x - 0`, `x * 1`, `x / 1`, `--x`, reshape/broadcast/cast to the same type,
//! identity permutations, reshape of reshape). A rewrite is applied only when the result
//! has exactly the type of the value that replaces it.
//!
//! Two rewrites move work rather than remove it. `Cast(BroadcastTo(x))` becomes
//! `BroadcastTo(Cast(x))`: the cast converts the small value, and the broadcast stays a
//! view. And `(Aᵀ B)ᵀ`, which autodiff produces for every `Dense` weight gradient
//! (`x @ Wᵀ` forward), becomes `Bᵀ A`. Both are the same GEMM on strided operands, but
//! the new result is contiguous, so the optimizer update that reads it walks memory in
//! order instead of gathering a transposed view.
//!
//! ```
//! use spore_compile::{pass::Pass, passes::{Dce, Simplify}};
//! use spore_core::{trace::trace, DType, TensorType};
//! let mut g = trace("f", &[TensorType::new(&[2], DType::F32)], |x| Ok(vec![x[0].mul_scalar(1.0)?.neg()?.neg()?])).unwrap();
//! Simplify.run(&mut g).unwrap();
//! Dce.run(&mut g).unwrap();
//! assert_eq!(g.op_count(), 0);
//! ```

use spore_core::Result;
use spore_core::ir::{Graph, NodeKind, ValueId};
use spore_core::op::Op;
use spore_kernels::{BinaryFn, UnaryFn};

use crate::pass::Pass;

pub struct Simplify;

/// True when `v` is a constant whose every element equals `value`.
fn is_splat(g: &Graph, v: ValueId, value: f64) -> bool {
    match &g.nodes[v].kind {
        NodeKind::Constant(t) if t.numel() <= 4096 => t
            .to_f64_vec()
            .map(|xs| xs.iter().all(|&x| x == value))
            .unwrap_or(false),
        _ => false,
    }
}

/// The value node `i` can be replaced with, if it is an identity.
fn identity_of(g: &Graph, i: usize) -> Option<ValueId> {
    let NodeKind::Op { op, args } = &g.nodes[i].kind else {
        return None;
    };
    let ty = g.nodes[i].ty();
    let same = |v: ValueId| g.nodes[v].ty() == ty;
    let candidate = match (op, args.as_slice()) {
        (Op::Binary(BinaryFn::Add), &[a, b]) if is_splat(g, b, 0.0) => Some(a),
        (Op::Binary(BinaryFn::Add), &[a, b]) if is_splat(g, a, 0.0) => Some(b),
        (Op::Binary(BinaryFn::Sub), &[a, b]) if is_splat(g, b, 0.0) => Some(a),
        (Op::Binary(BinaryFn::Mul), &[a, b]) if is_splat(g, b, 1.0) => Some(a),
        (Op::Binary(BinaryFn::Mul), &[a, b]) if is_splat(g, a, 1.0) => Some(b),
        (Op::Binary(BinaryFn::Div), &[a, b]) if is_splat(g, b, 1.0) => Some(a),
        (Op::Unary(UnaryFn::Neg), &[a]) => match &g.nodes[a].kind {
            NodeKind::Op {
                op: Op::Unary(UnaryFn::Neg),
                args,
            } => Some(args[0]),
            _ => None,
        },
        (Op::Reshape(_) | Op::BroadcastTo(_) | Op::Cast(_) | Op::Identity, &[a]) => Some(a),
        (Op::Transpose(perm), &[a]) if perm.iter().enumerate().all(|(k, &p)| k == p) => Some(a),
        _ => None,
    };
    candidate.filter(|&v| same(v))
}

/// The input of `v` when `v` swaps the last two axes and keeps the others in place (a
/// matrix transpose, or one per batch of a batched product's operand).
fn is_matrix_transpose(g: &Graph, v: ValueId) -> Option<ValueId> {
    match &g.nodes[v].kind {
        NodeKind::Op {
            op: Op::Transpose(perm),
            args,
        } if swaps_last_two(perm) => Some(args[0]),
        _ => None,
    }
}

fn swaps_last_two(perm: &[usize]) -> bool {
    let r = perm.len();
    r >= 2
        && perm[r - 2] == r - 1
        && perm[r - 1] == r - 2
        && perm[..r - 2].iter().enumerate().all(|(k, &p)| k == p)
}

/// `Transpose(MatMul(Transpose(x), b))` at node `i`, the inner MatMul used only there,
/// becomes `MatMul(Transpose(b), x)`: the MatMul node turns into `Transpose(b)` and node
/// `i` into the MatMul (both keep their positions, so the order stays topological). The
/// transposes swap the last two axes, so batched products (attention's `q kᵀ`, whose key
/// gradient autodiff writes this way) are rewritten as matrices are.
fn transpose_of_matmul(g: &mut Graph, i: usize) -> bool {
    let Some(m) = is_matrix_transpose(g, i) else {
        return false;
    };
    let (a, b) = match &g.nodes[m].kind {
        NodeKind::Op {
            op: Op::MatMul,
            args,
        } if args.len() == 2 => (args[0], args[1]),
        _ => return false,
    };
    let Some(x) = is_matrix_transpose(g, a) else {
        return false;
    };
    let b_ty = g.nodes[b].ty().clone();
    let rank = b_ty.rank();
    // Equal ranks: the batch axes pair up the same way after the swap.
    if rank < 2 || g.nodes[x].ty().rank() != rank || g.nodes[i].ty().rank() != rank {
        return false;
    }
    // Counted now, not once per pass: other rewrites move uses around (matches are rare).
    if g.use_counts()[m] != 1 {
        return false;
    }
    let mut swapped = b_ty.shape.to_vec();
    swapped.swap(rank - 2, rank - 1);
    let mut perm: Vec<usize> = (0..rank).collect();
    perm.swap(rank - 2, rank - 1);
    let bt = spore_core::TensorType::new(&swapped, b_ty.dtype);
    g.nodes[m].kind = NodeKind::Op {
        op: Op::Transpose(perm),
        args: vec![b],
    };
    g.nodes[m].types = vec![bt];
    g.nodes[i].kind = NodeKind::Op {
        op: Op::MatMul,
        args: vec![m, x],
    };
    // Names and source lines follow the ops, so the IR still reads `MatMul-opN` for the
    // product, at the line that wrote the product.
    swap_names(g, m, i);
    true
}

/// `Cast(BroadcastTo(x))` at node `i`, the broadcast used only there, becomes
/// `BroadcastTo(Cast(x))`: the broadcast node turns into the cast of `x` and node `i`
/// into the broadcast (both keep their positions). The cast then converts `x`'s values
/// once each, and the broadcast is a view. Why: under amp O2, the gradient of every
/// BatchNorm mean reached its 16-bit input as a full-size broadcast, converted
/// element by element.
fn cast_of_broadcast(g: &mut Graph, i: usize) -> bool {
    let NodeKind::Op {
        op: Op::Cast(dtype),
        args,
    } = &g.nodes[i].kind
    else {
        return false;
    };
    let (dtype, b) = (*dtype, args[0]);
    let NodeKind::Op {
        op: Op::BroadcastTo(shape),
        args,
    } = &g.nodes[b].kind
    else {
        return false;
    };
    let (shape, x) = (shape.clone(), args[0]);
    // A cast to the same type is an identity (`identity_of` removes it); a value the graph
    // returns or assigns stays dense rather than becoming a broadcast view.
    let returned = g.outputs.contains(&i) || g.updates.iter().any(|&(_, v)| v == i);
    if dtype == g.nodes[b].ty().dtype || returned {
        return false;
    }
    // Counted now, not once per pass: other rewrites move uses around (matches are rare).
    if g.use_counts()[b] != 1 {
        return false;
    }
    let small = spore_core::TensorType::new(&g.nodes[x].ty().shape, dtype);
    g.nodes[b].kind = NodeKind::Op {
        op: Op::Cast(dtype),
        args: vec![x],
    };
    g.nodes[b].types = vec![small];
    g.nodes[i].kind = NodeKind::Op {
        op: Op::BroadcastTo(shape),
        args: vec![b],
    };
    swap_names(g, b, i);
    true
}

/// Swaps the scope names and source lines of nodes `a` and `b`, whose ops a rewrite
/// swapped: the IR still names each op as the user's code did.
fn swap_names(g: &mut Graph, a: usize, b: usize) {
    let (name_a, name_b) = (g.nodes[a].name.clone(), g.nodes[b].name.clone());
    g.nodes[a].name = name_b;
    g.nodes[b].name = name_a;
    let (loc_a, loc_b) = (g.nodes[a].location, g.nodes[b].location);
    g.nodes[a].location = loc_b;
    g.nodes[b].location = loc_a;
}

impl Pass for Simplify {
    fn name(&self) -> &'static str {
        "simplify"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut changed = false;
        for i in 0..g.nodes.len() {
            if transpose_of_matmul(g, i) || cast_of_broadcast(g, i) {
                changed = true;
                continue;
            }
            if let Some(v) = identity_of(g, i) {
                g.replace_uses(i, v);
                changed = true;
                continue;
            }
            // Reshape(Reshape(x)) -> Reshape(x): the inner shape does not matter.
            if let NodeKind::Op {
                op: Op::Reshape(_),
                args,
            } = &g.nodes[i].kind
            {
                let inner = args[0];
                if let NodeKind::Op {
                    op: Op::Reshape(_),
                    args: inner_args,
                } = &g.nodes[inner].kind
                {
                    let x = inner_args[0];
                    if let NodeKind::Op { args, .. } = &mut g.nodes[i].kind {
                        args[0] = x;
                        changed = true;
                    }
                }
            }
        }
        Ok(changed)
    }
}
