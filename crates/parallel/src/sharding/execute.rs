//! Running a planned graph on one rank: each op on its local blocks, with the planned
//! communication before it. Every step goes through Spore's `apply`, so the same code
//! runs op by op (PyNative, with gradients) and records a graph when traced (Graph mode).
//!
//! ```
//! use spore_core::{trace::trace, DType, Tensor, TensorType};
//! use spore_parallel::sharding::{plan_graph, run_planned, Strategies};
//! spore_parallel::init().unwrap();
//! let g = trace("f", &[TensorType::new(&[2], DType::F32)], |x| Ok(vec![x[0].exp()?])).unwrap();
//! let plan = plan_graph(&g, &Strategies::new(), 1).unwrap();
//! let y = run_planned(&g, &plan, &[], &[Tensor::zeros(&[2], DType::F32).unwrap()]).unwrap();
//! assert_eq!(y[0].to_vec::<f32>().unwrap(), [1.0, 1.0]);
//! ```

use std::panic::Location;

use spore_core::ir::{Graph, NodeKind};
use spore_core::op::Op;
use spore_core::trace::{random_key, with_scope};
use spore_core::{Error, Parameter, Result, Tensor, TensorType};

use super::layout::Layout;
use super::plan::ShardingPlan;
use super::redistribute::{mark_gradient_sum, redistribute_on};
use crate::management::{GroupInfo, group};

/// Runs `graph` as planned: `inputs` are whole (global) tensors, or this rank's blocks
/// when the plan says so (`local_inputs`, full_batch off), `params` the local
/// parameters (one per `graph.params`, in the plan's layouts). Returns whole outputs
/// and stores the graph's parameter updates into `params`. The plan spans the job's
/// ranks.
pub fn run_planned(
    graph: &Graph,
    plan: &ShardingPlan,
    params: &[Parameter],
    inputs: &[Tensor],
) -> Result<Vec<Tensor>> {
    run_planned_on(&group(None)?, graph, plan, params, inputs)
}

/// [`run_planned`] for a plan that spans the ranks of `mesh`.
pub(crate) fn run_planned_on(
    mesh: &GroupInfo,
    graph: &Graph,
    plan: &ShardingPlan,
    params: &[Parameter],
    inputs: &[Tensor],
) -> Result<Vec<Tensor>> {
    check_call(graph, plan, params, inputs)?;
    let mut uses = graph.use_counts();
    let mut values: Vec<Option<Tensor>> = vec![None; graph.nodes.len()];
    for (id, node) in graph.nodes.iter().enumerate() {
        let value = match &node.kind {
            NodeKind::Input(i) => {
                let whole = inputs.get(*i).ok_or_else(|| {
                    Error::invalid(format!("sharded graph {}: input {i} missing", graph.name))
                })?;
                let shape = &node.ty().shape;
                match plan.local_inputs {
                    true => whole.clone(),
                    false => {
                        let all = Layout::replicated(plan.devices, shape.len());
                        redistribute_on(mesh, whole, shape, &all, &plan.inputs[*i])?
                    }
                }
            }
            NodeKind::Parameter(p) => params[*p].value(),
            NodeKind::RandomKey(_) => random_key(),
            NodeKind::Constant(t) => t.clone(),
            NodeKind::Op { op, args } => {
                let Some(op_plan) = &plan.nodes[id].op else {
                    return Err(Error::invalid(format!(
                        "internal: op {} has no sharding plan",
                        node.name
                    )));
                };
                let scope = scope_path(&node.name);
                let mut locals = Vec::with_capacity(args.len());
                for (k, &a) in args.iter().enumerate() {
                    let x = take(&mut values, &mut uses, a)?;
                    let shape = &graph.nodes[a].ty().shape;
                    let x = in_scope(&scope, || {
                        let moved =
                            redistribute_on(mesh, &x, shape, &plan.nodes[a].out, &op_plan.args[k])?;
                        match op_plan.marks[k].is_empty() {
                            true => Ok(moved),
                            false => mark_gradient_sum(
                                mesh,
                                &moved,
                                &op_plan.args[k].dev,
                                &op_plan.marks[k],
                            ),
                        }
                    })?;
                    locals.push(x);
                }
                let out_shape = op_plan
                    .out
                    .local_shape(&node.ty().shape)
                    .map_err(|e| Error::invalid(format!("sharding {}: {e}", node.name)))?;
                let at = node.location.unwrap_or(Location::caller());
                let y = match op {
                    Op::Gather { axis: 0 } if op_plan.args[0].factor(0) > 1 => {
                        let table = &graph.nodes[args[0]].ty().shape;
                        let rows = op_plan.args[0].block(table, mesh.rank, 0);
                        in_scope(&scope, || lookup_rows(&locals[0], &locals[1], rows))?
                    }
                    _ => {
                        let local = local_op(op, &out_shape);
                        let refs: Vec<&Tensor> = locals.iter().collect();
                        in_scope(&scope, || spore_core::apply::apply(local, &refs, at))?
                    }
                };
                match &op_plan.result {
                    // `out_strategy`: the output moved to its layout under the op's scope.
                    Some(result) => in_scope(&scope, || {
                        redistribute_on(mesh, &y, &node.ty().shape, &op_plan.out, result)
                    })?,
                    None => y,
                }
            }
            _ => {
                return Err(Error::invalid(format!(
                    "sharding {}: control flow inside a sharded network is not supported",
                    node.name
                )));
            }
        };
        values[id] = Some(value);
    }
    for &(p, v) in &graph.updates {
        let x = take(&mut values, &mut uses, v)?;
        let shape = &graph.nodes[v].ty().shape;
        let stored = redistribute_on(mesh, &x, shape, &plan.nodes[v].out, &plan.params[p])?;
        params[p].assign(&stored)?;
    }
    let mut outputs = vec![];
    for &o in &graph.outputs {
        let x = take(&mut values, &mut uses, o)?;
        let shape = &graph.nodes[o].ty().shape;
        let whole = Layout::replicated(plan.devices, shape.len());
        outputs.push(redistribute_on(
            mesh,
            &x,
            shape,
            &plan.nodes[o].out,
            &whole,
        )?);
    }
    Ok(outputs)
}

