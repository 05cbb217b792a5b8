//! Constant folding: an op whose arguments are all constants is computed at compile time
//! (up to a size limit, so folding cannot blow up the graph).
//!
//! ```
//! use spore_compile::{pass::Pass, passes::ConstFold};
//! use spore_core::ir::{Graph, NodeKind};
//! use spore_core::op::Op;
//! use spore_core::{Tensor, TensorType, DType};
//! use spore_kernels::UnaryFn;
//! // Tracing already computes ops on concrete values; folding catches what other passes
//! // (or hand-built graphs) leave behind.
//! let mut g = Graph::default();
//! let ty = TensorType::new(&[], DType::F32);
//! let c = g.push(NodeKind::Constant(Tensor::scalar(0.0f32)), vec![ty.clone()], "c".into(), None);
//! let e = g.push(NodeKind::Op { op: Op::Unary(UnaryFn::Exp), args: vec![c] }, vec![ty], "e".into(), None);
//! g.outputs.push(e);
//! assert!(ConstFold.run(&mut g).unwrap());
//! assert!(matches!(&g.nodes[e].kind, NodeKind::Constant(t) if t.item().unwrap() == 1.0));
//! ```

use std::panic::Location;

use spore_core::Result;
use spore_core::apply::{apply, no_grad};
use spore_core::ir::{Graph, NodeKind};
use spore_core::op::Op;

use crate::pass::Pass;

pub struct ConstFold;

/// Results larger than this stay computed at run time.
const MAX_FOLDED_ELEMENTS: usize = 1 << 16;

impl Pass for ConstFold {
    fn name(&self) -> &'static str {
        "const_fold"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut changed = false;
        for i in 0..g.nodes.len() {
            let NodeKind::Op { op, args } = &g.nodes[i].kind else {
                continue;
            };
            if matches!(op, Op::Custom(_))
                || op.is_side_effect()
                || g.nodes[i].ty().numel() > MAX_FOLDED_ELEMENTS
            {
                continue;
            }
            let consts: Option<Vec<_>> = args
                .iter()
                .map(|&a| match &g.nodes[a].kind {
                    NodeKind::Constant(t) => Some(t.clone()),
                    _ => None,
                })
                .collect();
            let Some(consts) = consts else { continue };
            let refs: Vec<_> = consts.iter().collect();
            let value = no_grad(|| {
                apply(
                    op.clone(),
                    &refs,
                    g.nodes[i].location.unwrap_or(Location::caller()),
                )
            })?;
            g.nodes[i].kind = NodeKind::Constant(value);
            changed = true;
        }
        Ok(changed)
    }
}
