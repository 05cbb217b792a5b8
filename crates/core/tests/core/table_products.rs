//! The op table's matrix-product rows: `MatMul` (batched, transposed views) and the
//! products the graph compiler builds with an epilogue (`MatMulAdd`, `MatMulBiasAdd`,
//! `MatMulBiasAddReLU`, `MatMulReluGrad`), each against the naive f64 reference.

use spore_core::Tensor;
use spore_core::op::Op;

use super::reference as r;
use super::table::{In, Row, row};

/// Runs `MatMulAdd` (`args[0] · args[1] + beta * args[2]`).
fn run_matmul_add(args: &[&Tensor], beta: f64) -> spore_core::Result<Tensor> {
    let op = Op::MatMulAdd {
        beta_bits: beta.to_bits(),
    };
    spore_core::apply::apply(op, args, std::panic::Location::caller())
}

/// Runs `MatMulBias` (`relu?(args[0] · args[1] + args[2])`).
fn run_matmul_bias(args: &[&Tensor], relu: bool) -> spore_core::Result<Tensor> {
    let op = Op::MatMulBias { relu };
    spore_core::apply::apply(op, args, std::panic::Location::caller())
}

/// Runs `MatMulReluGrad` (`args[2] > 0 ? args[0] · args[1] : 0`).
fn run_matmul_relu_grad(args: &[&Tensor]) -> spore_core::Result<Tensor> {
    spore_core::apply::apply(Op::MatMulReluGrad, args, std::panic::Location::caller())
}

/// `p` where the mask `y` is positive, else 0.
fn masked(p: f64, y: f64) -> f64 {
    if y > 0.0 { p } else { 0.0 }
}

pub fn product_rows() -> Vec<Row> {
    vec![
        row(
            "MatMul",
            vec![In::F(&[2, 3, 4], -1.0, 1.0), In::F(&[4, 5], -1.0, 1.0)],
            |x| x[0].matmul(&x[1]),
            |x| r::matmul(&x[0], &x[1]),
        ),
        row(
            // x @ Wᵀ, as Dense computes it: the weight gradient takes the transposed-view
            // branch of the MatMul rule.
            "MatMul",
            vec![In::F(&[3, 4], -1.0, 1.0), In::F(&[5, 4], -1.0, 1.0)],
            |x| x[0].matmul(&x[1].transpose()?),
            |x| r::matmul(&x[0], &r::permute(&x[1], &[1, 0])),
        ),
        row(
            "MatMul",
            vec![In::F(&[4, 3], -1.0, 1.0), In::F(&[2, 1, 4, 5], -1.0, 1.0)],
            |x| x[0].transpose()?.matmul(&x[1]),
            |x| r::matmul(&r::permute(&x[0], &[1, 0]), &x[1]),
        ),
        // xᵀ · dy + 0.9 m, a Momentum update of a weight gradient: the blocked product
        // with the addend in its epilogue (f32), or the product then a pass (f64).
        row(
            "MatMulAdd",
            vec![
                In::F(&[9, 20], -1.0, 1.0),
                In::F(&[9, 17], -1.0, 1.0),
                In::F(&[20, 17], -1.0, 1.0),
            ],
            |x| run_matmul_add(&[&x[0].transpose()?, &x[1], &x[2]], 0.9),
            |x| {
                let product = r::matmul(&r::permute(&x[0], &[1, 0]), &x[1]);
                r::zip(&product, &x[2], |p, d| p + 0.9 * d)
            },
        )
        .no_grad(),
        // x · wᵀ + dᵀ: the dot-product path, and an addend that is a transposed view.
        row(
            "MatMulAdd",
            vec![
                In::F(&[3, 40], -1.0, 1.0),
                In::F(&[5, 40], -1.0, 1.0),
                In::F(&[5, 3], -1.0, 1.0),
            ],
            |x| run_matmul_add(&[&x[0], &x[1].transpose()?, &x[2].transpose()?], -2.0),
            |x| {
                let product = r::matmul(&x[0], &r::permute(&x[1], &[1, 0]));
                r::zip(&product, &r::permute(&x[2], &[1, 0]), |p, d| p - 2.0 * d)
            },
        )
        .no_grad(),
        // x · wᵀ + b, a Dense layer: the dot-product path in f32.
        row(
            "MatMulBiasAdd",
            vec![
                In::F(&[5, 40], -1.0, 1.0),
                In::F(&[7, 40], -1.0, 1.0),
                In::F(&[7], -1.0, 1.0),
            ],
            |x| run_matmul_bias(&[&x[0], &x[1].transpose()?, &x[2]], false),
            |x| {
                let product = r::matmul(&x[0], &r::permute(&x[1], &[1, 0]));
                r::zip(&product, &x[2], |p, b| p + b)
            },
        )
        .no_grad(),
        // relu(x · w + b): the blocked path with edge tiles in f32.
        row(
            "MatMulBiasAddReLU",
            vec![
                In::F(&[20, 9], -1.0, 1.0),
                In::F(&[9, 17], -1.0, 1.0),
                In::F(&[17], -1.0, 1.0),
            ],
            |x| run_matmul_bias(&[&x[0], &x[1], &x[2]], true),
            |x| r::zip(&r::matmul(&x[0], &x[1]), &x[2], |p, b| (p + b).max(0.0)),
        )
        .no_grad(),
        // dy · W masked by a layer's output: the blocked path with edge tiles.
        row(
            "MatMulReluGrad",
            vec![
                In::F(&[20, 9], -1.0, 1.0),
                In::F(&[9, 17], -1.0, 1.0),
                In::F(&[20, 17], -1.0, 1.0),
            ],
            |x| run_matmul_relu_grad(&[&x[0], &x[1], &x[2]]),
            |x| r::zip(&r::matmul(&x[0], &x[1]), &x[2], masked),
        )
        .no_grad(),
        // x · wᵀ: the dot-product path, and a mask that is a transposed view.
        row(
            "MatMulReluGrad",
            vec![
                In::F(&[4, 40], -1.0, 1.0),
                In::F(&[6, 40], -1.0, 1.0),
                In::F(&[6, 4], -1.0, 1.0),
            ],
            |x| run_matmul_relu_grad(&[&x[0], &x[1].transpose()?, &x[2].transpose()?]),
            |x| {
                let product = r::matmul(&x[0], &r::permute(&x[1], &[1, 0]));
                r::zip(&product, &r::permute(&x[2], &[1, 0]), masked)
            },
        )
        .no_grad(),
    ]
}
