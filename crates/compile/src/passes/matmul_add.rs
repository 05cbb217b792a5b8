//! A loop that only adds a scaled tensor to a matrix product joins the product: the
//! Momentum update `m * 0.9 + dW`, with `dW = dyᵀ · x` read by nothing else, becomes one
//! `MatMulAdd(dyᵀ, x, m)` whose tiles add `0.9 * m` as they are stored. `dW` is never
//! written: one sweep over the moment instead of writing the gradient, reading it back
//! with the moment and writing the sum. Part of fusion (it runs at the end of
//! `FuseElementwise`, so dumps keep the source ops).
//!
//! ```
//! use spore_compile::{pass::Pass, passes::{Dce, FuseElementwise}};
//! use spore_core::{trace::trace, DType, TensorType};
//! let types = [TensorType::new(&[8, 4], DType::F32), TensorType::new(&[8, 6], DType::F32), TensorType::new(&[4, 6], DType::F32)];
//! let mut g = trace("momentum", &types, |x| {
//!     let dw = x[0].transpose()?.matmul(&x[1])?;
//!     Ok(vec![x[2].mul_scalar(0.9)?.add(&dw)?])
//! }).unwrap();
//! FuseElementwise.run(&mut g).unwrap();
//! Dce.run(&mut g).unwrap();
//! assert!(g.to_ir().contains("= MatMulAdd("), "{}", g.to_ir());
//! assert_eq!(g.op_count(), 2); // the transposed view and MatMulAdd
//! ```
//!
//! Results keep their bits: the kernel rounds `beta * D` before adding it to the finished
//! product, as the separate multiply-add did.

use spore_core::ir::{Graph, NodeKind};
use spore_core::op::Op;
use spore_core::prims::fused::FusedInstr;
use spore_kernels::BinaryFn;

/// Rewrites every match in place (the reader becomes the `MatMulAdd`); the product is
/// left for DCE. Returns whether anything changed.
pub(crate) fn fold_into_products(g: &mut Graph) -> bool {
    let uses = g.use_counts();
    let mut changed = false;
    for r in 0..g.nodes.len() {
        let Some((product, addend, beta)) = product_plus_scaled(g, r) else {
            continue;
        };
        if uses[product] != 1 {
            continue;
        }
        let factors = g.nodes[product].args();
        g.nodes[r].kind = NodeKind::Op {
            op: Op::MatMulAdd {
                beta_bits: beta.to_bits(),
            },
            args: vec![factors[0], factors[1], addend],
        };
        changed = true;
    }
    changed
}

/// For a node computing `P + beta * D` (a fused `D * beta + P` or `beta * D + P`, or an
/// `Add` of `P` and `D`), where `P` is a float matrix product of the node's type, `D` has
/// that type too and `beta` is a scalar constant: (`P`, `D`, `beta`).
fn product_plus_scaled(g: &Graph, r: usize) -> Option<(usize, usize, f64)> {
    let NodeKind::Op { op, args } = &g.nodes[r].kind else {
        return None;
    };
    let ty = g.nodes[r].ty();
    let is_product = |v: usize| {
        matches!(g.nodes[v].op(), Some(Op::MatMul))
            && g.nodes[v].ty() == ty
            && g.nodes[v]
                .args()
                .iter()
                .all(|&f| g.nodes[f].ty().rank() == 2)
    };
    let full = |v: usize| g.nodes[v].ty() == ty;
    let scalar = |v: usize| match &g.nodes[v].kind {
        NodeKind::Constant(t) if t.numel() == 1 && t.dtype() == ty.dtype => t.item().ok(),
        _ => None,
    };
    if !ty.dtype.is_float() || ty.rank() != 2 {
        return None;
    }
    let (p, d, beta) = match op {
        Op::Binary(BinaryFn::Add) => {
            let (x, y) = (args[0], args[1]);
            if is_product(x) && full(y) {
                (x, y, 1.0)
            } else if is_product(y) && full(x) {
                (y, x, 1.0)
            } else {
                return None;
            }
        }
        Op::Fused(program) => {
            let [
                FusedInstr::MulAdd {
                    a,
                    b,
                    c,
                    subtract: false,
                },
            ] = program.instrs.as_slice()
            else {
                return None;
            };
            let n = program.num_inputs;
            if *a >= n || *b >= n || *c >= n || program.out_dtype != program.compute {
                return None;
            }
            let (p, x, y) = (args[*c], args[*a], args[*b]);
            let (d, beta) = match (scalar(x), scalar(y)) {
                (None, Some(beta)) => (x, beta),
                (Some(beta), None) => (y, beta),
                _ => return None,
            };
            if !is_product(p) || !full(d) {
                return None;
            }
            (p, d, beta)
        }
        _ => return None,
    };
    // A product that is its own addend (`P + 0.9 * P`) must stay.
    (p != d).then_some((p, d, beta))
}
