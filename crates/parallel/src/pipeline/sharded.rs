//! Pipeline stages sharded over their ranks (MindSpore's data × model × pipeline mesh):
//! a stage's cells, with the loss on the last stage, form one network that a
//! [`ShardedCell`] plans over the stage's ranks with the user's strategies, so each rank
//! holds only its blocks of the stage's parameters.
//!
//! ```
//! use spore_core::{DType, Tensor, TensorType};
//! use spore_nn::prelude::*;
//! use spore_parallel::context::*;
//! use spore_parallel::pipeline::PipelineCell;
//! use spore_parallel::sharding::Strategies;
//! spore_parallel::init().unwrap();
//! set_auto_parallel_context(
//!     AutoParallelUpdate::new().parallel_mode(ParallelMode::SemiAutoParallel).pipeline_stages(1),
//! ).unwrap();
//! let backbone = SequentialCell::new(vec![Dense::new(4, 8).unwrap(), ReLU::new(), Dense::new(8, 2).unwrap()]);
//! let net = WithLossCell::new(backbone, MSELoss::new(Reduction::Mean));
//! // Under `mpirun -n 4` with `pipeline_stages(2)`, `"((1, 1), (1, 2))"` would split the
//! // first layer's columns over the 2 ranks of stage 0.
//! let mut strategies = Strategies::new();
//! strategies.shard("0/MatMul", "((1, 1), (1, 1))").unwrap();
//! let types = [TensorType::new(&[8, 4], DType::F32), TensorType::new(&[8, 2], DType::F32)];
//! let pipeline = PipelineCell::sharded(net, 2, &types, &strategies).unwrap();
//! let (x, y) = (Tensor::ones(&[8, 4], DType::F32).unwrap(), Tensor::zeros(&[8, 2], DType::F32).unwrap());
//! assert!(pipeline.call(&[x, y]).unwrap()[0].item().unwrap() >= 0.0);
//! # reset_auto_parallel_context();
//! ```

use std::sync::Arc;

use spore_core::trace::trace;
use spore_core::{Error, Result, Tensor, TensorType};
use spore_nn::cell::{Cell, CellBase, CellCall, CellExt};

use crate::backend::ReduceOp;
use crate::collective::group_f64s;
use crate::management::GroupInfo;
use crate::sharding::{ShardedCell, Strategies, agree, used_strategy_paths};

/// One stage's cells (and the loss on the last stage) as one network.
pub(crate) struct StageNet {
    base: CellBase,
    cells: Vec<(String, Arc<dyn Cell>)>,
    loss_fn: Option<Arc<dyn Cell>>,
}

/// Runs `cells` one after another on `xs` (what a `SequentialCell` computes).
pub(crate) fn run_cells(
    cells: &[(String, Arc<dyn Cell>)],
    mut xs: Vec<Tensor>,
) -> Result<Vec<Tensor>> {
    for (_, c) in cells {
        xs = c.call(&xs)?;
    }
    Ok(xs)
}

impl Cell for StageNet {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        match (&self.loss_fn, inputs) {
            (Some(loss_fn), [x, label]) => {
                let out = run_cells(&self.cells, vec![x.clone()])?;
                loss_fn.call(&[one(out)?, label.clone()])
            }
            (None, _) => run_cells(&self.cells, inputs.to_vec()),
            (Some(_), _) => Err(Error::invalid(format!(
                "PipelineCell: the last stage takes (activation, label), got {} inputs",
                inputs.len()
            ))),
        }
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        let mut out = self.cells.clone();
        if let Some(l) = &self.loss_fn {
            out.push(("_loss_fn".to_string(), l.clone()));
        }
        out
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "PipelineStage"
    }
}

/// The one activation a stage's cells end in.
pub(crate) fn one(xs: Vec<Tensor>) -> Result<Tensor> {
    match <[Tensor; 1]>::try_from(xs) {
        Ok([y]) => Ok(y),
        Err(xs) => Err(Error::invalid(format!(
            "PipelineCell: a stage must end in one activation, but its last cell returned {}",
            xs.len()
        ))),
    }
}

/// What a stage receives for a micro-batch of type `data`: the output of the cells of
/// the stages before it, found by tracing them (nothing is computed).
fn stage_input_type(before: &[(String, Arc<dyn Cell>)], data: &TensorType) -> Result<TensorType> {
    if before.is_empty() {
        return Ok(data.clone());
    }
    let graph = spore_core::memory::with_global_shapes(|| {
        trace("pipeline_stage_input", std::slice::from_ref(data), |xs| {
            run_cells(before, xs.to_vec())
        })
    })?;
    match graph.outputs[..] {
        [o] => Ok(graph.nodes[o].ty().clone()),
        _ => Err(Error::invalid(format!(
            "PipelineCell: the cells before a stage must end in one activation, but they return {}",
            graph.outputs.len()
        ))),
    }
}

