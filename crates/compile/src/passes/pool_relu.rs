//! ReLU's gradient folded into max pooling's: `select(y > 0, MaxPoolGrad(y, dy), 0)`,
//! where `y` is a ReLU's output that was max-pooled, becomes one `MaxPoolGradReLU(y, dy)`,
//! which masks each plane of the gradient while it is still in cache (the `pool_relu`
//! stage of fusion, skipped while a dump runs so that dumps keep the source ops). LeNet's
//! first ReLU gradient was a pass of its own over the first convolution's output.
//!
//! ```
//! use spore_compile::{pass::Pass, passes::{Dce, FuseElementwise}};
//! use spore_core::prims::pool::Pool2dOptions;
//! use spore_core::{grad, trace::trace, DType, TensorType};
//! let pooled_relu_sum = |x: &[spore_core::Tensor]| {
//!     x[0].relu()?.max_pool2d(&Pool2dOptions::new(2, 2))?.sum(&[], false)
//! };
//! let d = grad(pooled_relu_sum, &[0]);
//! let mut g = trace("f", &[TensorType::new(&[1, 1, 4, 4], DType::F32)], |x| d(x)).unwrap();
//! FuseElementwise.run(&mut g).unwrap();
//! Dce.run(&mut g).unwrap();
//! assert!(g.to_ir().contains("= MaxPoolGradReLU("));
//! ```

use spore_core::ir::{Graph, NodeKind, ValueId};
use spore_core::op::Op;
use spore_kernels::CompareFn;

/// Rewrites every match in place; the masked comparison and the plain gradient are left
/// for DCE. Returns whether anything changed.
pub(crate) fn fold_relu_gradient_into_pool_gradient(g: &mut Graph) -> bool {
    let uses = g.use_counts();
    let mut changed = false;
    for s in 0..g.nodes.len() {
        let NodeKind::Op {
            op: Op::Select,
            args,
        } = &g.nodes[s].kind
        else {
            continue;
        };
        let &[cond, grad, zero] = args.as_slice() else {
            continue;
        };
        let Some((y, bound)) = compared_above(g, cond) else {
            continue;
        };
        let NodeKind::Op {
            op: Op::MaxPool2dGrad(attrs),
            args: pool_args,
        } = &g.nodes[grad].kind
        else {
            continue;
        };
        let matches = pool_args[0] == y
            && uses[grad] == 1
            && is_zero(g, zero)
            && is_zero(g, bound)
            && g.nodes[s].ty() == g.nodes[grad].ty();
        if !matches {
            continue;
        }
        let (attrs, dy) = (*attrs, pool_args[1]);
        g.nodes[s].kind = NodeKind::Op {
            op: Op::MaxPool2dGradOfRelu(attrs),
            args: vec![y, dy],
        };
        changed = true;
    }
    changed
}

/// `(y, bound)` when `cond` is `y > bound`.
fn compared_above(g: &Graph, cond: ValueId) -> Option<(ValueId, ValueId)> {
    match &g.nodes[cond].kind {
        NodeKind::Op {
            op: Op::Compare(CompareFn::Greater),
            args,
        } => Some((args[0], args[1])),
        _ => None,
    }
}

/// True for a constant scalar 0.
fn is_zero(g: &Graph, v: ValueId) -> bool {
    match &g.nodes[v].kind {
        NodeKind::Constant(t) => t.numel() == 1 && t.item().is_ok_and(|x| x == 0.0),
        _ => false,
    }
}

/// The `pool_relu` stage.
pub struct PoolRelu;

impl crate::pass::Pass for PoolRelu {
    fn name(&self) -> &'static str {
        "pool_relu"
    }

    fn run(&self, g: &mut Graph) -> spore_core::Result<bool> {
        Ok(fold_relu_gradient_into_pool_gradient(g))
    }
}
