//! The arithmetic of a graph in FLOP: 2 per multiply-add of its products and
//! convolutions, the work a GEMM-rate figure measures. Elementwise ops, reductions and
//! pooling are not counted: they are memory-bound, and "useful FLOP/s" in the benchmarks
//! means the products' arithmetic divided by the whole step's time.
//!
//! ```
//! use spore_core::{trace::trace, DType, TensorType};
//! let t = |s: &[usize]| TensorType::new(s, DType::F32);
//! let g = trace("mm", &[t(&[4, 3]), t(&[3, 5])], |x| Ok(vec![x[0].matmul(&x[1])?.relu()?])).unwrap();
//! assert_eq!(g.flops(), 2 * 4 * 5 * 3); // the ReLU adds nothing
//! ```

use super::{Graph, NodeKind};
use crate::op::Op;
use crate::tensor::TensorType;

impl Graph {
    /// FLOP of one run of this graph's products and convolutions (see the module docs).
    /// Branches and loop bodies are not counted: how often they run is known only when
    /// the graph runs.
    pub fn flops(&self) -> u64 {
        self.nodes
            .iter()
            .map(|node| match &node.kind {
                NodeKind::Op { op, args } => {
                    let types: Vec<&TensorType> =
                        args.iter().map(|&a| self.nodes[a].ty()).collect();
                    op_flops(op, &types, node.ty())
                }
                _ => 0,
            })
            .sum()
    }
}

/// FLOP of one op with argument types `args` and result type `out` (0 for ops that are
/// not products or convolutions).
pub fn op_flops(op: &Op, args: &[&TensorType], out: &TensorType) -> u64 {
    // Saturating: a planner asks about whole-cluster shapes.
    let numel = |t: &TensorType| {
        t.shape
            .iter()
            .fold(1u64, |a, &d| a.saturating_mul(d as u64))
    };
    // Multiply-adds per output value of a convolution: one per (input channel of the
    // group, kernel row, kernel column), read off the filter's shape [K, C/g, kh, kw].
    let per_output = |w: &TensorType| {
        w.shape
            .iter()
            .skip(1)
            .fold(1u64, |a, &d| a.saturating_mul(d as u64))
    };
    match op {
        // [.., m, k] x [.., k, n] -> [.., m, n]: k multiply-adds per output value.
        Op::MatMul | Op::MatMulAdd { .. } | Op::MatMulBias { .. } => {
            match args.first().and_then(|a| a.shape.last()) {
                Some(&k) => 2u64.saturating_mul(numel(out)).saturating_mul(k as u64),
                None => 0,
            }
        }
        // (x, w, epilogue operands...) -> y: per y value.
        Op::Conv2d(_) | Op::Conv2dRelu(_) | Op::Conv2dEpilogue { .. } if args.len() >= 2 => 2u64
            .saturating_mul(numel(out))
            .saturating_mul(per_output(args[1])),
        // (dy, w) -> dx: the forward's multiply-adds, per dy value.
        Op::Conv2dBackpropInput { .. } if args.len() == 2 => 2u64
            .saturating_mul(numel(args[0]))
            .saturating_mul(per_output(args[1])),
        // (dy, x) -> dw: the forward's multiply-adds, per dy value.
        Op::Conv2dBackpropFilter { .. } if args.len() == 2 => 2u64
            .saturating_mul(numel(args[0]))
            .saturating_mul(per_output(out)),
        _ => 0,
    }
}
