//! BatchNorm layers as ONNX `BatchNormalization` nodes. Spore's `BatchNorm2d`/`1d` are
//! composites, so a traced network holds each as a chain of reductions and arithmetic
//! under the layer's scope (`Default/layer1/0/bn1/...`); the exporter writes that chain as
//! one node, as PyTorch's exporters do: `training_mode = 0` with the moving statistics
//! at inference, and in a training-mode export `training_mode = 1` with batch statistics
//! and the updated moving statistics as extra graph outputs.
//!
//! ONNX updates the moving variance with the batch's biased variance; Spore (like
//! MindSpore) uses the unbiased one, so an exported training graph's `running_var`
//! output differs from Spore's update by that factor, `n / (n - 1)`, on the batch term.
//!
//! ```no_run
//! use spore_core::{DType, TensorType};
//! use spore_nn::prelude::*;
//! let net = ResNet::resnet18(10).unwrap();
//! let opts = spore_onnx::export::ExportOptions { training: true };
//! spore_onnx::export::export_with(&*net, &[TensorType::new(&[8, 3, 32, 32], DType::F32)], "train.onnx".as_ref(), &opts).unwrap();
//! ```

use std::collections::HashMap;

use spore_core::ir::{Graph, NodeKind};
use spore_nn::cell::{Cell, CellExt};
use spore_nn::layers::norm::{BatchNorm1d, BatchNorm2d, BatchNormState};

/// One BatchNorm layer's chain, found in a traced graph.
#[derive(Clone, Debug)]
pub(super) struct BatchNormNode {
    /// The node whose value the layer returns (where the ONNX node is written).
    pub output: usize,
    pub input: usize,
    /// Parameter nodes of gamma, beta, moving mean and moving variance.
    pub params: [usize; 4],
    pub epsilon: f64,
    pub momentum: f64,
    /// Normalises with the batch's statistics (training mode).
    pub training: bool,
}

fn state_of(cell: &dyn Cell) -> Option<&BatchNormState> {
    let any = cell.as_any()?;
    if let Some(b) = any.downcast_ref::<BatchNorm2d>() {
        return Some(&b.state);
    }
    any.downcast_ref::<BatchNorm1d>().map(|b| &b.state)
}

/// The BatchNorm layers of `net` whose traced chain in `g` has one data input and one
/// result read outside it. A layer called twice, or never, stays as its chain.
pub(super) fn find<C: Cell + ?Sized>(net: &C, g: &Graph, training: bool) -> Vec<BatchNormNode> {
    // Who reads each node, once for all layers.
    let mut readers: Vec<Vec<usize>> = vec![vec![]; g.nodes.len()];
    for (j, n) in g.nodes.iter().enumerate() {
        if let NodeKind::Op { args, .. } = &n.kind {
            for &a in args {
                readers[a].push(j);
            }
        }
    }
    let mut out = vec![];
    for (name, cell) in net.cells_and_names() {
        let Some(state) = state_of(&*cell) else {
            continue;
        };
        let scope = format!("Default/{}/", name.replace('.', "/"));
        if let Some(node) = chain(g, &readers, &scope, state, training) {
            out.push(node);
        }
    }
    out
}

fn chain(
    g: &Graph,
    readers: &[Vec<usize>],
    scope: &str,
    state: &BatchNormState,
    training: bool,
) -> Option<BatchNormNode> {
    let inside = |i: usize| g.nodes[i].name.starts_with(scope);
    let ops: Vec<(usize, &Vec<usize>)> = g
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| match &n.kind {
            NodeKind::Op { args, .. } if inside(i) => Some((i, args)),
            _ => None,
        })
        .collect();
    let mut inputs: Vec<usize> = ops
        .iter()
        .flat_map(|(_, args)| args.iter().copied())
        .filter(|&a| {
            !inside(a) && matches!(g.nodes[a].kind, NodeKind::Op { .. } | NodeKind::Input(_))
        })
        .collect();
    inputs.sort_unstable();
    inputs.dedup();
    let read_outside: Vec<usize> = ops
        .iter()
        .map(|&(i, _)| i)
        .filter(|&i| g.outputs.contains(&i) || readers[i].iter().any(|&j| !inside(j)))
        .collect();
    let ([input], [output]) = (inputs.as_slice(), read_outside.as_slice()) else {
        return None;
    };
    let param_node = |p: &spore_core::Parameter| {
        g.nodes
            .iter()
            .position(|n| matches!(n.kind, NodeKind::Parameter(k) if g.params[k].id() == p.id()))
    };
    Some(BatchNormNode {
        output: *output,
        input: *input,
        params: [
            param_node(&state.gamma)?,
            param_node(&state.beta)?,
            param_node(&state.moving_mean)?,
            param_node(&state.moving_variance)?,
        ],
        epsilon: state.eps,
        momentum: state.momentum,
        training: state.use_batch_statistics.unwrap_or(training),
    })
}

/// The nodes the outputs need, reading each BatchNorm chain as its one node.
pub(super) fn live(g: &Graph, bns: &HashMap<usize, BatchNormNode>) -> Vec<bool> {
    let mut live = vec![false; g.nodes.len()];
    let mut stack: Vec<usize> = g.outputs.clone();
    while let Some(i) = stack.pop() {
        if std::mem::replace(&mut live[i], true) {
            continue;
        }
        if let Some(bn) = bns.get(&i) {
            stack.push(bn.input);
            stack.extend(bn.params);
        } else if let NodeKind::Op { args, .. } = &g.nodes[i].kind {
            stack.extend(args.iter().copied());
        }
    }
    // Graph inputs stay inputs even when nothing reads them.
    for &i in &g.inputs {
        live[i] = true;
    }
    live
}
