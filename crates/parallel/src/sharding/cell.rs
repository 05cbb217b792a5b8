//! [`ShardedCell`]: a network (with its loss) split across the job's ranks by
//! strategies, trained with the usual wrappers.
//!
//! ```
//! use spore_core::{DType, Tensor, TensorType};
//! use spore_nn::prelude::*;
//! use spore_parallel::sharding::{ShardedCell, Strategies};
//! use spore_parallel::context::*;
//! spore_parallel::init().unwrap();
//! set_auto_parallel_context(AutoParallelUpdate::new().parallel_mode(ParallelMode::SemiAutoParallel)).unwrap();
//! let net = WithLossCell::new(Dense::new(4, 2).unwrap(), MSELoss::new(Reduction::Mean));
//! let types = [TensorType::new(&[8, 4], DType::F32), TensorType::new(&[8, 2], DType::F32)];
//! // On a job of 4 ranks, `"((4, 1), (1, 1))"` would split the batch 4 ways.
//! let sharded = ShardedCell::new(net, &types, &Strategies::new()).unwrap();
//! let opt = Momentum::new(sharded.trainable_params(), 0.1, 0.9).unwrap();
//! let step = TrainOneStepCell::new(sharded, opt);
//! let x = Tensor::ones(&[8, 4], DType::F32).unwrap();
//! let y = Tensor::zeros(&[8, 2], DType::F32).unwrap();
//! assert!(step.call(&[x, y]).unwrap()[0].item().unwrap() >= 0.0);
//! # reset_auto_parallel_context();
//! ```
//!
//! Construction traces the network once at its global shapes, plans every value's
//! layout ([`super::plan_graph`]) with the strategies given (`semi_auto_parallel`) or
//! searched around them on the job's measured rates (`auto_parallel`, `search_mode`),
//! loads and saves strategy files (`strategy_ckpt_config`), and keeps only this rank's
//! block of each parameter: the network given can be dropped, and with it the whole
//! weights.
//! Calls take, on every rank, its block of the batch (MindSpore's default: each rank
//! reads its shard of the dataset; the global batch is the blocks in rank order) or,
//! with `full_batch`, the whole batch; they return whole outputs. The input types given
//! to `new` are the global batch's.
//!
//! `new` spreads the network over the job's ranks. A pipeline stage's cells are spread
//! over the stage's ranks instead (`PipelineCell::sharded`): everything above then
//! happens within that group (its measured rates, its strategy file, named
//! `<stem>_<group>.json`), and each rank of it is given the whole micro-batch.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use spore_core::ir::Graph;
use spore_core::trace::trace;
use spore_core::{Error, Parameter, Result, Tensor, TensorType};
use spore_nn::cell::{Cell, CellBase, CellCall};

use super::agree::{agree, check_same_weights, same_on_mesh};
use super::cost::Cluster;
use super::execute::run_planned_on;
use super::layout::Layout;
use super::plan::{ShardingPlan, plan_graph, plan_graph_local_inputs};
use super::redistribute::redistribute_on;
use super::search::{search, search_given_blocks};
use super::strategy::Strategies;
use super::strategy_file::{load_strategies, save_strategies};
use crate::context::ParallelMode;
use crate::management::{GroupInfo, WORLD_COMM_GROUP, group};

/// A network run on its blocks of every tensor, on every rank of its mesh (the job's
/// ranks, or a pipeline stage's).
pub struct ShardedCell {
    base: CellBase,
    graph: Graph,
    plan: ShardingPlan,
    params: Vec<(String, Parameter)>,
    /// The whole shapes of the parameters, in the graph's order.
    whole_types: Vec<TensorType>,
    inputs: Vec<TensorType>,
    /// The plan as text, with the whole parameter types.
    text: String,
    /// The ranks the plan spans: the job's, or a group of them (a pipeline stage's).
    mesh: GroupInfo,
}

