//! `recursive_programming`: the choices as a chain, searched Viterbi-style with a beam.

use std::sync::Arc;

use spore_core::Result;
use spore_core::ir::NodeKind;

use super::{Problem, leaf_root};
use crate::sharding::cost::{all_reduce, bytes_of, op_time, redistribution_time};
use crate::sharding::layout::Layout;
use crate::sharding::plan::{LeafReaders, NodeSharding, Stored, plan_node};
use crate::sharding::strategy::Strategy;

impl Problem<'_> {
    /// The choices in graph order as a chain: for each choice's candidates, the best
    /// path to it (Viterbi), each step costing the ops from the previous choice up to
    /// this one on the layouts of the path so far. Exact where each op's term depends on
    /// the nearest choices only (chains of layers); near it elsewhere. Candidates are
    /// first ranked by their own term and only the best `BEAM` kept.
    pub(super) fn chain(&self, weight: f64) -> Result<Vec<usize>> {
        const BEAM: usize = 16;
        let g = self.graph;
        let devices = self.cluster.devices;
        let stored = Stored::initial(g, devices);
        let leaves = LeafReaders::new(g);
        let walk = Walk {
            stored: &stored,
            leaves: &leaves,
            weight,
        };
        let mut states = vec![Path {
            cost: 0.0,
            nodes: Vec::with_capacity(g.nodes.len()),
            picks: vec![],
        }];
        let mut next_node = 0;
        for (id, cands) in &self.choices {
            let id = *id;
            // Rank the candidates on the best path so far.
            let mut ranked: Vec<(f64, usize)> = vec![];
            for (c, st) in cands.iter().enumerate() {
                let t = self.try_step(&walk, &mut states[0].nodes, next_node, id, st, true)?;
                ranked.push((t, c));
            }
            ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
            ranked.truncate(BEAM);
            let mut next: Vec<Path> = vec![];
            for &(_, c) in &ranked {
                let mut best: Option<(f64, usize)> = None;
                for (k, path) in states.iter_mut().enumerate() {
                    let t = path.cost
                        + self.try_step(&walk, &mut path.nodes, next_node, id, &cands[c], false)?;
                    if best.is_none_or(|b| t < b.0) {
                        best = Some((t, k));
                    }
                }
                let Some((cost, k)) = best else { continue };
                let mut nodes = states[k].nodes.clone();
                let mut keep = vec![];
                self.plan_range(&walk, &mut nodes, next_node, id, &mut keep)?;
                let ns = plan_node(g, id, &nodes, Some(("", &cands[c])), &stored, devices)?;
                self.settle(&walk, &mut nodes, id, &ns, &mut keep);
                nodes.push(Arc::new(ns));
                let mut picks = states[k].picks.clone();
                picks.push(c);
                next.push(Path { cost, nodes, picks });
            }
            next.sort_by(|a, b| a.cost.total_cmp(&b.cost));
            states = next;
            next_node = id + 1;
        }
        // The ops after the last choice.
        let mut best: Option<(f64, Vec<usize>)> = None;
        for path in &mut states {
            let mut keep = vec![];
            let t = path.cost
                + self.plan_range(&walk, &mut path.nodes, next_node, g.nodes.len(), &mut keep)?;
            if best.as_ref().is_none_or(|b| t < b.0) {
                best = Some((t, path.picks.clone()));
            }
        }
        Ok(best.map(|b| b.1).unwrap_or_default())
    }

    /// The cost of the ops from `from` up to choice `id` taking strategy `st`, on the
    /// path `nodes`, which is left as it was.
    fn try_step(
        &self,
        walk: &Walk,
        nodes: &mut Vec<Arc<NodeSharding>>,
        from: usize,
        id: usize,
        st: &Strategy,
        lookahead: bool,
    ) -> Result<f64> {
        let len = nodes.len();
        let mut undo = vec![];
        let mut t = self.plan_range(walk, nodes, from, id, &mut undo)?;
        let ns = plan_node(
            self.graph,
            id,
            nodes,
            Some(("", st)),
            walk.stored,
            self.cluster.devices,
        )?;
        self.settle(walk, nodes, id, &ns, &mut undo);
        t += self.local_term(nodes, id, Arc::new(ns), walk.weight, lookahead);
        nodes.truncate(len);
        for (leaf, old) in undo.into_iter().rev() {
            if leaf < len {
                nodes[leaf] = old;
            }
        }
        Ok(t)
    }

    /// Stores the parameters and inputs node `id` is the first reader of in the layouts
    /// its plan wants (as the final plan will), recording what they were in `undo`.
    fn settle(
        &self,
        walk: &Walk,
        nodes: &mut [Arc<NodeSharding>],
        id: usize,
        ns: &NodeSharding,
        undo: &mut Vec<(usize, Arc<NodeSharding>)>,
    ) {
        let Some(plan) = &ns.op else { return };
        for (leaf, layout) in walk.leaves.wishes(self.graph, id, plan) {
            let stored = NodeSharding {
                out: layout,
                op: None,
                strategy: None,
            };
            undo.push((leaf, std::mem::replace(&mut nodes[leaf], Arc::new(stored))));
        }
    }

    /// Plans nodes `from..to` (none of them a choice) onto `nodes` and returns the sum
    /// of their terms.
    fn plan_range(
        &self,
        walk: &Walk,
        nodes: &mut Vec<Arc<NodeSharding>>,
        from: usize,
        to: usize,
        undo: &mut Vec<(usize, Arc<NodeSharding>)>,
    ) -> Result<f64> {
        let g = self.graph;
        let mut total = 0.0;
        for id in from..to {
            let found = self.fixed.find(&g.nodes[id].name);
            let ns = plan_node(g, id, nodes, found, walk.stored, self.cluster.devices)?;
            self.settle(walk, nodes, id, &ns, undo);
            let ns = Arc::new(ns);
            total += self.local_term(nodes, id, ns.clone(), walk.weight, false);
            nodes.push(ns);
        }
        Ok(total)
    }

    /// One op's seconds on the path so far (parameter inputs stored as it wants them),
    /// its memory weighted, and with `lookahead` the AllReduce its summands will need.
    fn local_term(
        &self,
        nodes: &mut Vec<Arc<NodeSharding>>,
        id: usize,
        ns: Arc<NodeSharding>,
        weight: f64,
        lookahead: bool,
    ) -> f64 {
        let g = self.graph;
        let free: Vec<bool> = g.nodes[id]
            .args()
            .iter()
            .map(|&a| self.free_leaf(a))
            .collect();
        let out_partial = ns.out.partial.iter().any(|&a| ns.out.dev[a] > 1);
        let out_bytes = bytes_of(g.nodes[id].ty(), &ns.out);
        let param_bytes: f64 = match (&ns.op, &g.nodes[id].kind) {
            (Some(plan), NodeKind::Op { args, .. }) => args
                .iter()
                .zip(&plan.args)
                // Parameters only (inputs hold no optimizer state): the value, and for a
                // trained one its gradient and optimizer state.
                .filter_map(|(&a, l)| {
                    let p = leaf_root(g, a).filter(|&p| p < g.params.len())?;
                    let per_byte = match g.params[p].requires_grad() {
                        true => 2.0 + self.optimizer_factor,
                        false => 1.0,
                    };
                    Some(bytes_of(g.nodes[a].ty(), l) * per_byte)
                })
                .sum(),
            _ => 0.0,
        };
        let reduce = if lookahead && out_partial {
            let p: usize = ns.out.partial.iter().map(|&a| ns.out.dev[a]).product();
            all_reduce(self.cluster, p, out_bytes)
        } else {
            0.0
        };
        let output = if g.outputs.contains(&id) {
            let whole = Layout::replicated(self.cluster.devices, g.nodes[id].ty().shape.len());
            redistribution_time(self.cluster, g.nodes[id].ty(), &ns.out, &whole, false)
        } else {
            0.0
        };
        let kept = if self.grad[id] && g.nodes[id].op().is_some() {
            out_bytes
        } else {
            0.0
        };
        nodes.push(ns);
        let (compute, comm) = op_time(g, nodes, id, self.cluster, &self.grad, &free);
        nodes.pop();
        compute + comm + reduce + output + weight * (kept + param_bytes)
    }
}

/// What every step of one chain search shares.
struct Walk<'a> {
    stored: &'a Stored,
    leaves: &'a LeafReaders,
    weight: f64,
}

/// A path of the chain search: its cost, the plans of the nodes so far, its picks.
struct Path {
    cost: f64,
    nodes: Vec<Arc<NodeSharding>>,
    picks: Vec<usize>,
}
