//! The sharding pass: every value of a traced (global) graph gets a layout, every op a
//! plan, every parameter the layout its consumer wants it stored in.
//!
//! ```
//! use spore_core::{trace::trace, DType, Tensor, TensorType};
//! use spore_parallel::sharding::{plan_graph, Strategies};
//! let w = spore_core::Parameter::new(Tensor::ones(&[16, 32], DType::F32).unwrap(), "w");
//! let g = trace("f", &[TensorType::new(&[8, 16], DType::F32)], |x| {
//!     Ok(vec![x[0].matmul(&w.value())?.relu()?])
//! }).unwrap();
//! let mut s = Strategies::new();
//! s.shard("MatMul", "((1, 1), (1, 4))").unwrap();
//! let plan = plan_graph(&g, &s, 4).unwrap();
//! // The weight is stored as column blocks; ReLU keeps them.
//! assert_eq!(plan.params[0].to_string(), "dev[1,1,4] (R, S2)");
//! assert_eq!(plan.nodes[g.outputs[0]].out.to_string(), "dev[1,1,4] (R, S2)");
//! ```
//!
//! With `full_batch` ([`plan_graph`]) the graph's inputs are whole on every rank, so each
//! rank cuts the block it needs without communication: the block its first consumer
//! wants, else its share of the batch. Without it ([`plan_graph_local_inputs`]) each
//! rank is given its block of every input's first dimension, and ops that want another
//! layout get it by communication. A parameter read through views (a Dense layer's
//! transposed weight) is stored in the layout its first consumer needs. Both are found
//! by planning again with the layouts the last pass asked for, until nothing changes.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use spore_core::ir::{Graph, NodeKind, ValueId};
use spore_core::op::Op;
use spore_core::{Error, Result, TensorType};

use super::layout::Layout;
use super::output::output_layout;
use super::redistribute::redistribution_steps;
use super::rules::{OpPlan, plan_op};
use super::strategy::Strategies;

/// A value's layout, and for an op how its inputs are moved.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSharding {
    pub out: Layout,
    pub op: Option<OpPlan>,
    /// The strategy applied and the path it was set for.
    pub strategy: Option<(String, super::Strategy)>,
}

/// The layouts of one graph on a job of `devices` ranks.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardingPlan {
    pub devices: usize,
    /// One per graph node.
    pub nodes: Vec<NodeSharding>,
    /// One per graph parameter: how it is stored.
    pub params: Vec<Layout>,
    /// One per graph input: the block each rank cuts from the whole input, or, with
    /// `local_inputs`, the block each rank is given.
    pub inputs: Vec<Layout>,
    /// Whether each rank is given only its block of every input (`full_batch` off:
    /// MindSpore's default `dataset_strategy`, each rank reading its shard of the data)
    /// rather than the whole input.
    pub local_inputs: bool,
}

/// Where the values a graph starts from are kept: its parameters (stored as blocks),
/// and its inputs (with `full_batch` whole on every rank, so that any layout of them is
/// a local cut; else each rank's block of the batch).
#[derive(Clone, Debug, PartialEq)]
pub struct Stored {
    pub params: Vec<Layout>,
    pub inputs: Vec<Layout>,
}

impl Stored {
    /// Parameters whole; inputs split along their first dimension over every rank
    /// where it divides (MindSpore's default data-parallel `dataset_strategy`), so
    /// that ops before the first product do not compute the whole batch everywhere.
    pub fn initial(g: &Graph, devices: usize) -> Stored {
        let params = g
            .params
            .iter()
            .map(|p| Layout::replicated(devices, p.tensor_type().shape.len()))
            .collect();
        let inputs = g
            .inputs
            .iter()
            .map(|&v| {
                let shape = &g.nodes[v].ty().shape;
                let mut l = Layout::replicated(devices, shape.len());
                if shape.first().is_some_and(|&b| b.is_multiple_of(devices)) {
                    l.map[0] = Some(0);
                }
                l
            })
            .collect();
        Stored { params, inputs }
    }
}

