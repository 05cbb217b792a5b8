//! Sums of matrix products accumulate in the products' epilogues: `P0 + P1 + P2`, each
//! `Pi = Ai · Bi`, becomes `MatMulAdd(A2, B2, MatMulAdd(A1, B1, P0))`, so each product
//! adds the running sum as it stores its tiles instead of being written out and read
//! back by a loop. This is a weight's gradient summed over micro-batches (a pipeline
//! stage), or over the uses of a shared weight.
//!
//! ```
//! use spore_compile::{pass::Pass, passes::ProductSums};
//! use spore_core::{trace::trace, DType, TensorType};
//! let t = |r, c| TensorType::new(&[r, c], DType::F32);
//! let types = [t(8, 4), t(8, 6), t(8, 4), t(8, 6), t(8, 4), t(8, 6)];
//! let mut g = trace("grads", &types, |x| {
//!     let dw = |a: usize| x[a].transpose()?.matmul(&x[a + 1]);
//!     Ok(vec![dw(0)?.add(&dw(2)?)?.add(&dw(4)?)?])
//! }).unwrap();
//! ProductSums.run(&mut g).unwrap();
//! assert_eq!(g.to_ir().matches("= MatMulAdd(").count(), 2, "{}", g.to_ir());
//! ```
//!
//! It runs before the elementwise loops are built (which would take the additions into
//! one loop over every product), and only where both addends are products or such
//! sums: `m * 0.9 + dW` is left to `matmul_epilogue`, which folds the scale too. The
//! kernel adds the addend to each finished tile, so results keep their bits.

use spore_core::ir::{Graph, NodeKind};
use spore_core::op::Op;
use spore_kernels::BinaryFn;

/// One pass over the graph in node order (so a chain folds link by link).
pub struct ProductSums;

/// Whether `v` is a float32/float64 matrix product (both factors matrices), or an
/// accumulation this pass made.
fn is_sum_of_products(g: &Graph, v: usize) -> bool {
    let ty = g.nodes[v].ty();
    if !ty.dtype.is_float() || ty.dtype.is_half() || ty.rank() != 2 {
        return false;
    }
    match g.nodes[v].op() {
        Some(Op::MatMul) => g.nodes[v]
            .args()
            .iter()
            .all(|&f| g.nodes[f].ty().rank() == 2),
        Some(Op::MatMulAdd { beta_bits }) => f64::from_bits(*beta_bits) == 1.0,
        _ => false,
    }
}

impl crate::pass::Pass for ProductSums {
    fn name(&self) -> &'static str {
        "product_sums"
    }

    fn run(&self, g: &mut Graph) -> spore_core::Result<bool> {
        let uses = g.use_counts();
        let mut changed = false;
        for r in 0..g.nodes.len() {
            let NodeKind::Op {
                op: Op::Binary(BinaryFn::Add),
                args,
            } = &g.nodes[r].kind
            else {
                continue;
            };
            let (x, y) = (args[0], args[1]);
            let same = |v: usize| g.nodes[v].ty() == g.nodes[r].ty();
            if x == y || !same(x) || !same(y) {
                continue;
            }
            if !(is_sum_of_products(g, x) && is_sum_of_products(g, y)) {
                continue;
            }
            // The product folded in must be read by this sum alone (it is never stored).
            let plain = |v: usize| matches!(g.nodes[v].op(), Some(Op::MatMul)) && uses[v] == 1;
            let (product, addend) = match (plain(y), plain(x)) {
                (true, _) => (y, x),
                (false, true) => (x, y),
                _ => continue,
            };
            let factors = g.nodes[product].args();
            g.nodes[r].kind = NodeKind::Op {
                op: Op::MatMulAdd {
                    beta_bits: 1.0f64.to_bits(),
                },
                args: vec![factors[0], factors[1], addend],
            };
            changed = true;
        }
        Ok(changed)
    }
}
