//! The graph IR that tracing produces: typed SSA, nodes in topological order, each with
//! the operator, a MindSpore-style full scope name (`Default/network/conv1/Conv2D-op12`)
//! and the user's source location. Printed as `.ir` text ([`printer`]) and Graphviz
//! ([`dot`]), checked by [`verify`], and run by the reference [`interpret`]er.
//!
//! ```
//! use spore_core::{trace::trace, DType, TensorType};
//! let g = trace("square", &[TensorType::new(&[2], DType::F32)], |x| Ok(vec![x[0].mul(&x[0])?])).unwrap();
//! assert_eq!(g.nodes.len(), 2); // the input and one Mul
//! g.verify().unwrap();
//! ```

pub mod dot;
pub mod flops;
pub mod interpret;
pub mod printer;
pub mod verify;

use crate::error::SourceLocation;
use crate::op::Op;
use crate::parameter::Parameter;
use crate::tensor::{Tensor, TensorType};

/// Index of a node in [`Graph::nodes`]; every node defines one value.
pub type ValueId = usize;

/// What a node computes.
#[derive(Clone, Debug)]
pub enum NodeKind {
    /// The `i`-th argument of the graph.
    Input(usize),
    /// The current value of `graph.params[i]`, read when the graph runs.
    Parameter(usize),
    /// The `i`-th fresh random key (Int64 scalar) supplied at each run.
    RandomKey(usize),
    /// A value captured while tracing.
    Constant(Tensor),
    /// A primitive applied to earlier values.
    Op { op: Op, args: Vec<ValueId> },
    /// `if pred { then_branch(then_args) } else { else_branch(else_args) }`. Each branch's
    /// arguments are the operands followed by the outer values it captured. The node's
    /// outputs are read with `GetItem`.
    Cond {
        pred: ValueId,
        then_args: Vec<ValueId>,
        else_args: Vec<ValueId>,
        then_branch: Box<Graph>,
        else_branch: Box<Graph>,
    },
    /// `state = init; while cond(state, cond_args) { state = body(state, body_args) }`;
    /// the `*_args` are outer values the sub-graphs captured.
    While {
        init: Vec<ValueId>,
        cond_args: Vec<ValueId>,
        body_args: Vec<ValueId>,
        cond: Box<Graph>,
        body: Box<Graph>,
    },
    /// Output `index` of a multi-output node (`Cond`, `While`).
    GetItem { of: ValueId, index: usize },
}

#[derive(Clone, Debug)]
pub struct Node {
    pub kind: NodeKind,
    /// The types of the node's outputs (one, except for `Cond`/`While`).
    pub types: Vec<TensorType>,
    /// Full scope name, unique in the graph.
    pub name: String,
    /// The user's call site, when known.
    pub location: Option<SourceLocation>,
}

impl Node {
    /// The type of the node's (first) value.
    pub fn ty(&self) -> &TensorType {
        &self.types[0]
    }

    /// Values this node reads.
    pub fn args(&self) -> Vec<ValueId> {
        match &self.kind {
            NodeKind::Op { args, .. } => args.clone(),
            NodeKind::Cond {
                pred,
                then_args,
                else_args,
                ..
            } => std::iter::once(*pred)
                .chain(then_args.iter().copied())
                .chain(else_args.iter().copied())
                .collect(),
            NodeKind::While {
                init,
                cond_args,
                body_args,
                ..
            } => init
                .iter()
                .chain(cond_args)
                .chain(body_args)
                .copied()
                .collect(),
            NodeKind::GetItem { of, .. } => vec![*of],
            _ => vec![],
        }
    }

    /// Applies `f` to every argument reference of the node.
    pub fn map_args(&mut self, mut f: impl FnMut(&mut ValueId)) {
        match &mut self.kind {
            NodeKind::Op { args, .. } => args.iter_mut().for_each(f),
            NodeKind::Cond {
                pred,
                then_args,
                else_args,
                ..
            } => {
                f(pred);
                then_args.iter_mut().chain(else_args.iter_mut()).for_each(f);
            }
            NodeKind::While {
                init,
                cond_args,
                body_args,
                ..
            } => init
                .iter_mut()
                .chain(cond_args.iter_mut())
                .chain(body_args.iter_mut())
                .for_each(f),
            NodeKind::GetItem { of, .. } => f(of),
            _ => {}
        }
    }

    /// The op, for `Op` nodes.
    pub fn op(&self) -> Option<&Op> {
        match &self.kind {
            NodeKind::Op { op, .. } => Some(op),
            _ => None,
        }
    }
}

/// A traced function.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub name: String,
    pub nodes: Vec<Node>,
    /// Node ids of `Input(0)`, `Input(1)`, ...
    pub inputs: Vec<ValueId>,
    /// Parameters read by the graph (node kind `Parameter(i)` reads `params[i]`).
    pub params: Vec<Parameter>,
    /// Number of `RandomKey` nodes.
    pub num_keys: usize,
    pub outputs: Vec<ValueId>,
    /// New parameter values to store after a run: (index into `params`, value).
    pub updates: Vec<(usize, ValueId)>,
}

impl Graph {
    /// Appends a node and returns its id.
    pub fn push(
        &mut self,
        kind: NodeKind,
        types: Vec<TensorType>,
        name: String,
        location: Option<SourceLocation>,
    ) -> ValueId {
        self.nodes.push(Node {
            kind,
            types,
            name,
            location,
        });
        self.nodes.len() - 1
    }

    /// How many `Op` nodes the graph has.
    pub fn op_count(&self) -> usize {
        self.nodes.iter().filter(|n| n.op().is_some()).count()
    }

    /// Number of uses of each value (as an argument, an output or an update).
    pub fn use_counts(&self) -> Vec<usize> {
        let mut uses = vec![0; self.nodes.len()];
        for n in &self.nodes {
            for a in n.args() {
                uses[a] += 1;
            }
        }
        for &o in &self.outputs {
            uses[o] += 1;
        }
        for &(_, v) in &self.updates {
            uses[v] += 1;
        }
        uses
    }

    /// Rewrites every reference to value `from` into `to` (arguments, outputs, updates).
    pub fn replace_uses(&mut self, from: ValueId, to: ValueId) {
        let map = |v: &mut ValueId| {
            if *v == from {
                *v = to
            }
        };
        for n in &mut self.nodes {
            n.map_args(map);
        }
        self.outputs.iter_mut().for_each(map);
        self.updates.iter_mut().for_each(|(_, v)| map(v));
    }

    /// Keeps the nodes for which `keep[i]` holds, renumbering references. Kept nodes must
    /// only reference kept nodes.
    pub fn retain(&mut self, keep: &[bool]) {
        let mut remap = vec![usize::MAX; self.nodes.len()];
        let mut next = 0;
        for (i, &k) in keep.iter().enumerate() {
            if k {
                remap[i] = next;
                next += 1;
            }
        }
        let old = std::mem::take(&mut self.nodes);
        for (i, mut n) in old.into_iter().enumerate() {
            if !keep[i] {
                continue;
            }
            let map = |v: &mut ValueId| *v = remap[*v];
            n.map_args(map);
            self.nodes.push(n);
        }
        self.inputs.iter_mut().for_each(|v| *v = remap[*v]);
        self.outputs.iter_mut().for_each(|v| *v = remap[*v]);
        self.updates.iter_mut().for_each(|(_, v)| *v = remap[*v]);
    }
}
