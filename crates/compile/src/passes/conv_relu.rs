//! A ReLU that is a convolution's only reader joins it: `relu(Conv2D(x, w))` becomes one
//! `Conv2DReLU(x, w)`, which applies the ReLU as it writes its output instead of in a
//! second pass over it (the `conv_relu` stage of fusion, skipped while a dump runs so that
//! dumps keep the source ops).
//!
//! ```
//! use spore_compile::{pass::Pass, passes::{Dce, FuseElementwise}};
//! use spore_core::prims::conv::Conv2dOptions;
//! use spore_core::{trace::trace, DType, TensorType};
//! let types = [TensorType::new(&[1, 1, 6, 6], DType::F32), TensorType::new(&[2, 1, 3, 3], DType::F32)];
//! let mut g = trace("f", &types, |x| Ok(vec![x[0].conv2d(&x[1], &Conv2dOptions::default())?.relu()?])).unwrap();
//! FuseElementwise.run(&mut g).unwrap();
//! Dce.run(&mut g).unwrap();
//! assert!(g.to_ir().contains("= Conv2DReLU("));
//! ```

use spore_core::ir::{Graph, NodeKind};
use spore_core::op::Op;
use spore_kernels::UnaryFn;

/// Rewrites every match in place (the ReLU node becomes the fused op); the convolution is
/// left for DCE. Returns whether anything changed.
pub(crate) fn fold_relu_into_convolution(g: &mut Graph) -> bool {
    let uses = g.use_counts();
    let mut changed = false;
    for r in 0..g.nodes.len() {
        let NodeKind::Op {
            op: Op::Unary(UnaryFn::Relu),
            args,
        } = &g.nodes[r].kind
        else {
            continue;
        };
        let c = args[0];
        let NodeKind::Op {
            op: Op::Conv2d(attrs),
            args: conv_args,
        } = &g.nodes[c].kind
        else {
            continue;
        };
        // `uses` counts graph outputs and updates too: the convolution's value must not
        // be needed anywhere but in this ReLU.
        if uses[c] != 1 || g.nodes[c].ty() != g.nodes[r].ty() {
            continue;
        }
        g.nodes[r].kind = NodeKind::Op {
            op: Op::Conv2dRelu(*attrs),
            args: conv_args.clone(),
        };
        changed = true;
    }
    changed
}

/// The `conv_relu` stage.
pub struct ConvRelu;

impl crate::pass::Pass for ConvRelu {
    fn name(&self) -> &'static str {
        "conv_relu"
    }

    fn run(&self, g: &mut Graph) -> spore_core::Result<bool> {
        Ok(fold_relu_into_convolution(g))
    }
}