/// Plans `graph` for `devices` ranks with the user's `strategies`, every rank given the
/// whole inputs (`full_batch`).
pub fn plan_graph(graph: &Graph, strategies: &Strategies, devices: usize) -> Result<ShardingPlan> {
    plan_graph_inputs(graph, strategies, devices, false)
}

/// Plans `graph` for ranks that are each given their block of every input along its
/// first dimension (MindSpore's data-parallel `dataset_strategy`, `full_batch` off): the
/// inputs stay in that layout, and ops that want another get it by communication.
pub fn plan_graph_local_inputs(
    graph: &Graph,
    strategies: &Strategies,
    devices: usize,
) -> Result<ShardingPlan> {
    for (i, &v) in graph.inputs.iter().enumerate() {
        let ty = graph.nodes[v].ty();
        // A scalar has no batch to split: every rank is given it whole.
        if !ty.shape.is_empty() && !ty.shape[0].is_multiple_of(devices) {
            return Err(Error::invalid(format!(
                "input {i} of {} is {ty}: with full_batch off each of the {devices} ranks is given its block \
                 of the first dimension, which must divide evenly (or set full_batch)",
                graph.name
            )));
        }
    }
    plan_graph_inputs(graph, strategies, devices, true)
}

fn plan_graph_inputs(
    graph: &Graph,
    strategies: &Strategies,
    devices: usize,
    local_inputs: bool,
) -> Result<ShardingPlan> {
    if devices == 0 {
        return Err(Error::invalid("a sharding plan needs at least one rank"));
    }
    let mut stored = Stored::initial(graph, devices);
    // Each round can only move a parameter or input to its consumer's layout; two
    // rounds settle a chain of views, the cap guards against a wish that flips back.
    for round in 0..5 {
        let nodes = propagate(graph, strategies, devices, &stored)?;
        let mut wanted = wanted_layouts(graph, &nodes, &stored);
        if local_inputs {
            // Given as blocks: only the parameters' storage is free to choose.
            wanted.inputs = stored.inputs.clone();
        }
        if wanted == stored || round == 4 {
            check_strategies_used(graph, strategies)?;
            return Ok(ShardingPlan {
                devices,
                nodes,
                params: stored.params,
                inputs: stored.inputs,
                local_inputs,
            });
        }
        stored = wanted;
    }
    unreachable!("the last round returns")
}

fn propagate(
    g: &Graph,
    strategies: &Strategies,
    devices: usize,
    stored: &Stored,
) -> Result<Vec<NodeSharding>> {
    let mut nodes: Vec<NodeSharding> = Vec::with_capacity(g.nodes.len());
    for (id, node) in g.nodes.iter().enumerate() {
        let found = strategies.find(&node.name);
        nodes.push(plan_node(g, id, &nodes, found, stored, devices)?);
    }
    Ok(nodes)
}

