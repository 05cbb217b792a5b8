//! `spore parallel plan`: the strategy search and cost model for clusters this machine
//! cannot run. For each device count it prints the strategy chosen per product and
//! convolution, the predicted step time and the memory per device, beside pure data
//! parallelism's prediction for comparison.
//!
//! ```
//! use spore::cli::parallel::{plan, PlanArgs};
//! let args = PlanArgs { model: "mlp".into(), devices: vec![8], ..PlanArgs::default() };
//! let text = plan(&args).unwrap();
//! assert!(text.contains("8 devices"), "{text}");
//! ```

use std::fmt::Write;
use std::sync::Arc;

use spore_core::ir::Graph;
use spore_core::{DType, Error, Result, TensorType};
use spore_nn::cell::{Cell, CellCall};
use spore_nn::loss::{Reduction, SoftmaxCrossEntropyWithLogits};
use spore_nn::wrap::WithLossCell;
use spore_nn::zoo::{BertClassifier, BertConfig, ImageNetResNet, LeNet5, Mlp, ResNet};
use spore_parallel::sharding::{
    Cluster, SearchMode, Searched, ShardingPlan, Strategies, Strategy, candidates, plan_cost,
    plan_graph, plan_graph_local_inputs, search, search_given_blocks,
};

type Searcher = fn(&Graph, &Cluster, SearchMode, &Strategies, f64) -> Result<Searched>;
type Planner = fn(&Graph, &Strategies, usize) -> Result<ShardingPlan>;

/// What `spore parallel plan` was asked.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanArgs {
    /// lenet, mlp, resnet18, resnet50 or bert.
    pub model: String,
    pub devices: Vec<usize>,
    pub batch_per_device: usize,
    pub search_mode: SearchMode,
    pub cluster: Cluster,
    /// Optimizer state per parameter byte (Momentum 1, Adam 2).
    pub optimizer_factor: f64,
    /// Whether every device is given the whole batch (`full_batch`) rather than its
    /// block of it (MindSpore's default, and Spore's at run time).
    pub full_batch: bool,
}

impl Default for PlanArgs {
    fn default() -> Self {
        PlanArgs {
            model: "mlp".into(),
            devices: vec![8, 64, 512, 4096],
            batch_per_device: 8,
            search_mode: SearchMode::RecursiveProgramming,
            cluster: Cluster {
                memory: 64e9,
                ..Cluster::example(1)
            },
            optimizer_factor: 1.0,
            full_batch: false,
        }
    }
}

/// The models the planner knows: the network with its loss, and its input types at
/// global batch `batch`.
pub const MODELS: &str = "lenet, mlp, resnet18, resnet50, bert";

fn model(name: &str, batch: usize) -> Result<(Arc<dyn Cell>, Vec<TensorType>)> {
    let images = |c: usize, side: usize| TensorType::new(&[batch, c, side, side], DType::F32);
    let labels = TensorType::new(&[batch], DType::I32);
    let (net, input): (Arc<dyn Cell>, TensorType) = match name {
        "lenet" => (LeNet5::new(10)?, images(1, 32)),
        "mlp" => (Mlp::new()?, images(1, 28)),
        "resnet18" => (ResNet::resnet18(10)?, images(3, 32)),
        "resnet50" => (ImageNetResNet::resnet50(1000)?, images(3, 224)),
        "bert" => (
            BertClassifier::new(&BertConfig::small())?,
            TensorType::new(&[batch, 128], DType::I32),
        ),
        other => {
            return Err(Error::invalid(format!(
                "spore parallel plan: unknown model {other:?}; choose one of {MODELS}"
            )));
        }
    };
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    Ok((WithLossCell::new_dyn(net, loss), vec![input, labels]))
}

/// Data parallelism as strategies: every product and convolution split by its batch
/// (the candidate that splits only the first dimension), where one exists.
fn data_parallel(g: &spore_core::ir::Graph, devices: usize) -> Strategies {
    let mut s = Strategies::new();
    for (id, node) in g.nodes.iter().enumerate() {
        let batch_only = candidates(g, id, devices).into_iter().find(|c: &Strategy| {
            c.inputs[0].first() == Some(&devices) && c.inputs[0][1..].iter().all(|&f| f == 1)
        });
        if let Some(c) = batch_only {
            let _ = s.set(&node.name, c);
        }
    }
    s
}

/// Plans `args.model` for each device count; returns the report.
pub fn plan(args: &PlanArgs) -> Result<String> {
    let mut out = String::new();
    for &devices in &args.devices {
        let batch = args.batch_per_device.checked_mul(devices).ok_or_else(|| {
            Error::invalid(format!(
                "spore parallel plan: a batch of {} per device on {devices} devices overflows",
                args.batch_per_device
            ))
        })?;
        let (net, types) = model(&args.model, batch)?;
        // The global batch of thousands of devices exists only as shapes.
        let g = spore_core::memory::with_global_shapes(|| {
            spore_core::trace::trace(&args.model, &types, |x| net.call(x))
        })?;
        let cluster = Cluster {
            devices,
            ..args.cluster.clone()
        };
        let started = std::time::Instant::now();
        let (searcher, planner) = match args.full_batch {
            true => (search as Searcher, plan_graph as Planner),
            false => (
                search_given_blocks as Searcher,
                plan_graph_local_inputs as Planner,
            ),
        };
        let found = searcher(
            &g,
            &cluster,
            args.search_mode,
            &Strategies::new(),
            args.optimizer_factor,
        )?;
        let took = started.elapsed().as_secs_f64();
        let dp = planner(&g, &data_parallel(&g, devices), devices)
            .map(|p| plan_cost(&g, &p, &cluster, args.optimizer_factor));
        report(&mut out, args, devices, batch, &g, &found, took, dp.ok());
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn report(
    out: &mut String,
    args: &PlanArgs,
    devices: usize,
    batch: usize,
    g: &spore_core::ir::Graph,
    found: &Searched,
    took: f64,
    dp: Option<spore_parallel::sharding::Cost>,
) {
    let c = &found.cost;
    let _ = writeln!(
        out,
        "== {} on {devices} devices (global batch {batch}), {} in {took:.2} s",
        args.model,
        args.search_mode.name()
    );
    for (node, ns) in g.nodes.iter().zip(&found.plan.nodes) {
        if let Some((_, s)) = &ns.strategy {
            let _ = writeln!(out, "  {:<60} {s}", node.name);
        }
    }
    let _ = writeln!(
        out,
        "  predicted step {:.3} ms (compute {:.3}, communication {:.3}); per device {:.1} MB (parameters {:.1}, gradients {:.1}, optimizer {:.1}, activations {:.1})",
        c.step_time() * 1e3,
        c.compute * 1e3,
        c.communication * 1e3,
        c.memory() / 1e6,
        c.parameter_bytes / 1e6,
        c.gradient_bytes / 1e6,
        c.optimizer_bytes / 1e6,
        c.activation_bytes / 1e6
    );
    match dp {
        Some(d) => {
            let _ = writeln!(
                out,
                "  pure data parallelism: {:.3} ms (communication {:.3}), {:.1} MB per device",
                d.step_time() * 1e3,
                d.communication * 1e3,
                d.memory() / 1e6
            );
        }
        None => {
            let _ = writeln!(
                out,
                "  pure data parallelism: the batch does not split {devices} ways"
            );
        }
    }
}
