//! Freezing: an inference cell traced once in evaluation mode, with every parameter
//! replaced by its current value and every computation on weights alone done now, at
//! generation time (BatchNorm's `gamma / sqrt(var + eps)`, a Dense layer's transposed
//! weight). What is left computes on the inputs.
//!
//! ```
//! use spore_codegen::freeze::freeze;
//! use spore_core::{DType, TensorType};
//! use spore_core::ir::NodeKind;
//! use spore_nn::prelude::*;
//! let net = Dense::new(4, 3).unwrap();
//! let frozen = freeze(&*net, &[TensorType::new(&[1, 4], DType::F32)]).unwrap();
//! let g = &frozen.graph;
//! // The transposed weight is a constant now; only the product and the bias remain.
//! assert_eq!(g.op_count(), 2);
//! assert!(g.nodes.iter().all(|n| !matches!(n.kind, NodeKind::Parameter(_))));
//! assert_eq!(frozen.origins[2], ["weight"]); // the transposed weight came from `weight`
//! ```

use std::panic::Location;

use spore_core::apply::{apply, no_grad};
use spore_core::ir::{Graph, NodeKind};
use spore_core::{Error, Result, TensorType, trace};
use spore_nn::cell::{Cell, CellExt};

/// A graph whose parameters are constants.
#[derive(Clone, Debug)]
pub struct Frozen {
    pub graph: Graph,
    /// For each node, the parameters its constant value was computed from (empty for
    /// values computed from the inputs): weight arrays are named after them.
    pub origins: Vec<Vec<String>>,
}

/// Traces `cell` in evaluation mode for `inputs` and folds its weights in. The cell's
/// training flag is restored afterwards.
pub fn freeze<C: Cell + ?Sized>(cell: &C, inputs: &[TensorType]) -> Result<Frozen> {
    // Full dotted names (`fc1.weight`) for the weight arrays: a parent names its
    // children's parameters when it lists them.
    let _ = cell.parameters_and_names();
    let was_training = cell.is_training();
    cell.set_train(false);
    let traced = trace::trace(cell.class_name(), inputs, |x| {
        spore_nn::call::construct_as_root(cell, x)
    });
    cell.set_train(was_training);
    freeze_graph(traced?)
}

/// Folds the parameters of an inference graph (a compiled evaluation graph, or one
/// traced by hand) into constants.
pub fn freeze_graph(mut g: Graph) -> Result<Frozen> {
    if let Some((p, _)) = g.updates.first() {
        return Err(Error::invalid(format!(
            "codegen: graph {} updates parameter {} when it runs; generated code is for inference (call set_train(false), or remove the update)",
            g.name,
            g.params[*p].name()
        )));
    }
    if g.num_keys > 0 {
        return Err(Error::invalid(format!(
            "codegen: graph {} draws random numbers ({} keys); generated code is deterministic inference (dropout is the identity in evaluation mode)",
            g.name, g.num_keys
        )));
    }
    let mut origins: Vec<Vec<String>> = vec![vec![]; g.nodes.len()];
    for i in 0..g.nodes.len() {
        let folded = match &g.nodes[i].kind {
            NodeKind::Parameter(p) => {
                origins[i] = vec![g.params[*p].name()];
                Some(g.params[*p].stored())
            }
            NodeKind::Op { op, args } if !op.is_side_effect() => {
                let consts: Option<Vec<_>> = args
                    .iter()
                    .map(|&a| match &g.nodes[a].kind {
                        NodeKind::Constant(t) => Some(t.clone()),
                        _ => None,
                    })
                    .collect();
                match consts {
                    Some(c) => {
                        let mut from: Vec<String> = vec![];
                        for &a in args {
                            for name in &origins[a] {
                                if !from.contains(name) {
                                    from.push(name.clone());
                                }
                            }
                        }
                        origins[i] = from;
                        let refs: Vec<_> = c.iter().collect();
                        let at = g.nodes[i].location.unwrap_or(Location::caller());
                        Some(no_grad(|| apply(op.clone(), &refs, at))?)
                    }
                    None => None,
                }
            }
            _ => None,
        };
        if let Some(t) = folded {
            g.nodes[i].kind = NodeKind::Constant(t);
        }
    }
    Ok(Frozen { graph: g, origins })
}