/// Plans node `id` of `g` given the plans of the nodes before it.
pub(crate) fn plan_node<N: Borrow<NodeSharding>>(
    g: &Graph,
    id: usize,
    nodes: &[N],
    strategy: Option<(&str, &super::Strategy)>,
    stored: &Stored,
    devices: usize,
) -> Result<NodeSharding> {
    let node = &g.nodes[id];
    let plain = |out: Layout| NodeSharding {
        out,
        op: None,
        strategy: None,
    };
    let rank = node.ty().shape.len();
    Ok(match &node.kind {
        NodeKind::RandomKey(_) | NodeKind::Constant(_) => plain(Layout::replicated(devices, rank)),
        NodeKind::Input(i) => plain(stored.inputs[*i].clone()),
        NodeKind::Parameter(p) => plain(stored.params[*p].clone()),
        NodeKind::Op { op, args } => {
            let types: Vec<&TensorType> = args.iter().map(|&a| g.nodes[a].ty()).collect();
            let current: Vec<Layout> = args
                .iter()
                .map(|&a| nodes[a].borrow().out.clone())
                .collect();
            let at = || {
                let place = node
                    .location
                    .map(|l| format!(" ({}:{})", l.file(), l.line()))
                    .unwrap_or_default();
                format!("{}{place}", node.name)
            };
            let plan = plan_op(
                op,
                &types,
                node.ty(),
                &current,
                strategy.map(|f| f.1),
                devices,
            )
            .map_err(|e| Error::invalid(format!("sharding {}: {e}", at())))?;
            check_divisible(op, &types, node.ty(), &plan)
                .map_err(|e| Error::invalid(format!("sharding {}: {e}", at())))?;
            let mut plan = plan;
            if let Some(factors) = strategy.and_then(|(_, s)| s.output.as_ref()) {
                let result = output_layout(&plan.out, factors, &node.ty().shape)
                    .map_err(|e| Error::invalid(format!("sharding {}: {e}", at())))?;
                let steps = redistribution_steps(&plan.out, &result, &node.ty().shape)
                    .map_err(|e| Error::invalid(format!("sharding {}: out_strategy: {e}", at())))?;
                // An out_strategy the inputs already give moves nothing.
                plan.result = (!steps.is_empty()).then_some(result);
            }
            NodeSharding {
                out: plan.result.clone().unwrap_or_else(|| plan.out.clone()),
                op: Some(plan),
                strategy: strategy.map(|(p, s)| (p.to_string(), s.clone())),
            }
        }
        NodeKind::Cond { .. } | NodeKind::While { .. } | NodeKind::GetItem { .. } => {
            return Err(Error::invalid(format!(
                "sharding {}: control flow (cond, while_loop) inside a sharded network is not supported; keep it outside the sharded cell",
                node.name
            )));
        }
    })
}

fn check_divisible(
    op: &Op,
    args: &[&TensorType],
    out: &TensorType,
    plan: &OpPlan,
) -> std::result::Result<(), String> {
    for (k, (l, t)) in plan.args.iter().zip(args).enumerate() {
        l.local_shape(&t.shape)
            .map_err(|e| format!("{} input {k}: {e}", op.name()))?;
    }
    plan.out
        .local_shape(&out.shape)
        .map(|_| ())
        .map_err(|e| format!("{} output: {e}", op.name()))
}

/// Ops a parameter or input may be read through on its way to the op that decides its
/// layout (each carries a layout back to its input).
pub(crate) fn is_view(op: &Op) -> bool {
    matches!(
        op,
        Op::Transpose(_) | Op::Reshape(_) | Op::Cast(_) | Op::Identity
    )
}

/// The layout of a reshape's input that gives `out` on its output: each output block
/// split taken back to the input dimension starting at the same flat position (whole
/// where none does).
fn reshape_back(out: &Layout, input: &[usize], output: &[usize]) -> Layout {
    let mut map = vec![None; input.len()];
    for (e, m) in out.map.iter().enumerate() {
        let f = out.factor(e);
        if f == 1 {
            continue;
        }
        let prefix: usize = output[..e].iter().product();
        let source = (0..input.len()).find(|&d| {
            input[..d].iter().product::<usize>() == prefix
                && input[d] > 1
                && input[d].is_multiple_of(f)
        });
        if let Some(d) = source {
            map[d] = *m;
        }
    }
    Layout {
        dev: out.dev.clone(),
        map,
        partial: vec![],
    }
}

/// For each op, the stored values (parameters, inputs) it is the first reader of,
/// directly or through single-reader views: it decides their layouts.
pub(crate) struct LeafReaders {
    /// reader -> (leaf node, the reader's input index, the views from the leaf).
    by_reader: HashMap<ValueId, Vec<(ValueId, usize, Vec<ValueId>)>>,
}

