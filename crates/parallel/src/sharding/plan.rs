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
//! The graph's inputs are whole on every rank (MindSpore's `full_batch`); the first op
//! that wants them split takes its block without communication. A parameter read
//! through views (a Dense layer's transposed weight) is stored in the layout its first
//! consumer needs, found by planning twice: once with whole parameters, then with the
//! layouts the first pass asked for, until nothing changes.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::fmt::Write;

use spore_core::ir::{Graph, NodeKind, ValueId};
use spore_core::op::Op;
use spore_core::{Error, Result, TensorType};

use super::layout::Layout;
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
}

/// Plans `graph` for `devices` ranks with the user's `strategies`.
pub fn plan_graph(graph: &Graph, strategies: &Strategies, devices: usize) -> Result<ShardingPlan> {
    if devices == 0 {
        return Err(Error::invalid("a sharding plan needs at least one rank"));
    }
    let mut params: Vec<Layout> = graph
        .params
        .iter()
        .map(|p| Layout::replicated(devices, p.tensor_type().shape.len()))
        .collect();
    // Each round can only move a parameter to its consumer's layout; two rounds settle
    // a chain of views, the cap guards against a consumer whose wish flips back.
    for _ in 0..4 {
        let nodes = propagate(graph, strategies, devices, &params)?;
        let wanted = wanted_param_layouts(graph, &nodes, &params);
        if wanted == params {
            check_strategies_used(graph, strategies)?;
            return Ok(ShardingPlan {
                devices,
                nodes,
                params,
            });
        }
        params = wanted;
    }
    let nodes = propagate(graph, strategies, devices, &params)?;
    check_strategies_used(graph, strategies)?;
    Ok(ShardingPlan {
        devices,
        nodes,
        params,
    })
}

fn propagate(
    g: &Graph,
    strategies: &Strategies,
    devices: usize,
    params: &[Layout],
) -> Result<Vec<NodeSharding>> {
    let mut nodes: Vec<NodeSharding> = Vec::with_capacity(g.nodes.len());
    for (id, node) in g.nodes.iter().enumerate() {
        let found = strategies.find(&node.name);
        nodes.push(plan_node(g, id, &nodes, found, params, devices)?);
    }
    Ok(nodes)
}

/// Plans node `id` of `g` given the plans of the nodes before it.
pub(crate) fn plan_node<N: Borrow<NodeSharding>>(
    g: &Graph,
    id: usize,
    nodes: &[N],
    strategy: Option<(&str, &super::Strategy)>,
    params: &[Layout],
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
        NodeKind::Input(_) | NodeKind::RandomKey(_) | NodeKind::Constant(_) => {
            plain(Layout::replicated(devices, rank))
        }
        NodeKind::Parameter(p) => plain(params[*p].clone()),
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
            NodeSharding {
                out: plan.out.clone(),
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

/// The views a parameter may be read through on its way to the op that decides its
/// layout: (the view's node, how to carry a layout back through it).
fn is_view(op: &Op) -> bool {
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

fn wanted_param_layouts(g: &Graph, nodes: &[NodeSharding], current: &[Layout]) -> Vec<Layout> {
    let mut readers: Vec<Vec<(ValueId, usize)>> = vec![vec![]; g.nodes.len()];
    for (id, n) in g.nodes.iter().enumerate() {
        if let NodeKind::Op { args, .. } = &n.kind {
            for (k, &a) in args.iter().enumerate() {
                readers[a].push((id, k));
            }
        }
    }
    let mut wanted = current.to_vec();
    for (id, n) in g.nodes.iter().enumerate() {
        let NodeKind::Parameter(p) = n.kind else {
            continue;
        };
        // Follow single-reader views to the first real consumer.
        let mut views: Vec<(&Op, ValueId)> = vec![];
        let mut at = id;
        let consumer = loop {
            let Some(&(reader, k)) = readers[at].first() else {
                break None;
            };
            let op = g.nodes[reader].op();
            match op {
                Some(op) if is_view(op) && readers[at].len() == 1 => {
                    views.push((op, reader));
                    at = reader;
                }
                _ => break Some((reader, k)),
            }
        };
        let Some((reader, k)) = consumer else {
            continue;
        };
        let Some(plan) = &nodes[reader].op else {
            continue;
        };
        let mut layout = plan.args[k].without_partial();
        for &(op, view) in views.iter().rev() {
            match op {
                Op::Transpose(perm) => {
                    let mut map = vec![None; perm.len()];
                    for (i, &src) in perm.iter().enumerate() {
                        map[src] = layout.map[i];
                    }
                    layout.map = map;
                }
                Op::Reshape(_) => {
                    let input = &g.nodes[g.nodes[view].args()[0]].ty().shape;
                    layout = reshape_back(&layout, input, &g.nodes[view].ty().shape);
                }
                _ => {}
            }
        }
        wanted[p] = layout;
    }
    wanted
}

fn check_strategies_used(g: &Graph, strategies: &Strategies) -> Result<()> {
    let used: HashSet<&str> = g
        .nodes
        .iter()
        .filter(|n| n.op().is_some())
        .filter_map(|n| strategies.find(&n.name).map(|(p, _)| p))
        .collect();
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
                let steps = redistribution_steps(&self.nodes[a].out, &plan.args[k], shape)
                    .map(|st| {
                        st.iter()
                            .map(|x| x.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_else(|e| e.to_string());
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
        }
        s
    }
}