impl ShardedCell {
    /// Plans `network` for this job (after `init()`) at the given global input types.
    pub fn new<C: Cell + ?Sized>(
        network: Arc<C>,
        inputs: &[TensorType],
        strategies: &Strategies,
    ) -> Result<Arc<ShardedCell>> {
        let full_batch = crate::context::get_auto_parallel_context().full_batch;
        ShardedCell::on_mesh(network, inputs, strategies, group(None)?, full_batch)
    }

    /// Plans `network` over the ranks of `mesh` (a group every member calls this on):
    /// given the whole batch on each (`whole_inputs`) or each rank's block of it.
    pub(crate) fn on_mesh<C: Cell + ?Sized>(
        network: Arc<C>,
        inputs: &[TensorType],
        strategies: &Strategies,
        mesh: GroupInfo,
        whole_inputs: bool,
    ) -> Result<Arc<ShardedCell>> {
        let ctx = crate::context::get_auto_parallel_context();
        let size = mesh.size();
        // Each local phase ends in `agree`, so that a failure on one rank is an error on
        // every rank rather than a collective the others wait in.
        let mut graph = agree(
            &mesh,
            trace_global(&network, inputs, &ctx),
            "tracing the network",
        )?;
        let chosen = agree(
            &mesh,
            with_file(strategies, &ctx, &mesh),
            "loading the strategy file",
        )?;
        let plan = if ctx.parallel_mode == ParallelMode::AutoParallel {
            let cluster = Cluster::measure_on(&mesh)?;
            // Momentum's state: one value per parameter.
            let found = match whole_inputs {
                true => search(&graph, &cluster, ctx.search_mode, &chosen, 1.0),
                false => search_given_blocks(&graph, &cluster, ctx.search_mode, &chosen, 1.0),
            };
            agree(&mesh, found.map(|f| f.plan), "searching strategies")?
        } else if whole_inputs {
            agree(&mesh, plan_graph(&graph, &chosen, size), "planning")?
        } else {
            agree(
                &mesh,
                plan_graph_local_inputs(&graph, &chosen, size),
                "planning",
            )?
        };
        same_on_mesh(&mesh, "sharding plan", &fingerprint(&graph, &plan))?;
        let applied = applied(&graph, &plan);
        let saved = match (&ctx.strategy_ckpt_save_file, mesh.rank) {
            (Some(file), 0) => save_strategies(&mesh_file(file, &mesh), &applied, size),
            _ => Ok(()),
        };
        agree(&mesh, saved, "saving the strategy file")?;
        check_same_weights(&mesh, &graph.params)?;
        let (params, whole_types) = agree(
            &mesh,
            cut_parameters(&graph, &plan, mesh.rank),
            "cutting the parameters",
        )?;
        let text = plan.describe(&graph);
        let expected: Vec<TensorType> = match plan.local_inputs {
            false => inputs.to_vec(),
            true => inputs
                .iter()
                .zip(&plan.inputs)
                .map(|(t, l)| {
                    let local = l.local_shape(&t.shape).map_err(Error::invalid)?;
                    Ok(TensorType::new(&local, t.dtype))
                })
                .collect::<Result<_>>()?,
        };
        // The graph now reads the blocks; the whole weights go with the network.
        graph.params = params.iter().map(|(_, p)| p.clone()).collect();
        super::holders::register(&graph.params, &plan.params, &mesh);
        let world_rank = mesh.world_ranks[mesh.rank];
        let cell = ShardedCell {
            base: CellBase::new(),
            graph,
            plan,
            params,
            whole_types,
            inputs: expected,
            text,
            mesh,
        };
        agree(
            &cell.mesh,
            cell.save_plan(world_rank),
            "writing the sharding plan",
        )?;
        Ok(Arc::new(cell))
    }

    /// Every value's layout.
    pub fn plan(&self) -> &ShardingPlan {
        &self.plan
    }

    /// The traced global graph (reading the local parameters).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The plan as text (what `save_graphs` writes as `sharding_plan_rank<r>.txt`).
    pub fn describe(&self) -> &str {
        &self.text
    }