/// The global type of one micro-batch of a batch of type `t`.
fn micro_type(t: &TensorType, micro_size: usize, what: &str) -> Result<TensorType> {
    let batch = t.shape.first().copied().unwrap_or(0);
    if batch == 0 || !batch.is_multiple_of(micro_size) {
        return Err(Error::invalid(format!(
            "PipelineCell: the {what}'s batch of {batch} (type {t}) does not split into micro_size {micro_size} \
             equal micro-batches"
        )));
    }
    let mut shape = t.shape.clone();
    shape[0] = batch / micro_size;
    Ok(TensorType::new(&shape, t.dtype))
}

/// The stage that runs `mine` (with `loss_fn` on the last stage) sharded over the ranks
/// of the group `mesh`, for batches of the global types `inputs` (data, label).
pub(crate) struct StagePlan<'a> {
    pub(crate) before: Vec<(String, Arc<dyn Cell>)>,
    pub(crate) mine: Vec<(String, Arc<dyn Cell>)>,
    pub(crate) loss_fn: Option<Arc<dyn Cell>>,
    pub(crate) inputs: &'a [TensorType],
    pub(crate) micro_size: usize,
    pub(crate) mesh: &'a str,
}

/// Plans this rank's stage. Every failure, in any stage, is an error on every rank of
/// the job (the stages would otherwise wait for each other at the first step).
pub(crate) fn shard_stage(plan: StagePlan, strategies: &Strategies) -> Result<Arc<ShardedCell>> {
    let world = crate::management::group(None)?;
    let mesh = crate::management::group(Some(plan.mesh))?;
    let traced = agree(&world, trace_stage(plan), "tracing the pipeline stages")?;
    let strategies = agree(
        &world,
        stage_strategies(&traced, strategies, &world),
        "matching the strategies to the pipeline stages",
    )?;
    // Every rank of the stage is given the whole micro-batch.
    let planned = ShardedCell::on_mesh(traced.net, &traced.types, &strategies, mesh, true);
    agree(&world, planned, "planning the pipeline stages")
}

/// A stage's network, the global types of its inputs for one micro-batch, and its graph.
struct TracedStage {
    net: Arc<StageNet>,
    types: Vec<TensorType>,
    graph: spore_core::ir::Graph,
}

fn trace_stage(plan: StagePlan) -> Result<TracedStage> {
    let [data, label] = plan.inputs else {
        return Err(Error::invalid(format!(
            "PipelineCell: expected the types of 2 inputs (data, label), got {}",
            plan.inputs.len()
        )));
    };
    let data = micro_type(data, plan.micro_size, "data")?;
    let label = micro_type(label, plan.micro_size, "label")?;
    let input = stage_input_type(&plan.before, &data)?;
    let types = match plan.loss_fn {
        Some(_) => vec![input, label],
        None => vec![input],
    };
    let net = Arc::new(StageNet {
        base: CellBase::new(),
        cells: plan.mine,
        loss_fn: plan.loss_fn,
    });
    // Names the parameters as in the whole network (`0.weight`), the names the
    // strategies, checkpoints and optimizers know them by.
    net.parameters_and_names();
    let graph = spore_core::memory::with_global_shapes(|| {
        trace("pipeline_stage", &types, |xs| net.call(xs))
    })?;
    Ok(TracedStage { net, types, graph })
}

/// The strategies of the whole network that set this stage's operators. Each must
/// set an operator of some stage (a collective over the job: every rank calls it).
fn stage_strategies(
    stage: &TracedStage,
    all: &Strategies,
    world: &GroupInfo,
) -> Result<Strategies> {
    let here = used_strategy_paths(&stage.graph, all);
    let used: Vec<bool> = all
        .entries()
        .iter()
        .map(|(path, _)| here.contains(path.as_str()))
        .collect();
    let flags: Vec<f64> = used.iter().map(|&u| f64::from(u8::from(u))).collect();
    let anywhere = group_f64s(world, &flags, ReduceOp::Max)?;
    if let Some(i) = anywhere.iter().position(|&f| f == 0.0) {
        return Err(Error::invalid(format!(
            "PipelineCell: the strategy set for '{}' matches no operator of any pipeline stage (save_graphs \
             prints every name)",
            all.entries()[i].0
        )));
    }
    let mut mine = Strategies::new();
    for ((path, strategy), _) in all.entries().iter().zip(&used).filter(|(_, u)| **u) {
        mine.set(path, strategy.clone())?;
    }
    Ok(mine)
}