impl LeafReaders {
    pub(crate) fn new(g: &Graph) -> LeafReaders {
        let mut readers: Vec<Vec<(ValueId, usize)>> = vec![vec![]; g.nodes.len()];
        for (id, n) in g.nodes.iter().enumerate() {
            if let NodeKind::Op { args, .. } = &n.kind {
                for (k, &a) in args.iter().enumerate() {
                    readers[a].push((id, k));
                }
            }
        }
        let mut by_reader: HashMap<ValueId, Vec<(ValueId, usize, Vec<ValueId>)>> = HashMap::new();
        for (id, n) in g.nodes.iter().enumerate() {
            if !matches!(n.kind, NodeKind::Parameter(_) | NodeKind::Input(_)) {
                continue;
            }
            let mut views = vec![];
            let mut at = id;
            while let Some(&(reader, k)) = readers[at].first() {
                match g.nodes[reader].op() {
                    Some(op) if is_view(op) && readers[at].len() == 1 => {
                        views.push(reader);
                        at = reader;
                    }
                    _ => {
                        by_reader.entry(reader).or_default().push((id, k, views));
                        break;
                    }
                }
            }
        }
        LeafReaders { by_reader }
    }

    /// The layouts `reader`'s plan wants for the stored values it decides.
    pub(crate) fn wishes(
        &self,
        g: &Graph,
        reader: ValueId,
        plan: &OpPlan,
    ) -> Vec<(ValueId, Layout)> {
        let Some(leaves) = self.by_reader.get(&reader) else {
            return vec![];
        };
        leaves
            .iter()
            .map(|(leaf, k, views)| {
                let mut layout = plan.args[*k].without_partial();
                for &view in views.iter().rev() {
                    match g.nodes[view].op() {
                        Some(Op::Transpose(perm)) => {
                            let mut map = vec![None; perm.len()];
                            for (i, &src) in perm.iter().enumerate() {
                                map[src] = layout.map[i];
                            }
                            layout.map = map;
                        }
                        Some(Op::Reshape(_)) => {
                            let input = &g.nodes[g.nodes[view].args()[0]].ty().shape;
                            layout = reshape_back(&layout, input, &g.nodes[view].ty().shape);
                        }
                        _ => {}
                    }
                }
                (*leaf, layout)
            })
            .collect()
    }
}

fn wanted_layouts(g: &Graph, nodes: &[NodeSharding], current: &Stored) -> Stored {
    let leaves = LeafReaders::new(g);
    let mut wanted = current.clone();
    for (reader, ns) in nodes.iter().enumerate() {
        let Some(plan) = &ns.op else { continue };
        for (leaf, layout) in leaves.wishes(g, reader, plan) {
            match g.nodes[leaf].kind {
                NodeKind::Parameter(p) => wanted.params[p] = layout,
                NodeKind::Input(i) => wanted.inputs[i] = layout,
                _ => {}
            }
        }
    }
    wanted
}

/// The steps between two layouts as one line (or why there are none).
fn steps_text(from: &Layout, to: &Layout, shape: &[usize]) -> String {
    redistribution_steps(from, to, shape)
        .map(|st| {
            st.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_else(|e| e.to_string())
}

/// The paths of `strategies` that set some operator of `g`.
pub(crate) fn used_strategy_paths<'s>(g: &Graph, strategies: &'s Strategies) -> HashSet<&'s str> {
    g.nodes
        .iter()
        .filter(|n| n.op().is_some())
        .filter_map(|n| strategies.find(&n.name).map(|(p, _)| p))
        .collect()
}

fn check_strategies_used(g: &Graph, strategies: &Strategies) -> Result<()> {
    let used = used_strategy_paths(g, strategies);
    if let Some(path) = strategies.paths().find(|p| !used.contains(p)) {
        let example = g
            .nodes
            .iter()
            .find(|n| n.op().is_some())
            .map(|n| n.name.clone())
            .unwrap_or_default();
        return Err(Error::invalid(format!(
            "the strategy set for '{path}' matches no operator of graph '{}'; operators are named like '{example}' (save_graphs prints every name)",
            g.name
        )));
    }
    Ok(())
}