    /// The layout a parameter is stored in and its whole type.
    pub fn parameter_layout(&self, name: &str) -> Option<(&Layout, &TensorType)> {
        let i = self.params.iter().position(|(n, _)| n == name)?;
        Some((&self.plan.params[i], &self.whole_types[i]))
    }

    /// The whole value of a parameter (or of a tensor laid out like it, such as its
    /// gradient), gathered from the ranks of its mesh: a collective each of them must call.
    pub fn gather_parameter(&self, name: &str, local: &Tensor) -> Result<Tensor> {
        let (layout, ty) = self
            .parameter_layout(name)
            .ok_or_else(|| Error::invalid(format!("ShardedCell: no parameter named '{name}'")))?;
        let whole = Layout::replicated(self.plan.devices, ty.shape.len());
        redistribute_on(&self.mesh, &local.detach(), &ty.shape, layout, &whole)
    }

    fn save_plan(&self, rank: usize) -> Result<()> {
        let ctx = spore_core::context::get_context();
        if ctx.save_graphs == 0 {
            return Ok(());
        }
        let dir = &ctx.save_graphs_path;
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(dir, format!("cannot create save_graphs_path: {e}")))?;
        let path = dir.join(format!("sharding_plan_rank{rank}.txt"));
        std::fs::write(&path, &self.text)
            .map_err(|e| Error::io(&path, format!("cannot write the sharding plan: {e}")))
    }
}

/// The network traced at its global shapes, in a sharded parallel mode.
fn trace_global<C: Cell + ?Sized>(
    network: &Arc<C>,
    inputs: &[TensorType],
    ctx: &crate::context::AutoParallelContext,
) -> Result<Graph> {
    if !matches!(
        ctx.parallel_mode,
        ParallelMode::SemiAutoParallel | ParallelMode::AutoParallel
    ) {
        return Err(Error::invalid(format!(
            "ShardedCell: parallel_mode is {}; set it to semi_auto_parallel or auto_parallel first (a sharded network inserts its own gradient reductions, which data parallelism would repeat)",
            ctx.parallel_mode.name()
        )));
    }
    let name = format!("Sharded_{}", network.class_name());
    // The global shapes are never allocated whole on one rank.
    spore_core::memory::with_global_shapes(|| trace(&name, inputs, |xs| network.call(xs)))
}

/// What every rank's plan must agree on: each node's name, type, layout and strategy,
/// and each parameter's type and layout.
fn fingerprint(graph: &Graph, plan: &ShardingPlan) -> String {
    let mut text = String::new();
    for (node, ns) in graph.nodes.iter().zip(&plan.nodes) {
        let strategy = ns
            .strategy
            .as_ref()
            .map(|(_, s)| s.to_string())
            .unwrap_or_default();
        text += &format!("{} {} {} {strategy}\n", node.name, node.ty(), ns.out);
    }
    for (p, l) in graph.params.iter().zip(&plan.params) {
        text += &format!("{} {} {l}\n", p.name(), p.tensor_type());
    }
    text
}

/// This rank's block of every parameter, as new parameters, and the whole types.
type CutParameters = (Vec<(String, Parameter)>, Vec<TensorType>);

fn cut_parameters(graph: &Graph, plan: &ShardingPlan, rank: usize) -> Result<CutParameters> {
    let mut params = vec![];
    let mut whole_types = vec![];
    for (p, layout) in graph.params.iter().zip(&plan.params) {
        let whole = p.stored();
        let block = local_block(&whole, layout, rank)
            .map_err(|m| Error::invalid(format!("sharding parameter {}: {m}", p.name())))?;
        whole_types.push(whole.tensor_type().clone());
        let local = Parameter::with_requires_grad(block, &p.name(), p.requires_grad());
        params.push((p.name(), local));
    }
    Ok((params, whole_types))
}

