//! Automatic parallelism: strategies for the products and convolutions of a graph,
//! chosen to minimise the cost model's step time within the devices' memory.
//!
//! ```
//! use spore_core::{DType, TensorType};
//! use spore_nn::prelude::*;
//! use spore_parallel::sharding::{search, Cluster, SearchMode, Strategies};
//! let net = WithLossCell::new(
//!     SequentialCell::new(vec![Dense::new(64, 256).unwrap(), ReLU::new(), Dense::new(256, 8).unwrap()]),
//!     MSELoss::new(Reduction::Mean),
//! );
//! let types = [TensorType::new(&[32, 64], DType::F32), TensorType::new(&[32, 8], DType::F32)];
//! let g = spore_core::trace::trace("mlp", &types, |x| net.call(x)).unwrap();
//! let cluster = Cluster::example(4);
//! let exact = search(&g, &cluster, SearchMode::DynamicProgramming, &Strategies::new(), 1.0).unwrap();
//! let fast = search(&g, &cluster, SearchMode::RecursiveProgramming, &Strategies::new(), 1.0).unwrap();
//! assert!(exact.cost.step_time() <= fast.cost.step_time() * (1.0 + 1e-9));
//! ```
//!
//! The choices are the strategies of each MatMul and Conv2D (every split of its
//! dimensions over all the ranks); the other ops follow their inputs, and strategies
//! the user set stay fixed.
//!
//! - `dynamic_programming` is exact for the cost model: the step time is a sum of
//!   per-op terms, each depending on the few choices that decide its inputs' layouts,
//!   and variable elimination over those terms finds the minimum. Its work grows with
//!   the number of choices that meet in one term, so it is slow on large graphs.
//! - `recursive_programming` treats the choices as a chain in graph order and keeps,
//!   for each candidate of each choice, the best path to it (Viterbi), the ops between
//!   two choices costed on the path's layouts; candidates are pre-ranked by their own
//!   term and a beam of the best few kept: linear in the graph's size.
//! - `sharding_propagation` searches nothing: the user's strategies, the rest following.
//!
//! A plan over the devices' memory is refused; the search then weighs memory against
//! time until a plan fits, or fails naming the smallest plan's size.

use spore_core::ir::{Graph, NodeKind};
use spore_core::{Error, Result};

mod candidates;
mod chain;
mod eliminate;

use super::cost::{Cluster, Cost, bytes_of, needs_grad, op_time, plan_cost, redistribution_time};
use super::layout::Layout;
use super::plan::{ShardingPlan, is_view, plan_graph, plan_graph_local_inputs};
use super::strategy::{Strategies, Strategy};

pub use candidates::candidates;

/// MindSpore's `search_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchMode {
    DynamicProgramming,
    RecursiveProgramming,
    ShardingPropagation,
}

impl SearchMode {
    pub fn parse(s: &str) -> Result<SearchMode> {
        match s {
            "dynamic_programming" => Ok(SearchMode::DynamicProgramming),
            "recursive_programming" => Ok(SearchMode::RecursiveProgramming),
            "sharding_propagation" => Ok(SearchMode::ShardingPropagation),
            _ => Err(Error::invalid(format!(
                "search_mode must be one of dynamic_programming, recursive_programming, sharding_propagation; got {s:?}"
            ))),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            SearchMode::DynamicProgramming => "dynamic_programming",
            SearchMode::RecursiveProgramming => "recursive_programming",
            SearchMode::ShardingPropagation => "sharding_propagation",
        }
    }
}

/// A search's answer: the strategies (the user's and the chosen, by node name), the plan
/// they give and its cost.
#[derive(Clone, Debug)]
pub struct Searched {
    pub strategies: Strategies,
    pub plan: ShardingPlan,
    pub cost: Cost,
}

/// Searches strategies for `graph` on `cluster` (see the module docs), every rank given
/// the whole inputs (`full_batch`). `optimizer_factor`: optimizer state bytes per
/// parameter byte.
pub fn search(
    graph: &Graph,
    cluster: &Cluster,
    mode: SearchMode,
    fixed: &Strategies,
    optimizer_factor: f64,
) -> Result<Searched> {
    search_inputs(graph, cluster, mode, fixed, optimizer_factor, false)
}