/// The plan is this graph's, and the parameters and whole inputs are the graph's.
fn check_call(
    graph: &Graph,
    plan: &ShardingPlan,
    params: &[Parameter],
    inputs: &[Tensor],
) -> Result<()> {
    if plan.nodes.len() != graph.nodes.len() || plan.inputs.len() != graph.inputs.len() {
        return Err(Error::invalid(format!(
            "sharded graph {}: the plan is for another graph ({} nodes and {} inputs planned, the graph has {} and {})",
            graph.name,
            plan.nodes.len(),
            plan.inputs.len(),
            graph.nodes.len(),
            graph.inputs.len()
        )));
    }
    if inputs.len() != graph.inputs.len() {
        return Err(Error::invalid(format!(
            "sharded graph {}: {} inputs given, the graph takes {}",
            graph.name,
            inputs.len(),
            graph.inputs.len()
        )));
    }
    for (i, (x, &v)) in inputs.iter().zip(&graph.inputs).enumerate() {
        let whole = graph.nodes[v].ty();
        let (want, what) = match plan.local_inputs {
            true => (
                TensorType::new(
                    &plan.inputs[i]
                        .local_shape(&whole.shape)
                        .map_err(Error::invalid)?,
                    whole.dtype,
                ),
                "this rank's block, full_batch being off",
            ),
            false => (whole.clone(), "whole"),
        };
        if x.tensor_type() != &want {
            return Err(Error::invalid(format!(
                "sharded graph {}: input {i} must be {want} ({what}), got {}",
                graph.name,
                x.tensor_type()
            )));
        }
    }
    if params.len() != graph.params.len() {
        return Err(Error::invalid(format!(
            "sharded graph {}: {} parameters given, the graph reads {}",
            graph.name,
            params.len(),
            graph.params.len()
        )));
    }
    Ok(())
}

/// The rows `(start, len)` of a table split by rows, looked up for `ids`: each id in
/// this rank's rows gives its row, every other id zeros, so that the sum over the ranks
/// holding the other rows is the whole lookup (a vocabulary-parallel embedding).
fn lookup_rows(table: &Tensor, ids: &Tensor, (start, len): (usize, usize)) -> Result<Tensor> {
    let shifted = ids.sub(&Tensor::scalar_of(start as f64, ids.dtype()))?;
    let zero = Tensor::scalar_of(0.0, ids.dtype());
    let above = shifted.greater_equal(&zero)?;
    let below = shifted.less(&Tensor::scalar_of(len as f64, ids.dtype()))?;
    // Ids outside the block read row 0, then are zeroed.
    let inside_ids = Tensor::select(&below, &Tensor::select(&above, &shifted, &zero)?, &zero)?;
    let rows = table.gather(&inside_ids, 0)?;
    let mask = above
        .cast(table.dtype())?
        .mul(&below.cast(table.dtype())?)?;
    let mut shape = mask.shape().to_vec();
    shape.extend(std::iter::repeat_n(1, table.rank() - 1));
    rows.mul(&mask.reshape(&shape)?)
}

/// A value for one of its readers, released after the last.
fn take(values: &mut [Option<Tensor>], uses: &mut [usize], id: usize) -> Result<Tensor> {
    let v = values[id]
        .clone()
        .ok_or_else(|| Error::invalid(format!("internal: value %{id} read before it was made")))?;
    uses[id] = uses[id].saturating_sub(1);
    if uses[id] == 0 {
        values[id] = None;
    }
    Ok(v)
}

/// The op on local blocks: shape attributes become the local shapes.
fn local_op(op: &Op, out_shape: &[usize]) -> Op {
    match op {
        Op::Reshape(_) => Op::Reshape(out_shape.to_vec()),
        Op::BroadcastTo(_) => Op::BroadcastTo(out_shape.to_vec()),
        // Split dimensions are whole-range slices, so each local length is the block's.
        Op::StridedSlice { begin, step, .. } => Op::StridedSlice {
            begin: begin.clone(),
            step: step.clone(),
            len: out_shape.to_vec(),
        },
        other => other.clone(),
    }
}

/// `Default/_backbone/fc1/MatMul-op2` -> `["_backbone", "fc1"]`: the scopes to rerun
/// an op under, so the local graph keeps the network's names.
fn scope_path(name: &str) -> Vec<String> {
    let mut parts: Vec<&str> = name.split('/').collect();
    parts.pop();
    if parts.first() == Some(&"Default") {
        parts.remove(0);
    }
    parts.into_iter().map(str::to_string).collect()
}

fn in_scope<R>(path: &[String], f: impl FnOnce() -> R) -> R {
    match path.split_first() {
        Some((first, rest)) => with_scope(first, || in_scope(rest, f)),
        None => f(),
    }
}
