//! Elementwise work that only finishes a matrix product joins the product's epilogue:
//! the GEMM's tiles (or each of its threads, on its part of the result) do it while the
//! values are still in registers or cache (see `spore_kernels::matmul_epilogue`), so the
//! product is never written out and read back:
//!
//! - the Momentum update `m * 0.9 + dW`, with `dW = dyᵀ · x` read by nothing else, becomes
//!   `MatMulAdd(dyᵀ, x, m)` (one sweep over the moment instead of writing the gradient,
//!   reading it back with the moment and writing the sum);
//! - a Dense layer's `relu(x · Wᵀ + b)` becomes `MatMulBiasAddReLU(x, Wᵀ, b)`, and
//!   `x · Wᵀ + b` alone `MatMulBiasAdd`;
//! - ReLU's gradient of a product, `Select(y > 0, dy · W, 0)` (a fused loop), becomes
//!   `MatMulReluGrad(dy, W, y)`: the gradient is masked as the product stores it.
//!
//! The last stage of fusion (`matmul_epilogue`, after the loops are built and contracted;
//! skipped while a dump runs, so that dumps keep the source ops).
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
//!
//! let types = [TensorType::new(&[8, 4], DType::F32), TensorType::new(&[6, 4], DType::F32), TensorType::new(&[6], DType::F32)];
//! let mut g = trace("dense", &types, |x| Ok(vec![x[0].matmul(&x[1].transpose()?)?.add(&x[2])?.relu()?])).unwrap();
//! FuseElementwise.run(&mut g).unwrap();
//! Dce.run(&mut g).unwrap();
//! assert!(g.to_ir().contains("= MatMulBiasAddReLU("), "{}", g.to_ir());
//! ```
//!
//! Results keep their bits: the kernel rounds `beta * D` before adding it to the finished
//! product, as the separate multiply-add did, and its ReLU is the elementwise one.

use spore_core::TensorType;
use spore_core::ir::{Graph, NodeKind};
use spore_core::op::Op;
use spore_core::prims::fused::FusedInstr;
use spore_kernels::{BinaryFn, CompareFn, UnaryFn};

/// Rewrites every match in place (the reader becomes the `MatMulAdd` or `MatMulBias`);
/// the product is left for DCE. Returns whether anything changed.
pub(crate) fn fold_into_products(g: &mut Graph) -> bool {
    let uses = g.use_counts();
    let mut changed = false;
    for r in 0..g.nodes.len() {
        let found = match product_plus_scaled(g, r) {
            Some((p, d, beta)) => Some((
                p,
                d,
                Op::MatMulAdd {
                    beta_bits: beta.to_bits(),
                },
            )),
            None => product_plus_bias(g, r)
                .map(|(p, b, relu)| (p, b, Op::MatMulBias { relu }))
                .or_else(|| product_masked(g, r).map(|(p, y)| (p, y, Op::MatMulReluGrad))),
        };
        let Some((product, operand, op)) = found else {
            continue;
        };
        if uses[product] != 1 {
            continue;
        }
        let factors = g.nodes[product].args();
        g.nodes[r].kind = NodeKind::Op {
            op,
            args: vec![factors[0], factors[1], operand],
        };
        changed = true;
    }
    changed
}

/// True when value `v` is a float matrix product of type `ty` (both factors matrices).
fn is_product(g: &Graph, v: usize, ty: &TensorType) -> bool {
    matches!(g.nodes[v].op(), Some(Op::MatMul))
        && g.nodes[v].ty() == ty
        // A 16-bit product rounds before its epilogue in PyNative mode: kept apart.
        && ty.dtype.is_float()
        && !ty.dtype.is_half()
        && ty.rank() == 2
        && g.nodes[v]
            .args()
            .iter()
            .all(|&f| g.nodes[f].ty().rank() == 2)
}

/// For a node computing `P + b` (an `Add`) or `relu(P + b)` (a fused loop of just those),
/// where `P` is a matrix product of the node's type and `b` a vector of one value per
/// column: (`P`, `b`, whether ReLU follows).
fn product_plus_bias(g: &Graph, r: usize) -> Option<(usize, usize, bool)> {
    let NodeKind::Op { op, args } = &g.nodes[r].kind else {
        return None;
    };
    let ty = g.nodes[r].ty();
    let (x, y, relu) = match op {
        Op::Binary(BinaryFn::Add) => (args[0], args[1], false),
        Op::Fused(program) => match program.instrs.as_slice() {
            [
                FusedInstr::Binary(BinaryFn::Add, 0, 1),
                FusedInstr::Unary(UnaryFn::Relu, 2),
            ]
            | [
                FusedInstr::Binary(BinaryFn::Add, 1, 0),
                FusedInstr::Unary(UnaryFn::Relu, 2),
            ] if program.num_inputs == 2 && program.out_dtype == program.compute => {
                (args[0], args[1], true)
            }
            _ => return None,
        },
        _ => return None,
    };
    let is_bias = |v: usize| {
        let t = g.nodes[v].ty();
        t.dtype == ty.dtype && t.rank() == 1 && ty.rank() == 2 && t.shape[0] == ty.shape[1]
    };
    if is_product(g, x, ty) && is_bias(y) {
        Some((x, y, relu))
    } else if is_product(g, y, ty) && is_bias(x) {
        Some((y, x, relu))
    } else {
        None
    }
}

/// For a node computing `Select(Y > 0, P, 0)` (a fused loop of a compare and a select,
/// the zero a `+0` constant), where `P` is a float matrix product of the node's type and
/// `Y` has that type too: (`P`, `Y`).
fn product_masked(g: &Graph, r: usize) -> Option<(usize, usize)> {
    let NodeKind::Op {
        op: Op::Fused(program),
        args,
    } = &g.nodes[r].kind
    else {
        return None;
    };
    let n = program.num_inputs;
    let [
        FusedInstr::Compare(CompareFn::Greater, y, zero),
        FusedInstr::Select(cond, p, otherwise),
    ] = program.instrs.as_slice()
    else {
        return None;
    };
    let ty = g.nodes[r].ty();
    let positive_zero = |i: usize| match &g.nodes[args[i]].kind {
        NodeKind::Constant(t) => {
            t.numel() == 1 && t.dtype() == ty.dtype && t.item().is_ok_and(|v| v.to_bits() == 0)
        }
        _ => false,
    };
    let inputs_ok = [*y, *zero, *p, *otherwise].iter().all(|&i| i < n);
    if !inputs_ok
        || *cond != n
        || program.out_dtype != program.compute
        || !positive_zero(*zero)
        || !positive_zero(*otherwise)
    {
        return None;
    }
    let (p, y) = (args[*p], args[*y]);
    (is_product(g, p, ty) && g.nodes[y].ty() == ty && p != y).then_some((p, y))
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
    if !ty.dtype.is_float() || ty.dtype.is_half() || ty.rank() != 2 {
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

/// The `matmul_epilogue` stage.
pub struct MatMulEpilogue;

impl crate::pass::Pass for MatMulEpilogue {
    fn name(&self) -> &'static str {
        "matmul_epilogue"
    }

    fn run(&self, g: &mut Graph) -> spore_core::Result<bool> {
        Ok(fold_into_products(g))
    }
}