/// [`search`] for ranks each given their block of the batch (`full_batch` off): the
/// inputs' layouts are fixed, and moving them to what an op wants is costed.
pub fn search_given_blocks(
    graph: &Graph,
    cluster: &Cluster,
    mode: SearchMode,
    fixed: &Strategies,
    optimizer_factor: f64,
) -> Result<Searched> {
    search_inputs(graph, cluster, mode, fixed, optimizer_factor, true)
}

fn search_inputs(
    graph: &Graph,
    cluster: &Cluster,
    mode: SearchMode,
    fixed: &Strategies,
    optimizer_factor: f64,
    local_inputs: bool,
) -> Result<Searched> {
    let problem = Problem::new(graph, cluster, fixed, optimizer_factor, local_inputs)?;
    // Weigh memory in only when the fastest plan does not fit: seconds per byte,
    // raised until the plan fits.
    let mut weight = 0.0;
    let mut smallest = f64::INFINITY;
    for _ in 0..12 {
        let choice = match mode {
            SearchMode::ShardingPropagation => vec![],
            SearchMode::DynamicProgramming => problem.eliminate(weight)?,
            SearchMode::RecursiveProgramming => problem.chain(weight)?,
        };
        let mut found = problem.finish(&choice)?;
        // Never worse than data parallelism where every op can take it: a chain search
        // can miss it (seen with inputs given as blocks).
        if let Some(pick) = problem.batch_split(&choice) {
            let dp = problem.finish(&pick)?;
            let fits = |f: &Searched| f.cost.memory() <= cluster.memory;
            if fits(&dp) && (!fits(&found) || dp.cost.step_time() < found.cost.step_time()) {
                found = dp;
            }
        }
        if found.cost.memory() <= cluster.memory {
            return Ok(found);
        }
        smallest = smallest.min(found.cost.memory());
        if mode == SearchMode::ShardingPropagation {
            break;
        }
        let time = found.cost.step_time().max(1e-9);
        weight = if weight == 0.0 {
            time / found.cost.memory()
        } else {
            weight * 4.0
        };
    }
    Err(Error::invalid(format!(
        "no {} plan of graph '{}' fits in {:.3} GB per device; the smallest found needs {:.3} GB",
        mode.name(),
        graph.name,
        cluster.memory / 1e9,
        smallest / 1e9
    )))
}

/// Every assignment of the choices, each costed whole: the reference the exact search
/// is tested against. Refuses more than `limit` assignments.
pub fn brute_force(
    graph: &Graph,
    cluster: &Cluster,
    fixed: &Strategies,
    optimizer_factor: f64,
    limit: usize,
) -> Result<Searched> {
    let problem = Problem::new(graph, cluster, fixed, optimizer_factor, false)?;
    let sizes: Vec<usize> = problem.choices.iter().map(|c| c.1.len()).collect();
    let total = sizes.iter().try_fold(1usize, |a, &b| a.checked_mul(b));
    if total.is_none_or(|t| t > limit) {
        return Err(Error::invalid(format!(
            "brute force over {sizes:?} candidates is more than {limit} plans"
        )));
    }
    let mut best: Option<(f64, Vec<usize>)> = None;
    let mut pick = vec![0; sizes.len()];
    loop {
        let t = problem.finish(&pick)?.cost.step_time();
        if best.as_ref().is_none_or(|(b, _)| t < *b) {
            best = Some((t, pick.clone()));
        }
        // The next assignment, as an odometer.
        let mut i = 0;
        while i < pick.len() {
            pick[i] += 1;
            if pick[i] < sizes[i] {
                break;
            }
            pick[i] = 0;
            i += 1;
        }
        if i == pick.len() {
            break;
        }
    }
    let pick = best.map(|b| b.1).unwrap_or_default();
    problem.finish(&pick)
}

/// One search: the graph, its choices (node, candidates) and the fixed strategies.
struct Problem<'a> {
    graph: &'a Graph,
    cluster: &'a Cluster,
    fixed: &'a Strategies,
    optimizer_factor: f64,
    choices: Vec<(usize, Vec<Strategy>)>,
    grad: Vec<bool>,
    /// Whether ranks are given their blocks of the inputs (fixed layouts).
    local_inputs: bool,
    /// `dynamic_programming`'s term tables, built once for every memory weight.
    tables: std::sync::OnceLock<Vec<eliminate::Table>>,
}