impl ShardingPlan {
    /// The plan as text: per node its layout, the strategy applied, and the
    /// communication inserted before it (written beside `save_graphs`' IR).
    pub fn describe(&self, g: &Graph) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# sharding plan of {} on {} ranks", g.name, self.devices);
        for (i, p) in g.params.iter().enumerate() {
            let _ = writeln!(
                s,
                "param {} : {}  stored {}",
                p.name(),
                p.tensor_type(),
                self.params[i]
            );
        }
        for (i, &v) in g.inputs.iter().enumerate() {
            let _ = writeln!(
                s,
                "input {i} : {}  {} {}",
                g.nodes[v].ty(),
                if self.local_inputs {
                    "given as"
                } else {
                    "cut as"
                },
                self.inputs[i]
            );
        }
        for (id, node) in g.nodes.iter().enumerate() {
            let ns = &self.nodes[id];
            let what = match &node.kind {
                NodeKind::Op { op, args } => {
                    let args: Vec<String> = args.iter().map(|a| format!("%{a}")).collect();
                    format!("{}({})", op.name(), args.join(", "))
                }
                other => format!("{other:?}").chars().take(40).collect(),
            };
            let _ = writeln!(
                s,
                "%{id} = {what} -> {} {}    # {}",
                node.ty(),
                ns.out,
                node.name
            );
            if let Some((path, st)) = &ns.strategy {
                let _ = writeln!(s, "    strategy {st} (set for '{path}')");
            }
            let (Some(plan), NodeKind::Op { args, .. }) = (&ns.op, &node.kind) else {
                continue;
            };
            for (k, &a) in args.iter().enumerate() {
                let shape = &g.nodes[a].ty().shape;
                let steps = steps_text(&self.nodes[a].out, &plan.args[k], shape);
                if !steps.is_empty() {
                    let _ = writeln!(s, "    input {k} (%{a}): {steps} -> {}", plan.args[k]);
                }
                if !plan.marks[k].is_empty() {
                    let _ = writeln!(
                        s,
                        "    input {k} (%{a}): gradient AllReduce over device axes {:?}",
                        plan.marks[k]
                    );
                }
            }
            if let Some(result) = &plan.result {
                let steps = steps_text(&plan.out, result, &node.ty().shape);
                let _ = writeln!(
                    s,
                    "    output: computed {}; out_strategy: {steps} -> {result}",
                    plan.out
                );
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spore_core::trace::trace;
    use spore_core::{DType, Parameter, Tensor};

    #[test]
    fn given_blocks_keep_their_layout_and_scalars_stay_whole() {
        let w = Parameter::new(Tensor::ones(&[4, 6], DType::F32).unwrap(), "w");
        let types = [
            TensorType::new(&[8, 4], DType::F32),
            TensorType::new(&[], DType::F32),
        ];
        let g = trace("f", &types, |x| {
            Ok(vec![x[0].matmul(&w.value())?.mul(&x[1])?])
        })
        .unwrap();
        let mut s = Strategies::new();
        s.shard("MatMul", "((1, 1), (1, 2))").unwrap();
        let plan = plan_graph_local_inputs(&g, &s, 2).unwrap();
        assert!(plan.local_inputs);
        // The batch stays split by rows although the product wants it whole.
        assert_eq!(plan.inputs[0].factor(0), 2);
        assert_eq!(plan.inputs[1].map.len(), 0);
        let odd = trace("odd", &[TensorType::new(&[3, 4], DType::F32)], |x| {
            Ok(vec![x[0].matmul(&w.value())?])
        })
        .unwrap();
        let e = plan_graph_local_inputs(&odd, &s, 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("must divide evenly"), "{e}");
    }
}