/// The user's strategies with those of `strategy_ckpt_config`'s load file over them.
fn with_file(
    strategies: &Strategies,
    ctx: &crate::context::AutoParallelContext,
    mesh: &GroupInfo,
) -> Result<Strategies> {
    let mut chosen = strategies.clone();
    if let Some(file) = &ctx.strategy_ckpt_load_file {
        let file = mesh_file(file, mesh);
        let (loaded, devices) = load_strategies(&file)?;
        if devices != mesh.size() {
            return Err(Error::io(
                &file,
                format!(
                    "the strategies were planned for {devices} ranks; {} has {}",
                    mesh_name(mesh),
                    mesh.size()
                ),
            ));
        }
        for (path, s) in loaded.entries() {
            chosen.set(path, s.clone())?;
        }
    }
    Ok(chosen)
}

/// `the job`, or `group '<name>'` for a group of its ranks (for messages).
pub(crate) fn mesh_name(mesh: &GroupInfo) -> String {
    match mesh.name == WORLD_COMM_GROUP {
        true => "the job".to_string(),
        false => format!("group '{}'", mesh.name),
    }
}

/// The strategy file of the network sharded over `mesh`: `file` itself for the job's
/// ranks, else `file` with the group's name before its extension (each pipeline stage
/// plans its own cells: `strategy_pipeline_stage1_of2_ranks2.json`).
fn mesh_file(file: &Path, mesh: &GroupInfo) -> PathBuf {
    if mesh.name == WORLD_COMM_GROUP {
        return file.to_path_buf();
    }
    let stem = file.file_stem().unwrap_or_default().to_string_lossy();
    let name = match file.extension() {
        Some(ext) => format!("{stem}_{}.{}", mesh.name, ext.to_string_lossy()),
        None => format!("{stem}_{}", mesh.name),
    };
    file.with_file_name(name)
}

/// The strategy each node got, by exact node name (what a strategy file records).
fn applied(graph: &Graph, plan: &ShardingPlan) -> Strategies {
    let mut s = Strategies::new();
    for (node, ns) in graph.nodes.iter().zip(&plan.nodes) {
        if let Some((_, st)) = &ns.strategy {
            // Node names are never empty, so this cannot fail.
            let _ = s.set(&node.name, st.clone());
        }
    }
    s
}

/// This rank's block of a whole tensor (no communication).
pub(crate) fn local_block(
    whole: &Tensor,
    layout: &Layout,
    rank: usize,
) -> std::result::Result<Tensor, String> {
    let shape = whole.shape().to_vec();
    layout.local_shape(&shape)?;
    let mut x = whole.detach();
    for d in 0..shape.len() {
        let (start, len) = layout.block(&shape, rank, d);
        if len != shape[d] {
            x = x
                .narrow(d as isize, start, len)
                .map_err(|e| e.to_string())?;
        }
    }
    // Its own contiguous storage, so the whole tensor can be freed.
    let s = x
        .storage()
        .ok_or("a parameter must hold a concrete value")?;
    let block = spore_kernels::elementwise::copy(&s.buffer, &s.layout);
    Tensor::from_buffer(block, x.shape()).map_err(|e| e.to_string())
}

impl Cell for ShardedCell {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let given = match self.plan.local_inputs {
            true => "this rank's block of the batch, full_batch being off",
            false => "the whole batch on every rank, full_batch being on",
        };
        if inputs.len() != self.inputs.len() {
            return Err(Error::invalid(format!(
                "{}: expected {} inputs ({given}), got {}",
                self.graph.name,
                self.inputs.len(),
                inputs.len()
            )));
        }
        for (k, (x, t)) in inputs.iter().zip(&self.inputs).enumerate() {
            if x.tensor_type() != t {
                return Err(Error::invalid(format!(
                    "{}: input {k} must be {t} ({given}), got {}",
                    self.graph.name,
                    x.tensor_type()
                )));
            }
        }
        let params: Vec<Parameter> = self.params.iter().map(|(_, p)| p.clone()).collect();
        run_planned_on(&self.mesh, &self.graph, &self.plan, &params, inputs)
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        self.params.clone()
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "ShardedCell"
    }
}
