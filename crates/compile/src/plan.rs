//! Memory planning: liveness of every value, so the executor can release each buffer
//! right after its last use (and hand it to a later node of the same size).
//!
//! ```
//! use spore_compile::plan::MemoryPlan;
//! use spore_core::{trace::trace, DType, TensorType};
//! let g = trace("f", &[TensorType::new(&[4], DType::F32)], |x| Ok(vec![x[0].exp()?.neg()?])).unwrap();
//! let plan = MemoryPlan::new(&g);
//! assert_eq!(plan.free_after[2], vec![1]); // exp's result dies at neg
//! ```

use std::fmt::Write;

use spore_core::ir::{Graph, NodeKind, ValueId};

#[derive(Clone, Debug)]
pub struct MemoryPlan {
    /// For each node, the values whose last use it is (released after it runs).
    pub free_after: Vec<Vec<ValueId>>,
    /// Peak number of bytes of values alive at once, by liveness (an update written over
    /// its parameter's buffer, see `donates`, counted once).
    pub peak_bytes: usize,
    /// For each node, the parameter whose new value it computes into that parameter's own
    /// buffer, when the executor can lend it (see [`donations`]).
    pub donates: Vec<Option<usize>>,
}

/// Parameters whose buffer their update may overwrite: node `v` computes parameter `p`'s
/// new value, is the last reader of `p`'s current value, and runs after every node that
/// can fail on values (so a failed step leaves every parameter as it was). Whether the
/// op writes in place is decided when it runs (its kernel, and nobody else holding the
/// value).
fn donations(g: &Graph, free_after: &[Vec<ValueId>]) -> Vec<Option<usize>> {
    let may_fail = |n: &spore_core::ir::Node| match &n.kind {
        NodeKind::Op { op, .. } => op.may_fail_on_values(),
        NodeKind::Cond { .. } | NodeKind::While { .. } => true,
        _ => false,
    };
    let from = g.nodes.iter().rposition(may_fail).map_or(0, |i| i + 1);
    let mut donates = vec![None; g.nodes.len()];
    for &(p, v) in &g.updates {
        let NodeKind::Op { args, .. } = &g.nodes[v].kind else {
            continue;
        };
        let reads_p = |a: &&ValueId| matches!(g.nodes[**a].kind, NodeKind::Parameter(k) if k == p);
        if v >= from
            && args
                .iter()
                .find(reads_p)
                .is_some_and(|a| free_after[v].contains(a))
        {
            donates[v] = Some(p);
        }
    }
    donates
}

/// Whether `node`, lent an input's buffer, writes its result there: a float32 or float64
/// loop, or `MatMulAdd` (as `spore_core::prims::in_place::accepts_lent_buffer` decides
/// when the step runs; a 16-bit result, and any other op, takes a buffer of its own).
fn writes_over_an_input(node: &spore_core::ir::Node) -> bool {
    let out = node.ty().dtype;
    match node.op() {
        Some(spore_core::op::Op::Fused(p)) => !out.is_half() && out == p.compute,
        Some(spore_core::op::Op::MatMulAdd { .. }) => !out.is_half(),
        _ => false,
    }
}

impl MemoryPlan {
    pub fn new(g: &Graph) -> MemoryPlan {
        let n = g.nodes.len();
        let mut last_use: Vec<Option<usize>> = vec![None; n];
        for (i, node) in g.nodes.iter().enumerate() {
            for a in node.args() {
                last_use[a] = Some(i);
            }
        }
        // Outputs and parameter updates live to the end; so do constants (owned by the graph).
        let mut pinned = vec![false; n];
        for &v in g.outputs.iter().chain(g.updates.iter().map(|(_, v)| v)) {
            pinned[v] = true;
        }
        let mut free_after = vec![vec![]; n];
        for v in 0..n {
            if pinned[v] || matches!(g.nodes[v].kind, NodeKind::Constant(_)) {
                continue;
            }
            // A value nobody reads is released right after it is made.
            free_after[last_use[v].unwrap_or(v)].push(v);
        }
        let donates = donations(g, &free_after);
        let mut live = 0usize;
        let mut peak = 0usize;
        let bytes = |v: usize| {
            g.nodes[v]
                .types
                .iter()
                .map(|t| t.numel() * t.dtype.size_in_bytes())
                .sum::<usize>()
        };
        for (i, frees) in free_after.iter().enumerate() {
            // An update written over its parameter's buffer takes no new bytes: the
            // parameter's value ends there (it is the update's last reader).
            let reused = donates[i]
                .filter(|_| writes_over_an_input(&g.nodes[i]))
                .and_then(|p| {
                    g.nodes[i]
                        .args()
                        .into_iter()
                        .find(|&a| matches!(g.nodes[a].kind, NodeKind::Parameter(k) if k == p))
                });
            live += bytes(i);
            if let Some(a) = reused {
                live -= bytes(a);
            }
            peak = peak.max(live);
            for &v in frees {
                if Some(v) != reused {
                    live -= bytes(v);
                }
            }
        }
        MemoryPlan {
            donates,
            free_after,
            peak_bytes: peak,
        }
    }

    /// The plan as text, appended to the `.ir` of the planned graph.
    pub fn describe(&self, g: &Graph) -> String {
        let mut out = format!(
            "# memory plan: peak {} bytes of live values\n",
            self.peak_bytes
        );
        for (i, donated) in self.donates.iter().enumerate() {
            if let Some(p) = donated {
                let _ = writeln!(
                    out,
                    "#   %{i} ({}) may write param {p} ({}) over its current value",
                    g.nodes[i].name,
                    g.params[*p].name()
                );
            }
        }
        for (i, frees) in self.free_after.iter().enumerate() {
            if !frees.is_empty() {
                let list: Vec<String> = frees.iter().map(|v| format!("%{v}")).collect();
                let _ = writeln!(
                    out,
                    "#   after %{i} ({}): release {}",
                    g.nodes[i].name,
                    list.join(", ")
                );
            }
        }
        out
    }
}