impl<'a> Problem<'a> {
    fn new(
        graph: &'a Graph,
        cluster: &'a Cluster,
        fixed: &'a Strategies,
        optimizer_factor: f64,
        local_inputs: bool,
    ) -> Result<Problem<'a>> {
        let choices = graph
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| fixed.find(&n.name).is_none())
            .filter_map(|(id, _)| {
                let cands = candidates(graph, id, cluster.devices);
                (cands.len() > 1).then_some((id, cands))
            })
            .collect();
        Ok(Problem {
            graph,
            cluster,
            fixed,
            optimizer_factor,
            choices,
            grad: needs_grad(graph),
            local_inputs,
            tables: std::sync::OnceLock::new(),
        })
    }

    /// `pick` with every choice that has a pure batch split (its first input cut over
    /// every device, nothing else cut) set to it; `None` when that changes nothing.
    fn batch_split(&self, pick: &[usize]) -> Option<Vec<usize>> {
        let devices = self.cluster.devices;
        let mut out = pick.to_vec();
        for (k, (_, cands)) in self.choices.iter().enumerate() {
            let batch_only = cands.iter().position(|c| {
                c.inputs
                    .first()
                    .is_some_and(|x| x.first() == Some(&devices) && x[1..].iter().all(|&f| f == 1))
            });
            if let (Some(b), Some(slot)) = (batch_only, out.get_mut(k)) {
                *slot = b;
            }
        }
        (out != pick).then_some(out)
    }

    /// The plan of `strategies`, the inputs given as this problem says.
    fn plan(&self, strategies: &Strategies) -> Result<ShardingPlan> {
        match self.local_inputs {
            true => plan_graph_local_inputs(self.graph, strategies, self.cluster.devices),
            false => plan_graph(self.graph, strategies, self.cluster.devices),
        }
    }

    /// Whether the layout of what `v` reads from is chosen by its reader for free: a
    /// parameter (through views), or an input when each rank is given it whole.
    fn free_leaf(&self, v: usize) -> bool {
        leaf_root(self.graph, v).is_some_and(|r| !self.local_inputs || r < self.graph.params.len())
    }

    /// The strategies of an assignment (candidate index per choice; missing: none).
    fn strategies(&self, pick: &[usize]) -> Strategies {
        let mut s = self.fixed.clone();
        for (&(id, ref cands), &c) in self.choices.iter().zip(pick) {
            let _ = s.set(&self.graph.nodes[id].name, cands[c].clone());
        }
        s
    }

    fn finish(&self, pick: &[usize]) -> Result<Searched> {
        let strategies = self.strategies(pick);
        let plan = self.plan(&strategies)?;
        let cost = plan_cost(self.graph, &plan, self.cluster, self.optimizer_factor);
        Ok(Searched {
            strategies,
            plan,
            cost,
        })
    }

    /// Seconds plus weighted bytes of one node's term under a plan.
    /// One node's term under a plan: its seconds and the bytes it keeps (weighed
    /// against seconds when memory is short).
    fn term(&self, plan: &ShardingPlan, id: usize) -> (f64, f64) {
        let (compute, comm) = op_time(self.graph, &plan.nodes, id, self.cluster, &self.grad, &[]);
        let node = &self.graph.nodes[id];
        let mut seconds = compute + comm;
        let mut bytes = 0.0;
        if let NodeKind::Parameter(p) = node.kind {
            // The value, and for a trained one its gradient and optimizer state.
            let per_byte = match self.graph.params[p].requires_grad() {
                true => 2.0 + self.optimizer_factor,
                false => 1.0,
            };
            bytes = bytes_of(node.ty(), &plan.params[p]) * per_byte;
        } else if self.grad[id] && node.op().is_some() {
            bytes = bytes_of(node.ty(), &plan.nodes[id].out);
        }
        if self.graph.outputs.contains(&id) {
            let whole = Layout::replicated(plan.devices, node.ty().shape.len());
            seconds +=
                redistribution_time(self.cluster, node.ty(), &plan.nodes[id].out, &whole, false);
        }
        (seconds, bytes)
    }
}

/// The stored value (a parameter, or an input: index `params + i`) a value is,
/// directly or through views, if any: its layout is chosen by its reader, for free.
pub(super) fn leaf_root(g: &Graph, mut v: usize) -> Option<usize> {
    loop {
        match &g.nodes[v].kind {
            NodeKind::Parameter(p) => return Some(*p),
            NodeKind::Input(i) => return Some(g.params.len() + i),
            NodeKind::Op { op, args } if is_view(op) => v = args[0],
            _ => return None,
        }
    }
}
