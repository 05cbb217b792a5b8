//! MindSpore's auto-parallel context: how a distributed job trains. Set it after
//! `init()` and before building the network.
//!
//! ```
//! use spore_parallel::context::*;
//! set_auto_parallel_context(
//!     AutoParallelUpdate::new()
//!         .parallel_mode(ParallelMode::DataParallel)
//!         .gradients_mean(true)
//!         .set("comm_fusion", r#"{"allreduce": {"mode": "size", "config": 32}}"#).unwrap(),
//! ).unwrap();
//! assert!(get_auto_parallel_context().gradients_mean);
//! let e = set_auto_parallel_context(AutoParallelUpdate::new().set("device_num", "0").unwrap());
//! assert!(e.unwrap_err().to_string().contains("device_num must be in [1, 4096]"));
//! reset_auto_parallel_context();
//! assert_eq!(get_auto_parallel_context().parallel_mode, ParallelMode::StandAlone);
//! ```
//!
//! `semi_auto_parallel` and `auto_parallel` are operator-level parallelism: a network
//! wrapped in [`crate::sharding::ShardedCell`], with the user's per-operator strategies
//! or with strategies found by `search_mode`; `strategy_ckpt_config` saves and loads
//! them. `pipeline_stages` splits the ranks into the stages of a
//! [`crate::pipeline::PipelineCell`]; `enable_parallel_optimizer` shards the optimizer
//! among the ranks that hold the same parameters. The other fields of pipeline and optimizer parallelism
//! (`pipeline_config`, `parallel_optimizer_config`, ...) are recognised and refused with
//! an error until those exist. `full_batch` (or `dataset_strategy`) says whether a
//! sharded network's ranks are each given the whole batch or their block of it.

use std::path::PathBuf;
use std::sync::RwLock;

use spore_core::{Error, Result};

pub use crate::sharding::SearchMode;

/// MindSpore's `parallel_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ParallelMode {
    /// One process's training; no communication is added.
    #[default]
    StandAlone,
    /// The batch is split across ranks and gradients are reduced after the backward pass.
    DataParallel,
    /// The user splits the model by hand with the collective operators; Spore adds no
    /// communication of its own.
    HybridParallel,
    /// Operator-level parallelism: strategies split each operator's tensors across the
    /// ranks and Spore inserts the communication (`sharding::ShardedCell`).
    SemiAutoParallel,
    /// Strategies found by a search over a cost model (`search_mode`), the user's kept.
    AutoParallel,
}

const MODES: &str =
    "stand_alone, data_parallel, hybrid_parallel, semi_auto_parallel, auto_parallel";

impl ParallelMode {
    pub fn parse(s: &str) -> Result<ParallelMode> {
        Ok(match s {
            "stand_alone" => ParallelMode::StandAlone,
            "data_parallel" => ParallelMode::DataParallel,
            "hybrid_parallel" => ParallelMode::HybridParallel,
            "semi_auto_parallel" => ParallelMode::SemiAutoParallel,
            "auto_parallel" => ParallelMode::AutoParallel,
            _ => {
                return Err(Error::invalid(format!(
                    "set_auto_parallel_context: parallel_mode must be one of {MODES}; got {s:?}"
                )));
            }
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            ParallelMode::StandAlone => "stand_alone",
            ParallelMode::DataParallel => "data_parallel",
            ParallelMode::HybridParallel => "hybrid_parallel",
            ParallelMode::SemiAutoParallel => "semi_auto_parallel",
            ParallelMode::AutoParallel => "auto_parallel",
        }
    }
}

/// How gradients are grouped into AllReduce buckets (`comm_fusion`'s `allreduce` entry,
/// or `all_reduce_fusion_config`).
#[derive(Clone, Debug, PartialEq, Default)]
pub enum AllReduceFusion {
    /// No fusion: one AllReduce per parameter (MindSpore's default).
    #[default]
    Off,
    /// Buckets of up to 64 MB (`"mode": "auto"`).
    Auto,
    /// Buckets of up to this many MB, filled in the order gradients finish (last layer
    /// first) (`"mode": "size"`).
    SizeMb(f64),
    /// Bucket boundaries at these parameter indices (`"mode": "index"`, or
    /// `all_reduce_fusion_config`): `[20, 35]` makes buckets `0..20`, `20..35`, `35..`.
    Index(Vec<usize>),
}

/// The context's current values.
#[derive(Clone, Debug, PartialEq)]
pub struct AutoParallelContext {
    pub parallel_mode: ParallelMode,
    /// `None`: the job's group size.
    pub device_num: Option<usize>,
    /// Accepted and stored, with no effect: the rank comes from the launcher (MindSpore
    /// deprecated it for the same reason).
    pub global_rank: usize,
    /// Divide reduced gradients by the group size.
    pub gradients_mean: bool,
    /// Accepted and stored, with no effect yet: it matters for float16 gradients, which
    /// data parallelism does not produce until mixed precision lands.
    pub gradient_fp32_sync: bool,
    /// Accepted and stored, with no effect yet: MindSpore uses it in semi-automatic
    /// parallelism only.
    pub loss_repeated_mean: bool,
    /// Copy rank 0's parameters to every rank before the first step.
    pub parameter_broadcast: bool,
    pub all_reduce_fusion_config: Vec<usize>,
    /// `comm_fusion`'s `allreduce` entry, when set.
    pub comm_fusion: Option<AllReduceFusion>,
    /// How `auto_parallel` chooses strategies.
    pub search_mode: SearchMode,
    /// Where a sharded network's strategies are written (`strategy_ckpt_config`'s
    /// `save_file`, or `strategy_ckpt_save_file`).
    pub strategy_ckpt_save_file: Option<PathBuf>,
    /// Strategies to apply, read when a sharded network is built (`load_file`).
    pub strategy_ckpt_load_file: Option<PathBuf>,
    /// How many pipeline stages the ranks form (`PipelineCell`); 1: no pipeline.
    pub pipeline_stages: usize,
    /// Shard the optimizer's state and update across the data-parallel ranks.
    pub enable_parallel_optimizer: bool,
    /// Whether every rank is given the whole batch (`true`) or its block of it (`false`,
    /// MindSpore's default: each rank reads its shard of the dataset) in the sharded
    /// modes. `dataset_strategy` `"full_batch"` / `"data_parallel"` set it too.
    pub full_batch: bool,
}

impl Default for AutoParallelContext {
    fn default() -> Self {
        AutoParallelContext {
            parallel_mode: ParallelMode::StandAlone,
            device_num: None,
            global_rank: 0,
            gradients_mean: false,
            gradient_fp32_sync: true,
            loss_repeated_mean: true,
            parameter_broadcast: false,
            all_reduce_fusion_config: vec![],
            comm_fusion: None,
            search_mode: SearchMode::RecursiveProgramming,
            strategy_ckpt_save_file: None,
            strategy_ckpt_load_file: None,
            pipeline_stages: 1,
            enable_parallel_optimizer: false,
            full_batch: false,
        }
    }
}

impl AutoParallelContext {
    /// The bucketing in effect: `comm_fusion` first, then `all_reduce_fusion_config`.
    pub fn all_reduce_fusion(&self) -> AllReduceFusion {
        match (&self.comm_fusion, self.all_reduce_fusion_config.is_empty()) {
            (Some(f), _) => f.clone(),
            (None, false) => AllReduceFusion::Index(self.all_reduce_fusion_config.clone()),
            (None, true) => AllReduceFusion::Off,
        }
    }
}

static CONTEXT: RwLock<Option<AutoParallelContext>> = RwLock::new(None);

/// The current context.
pub fn get_auto_parallel_context() -> AutoParallelContext {
    match CONTEXT.read() {
        Ok(c) => c.clone().unwrap_or_default(),
        Err(p) => p.into_inner().clone().unwrap_or_default(),
    }
}

/// Back to the defaults.
pub fn reset_auto_parallel_context() {
    let mut c = CONTEXT.write().unwrap_or_else(|p| p.into_inner());
    *c = None;
}

/// Applies `update`; on any error nothing changes.
pub fn set_auto_parallel_context(update: AutoParallelUpdate) -> Result<()> {
    if let Some(e) = update.error {
        return Err(Error::invalid(e));
    }
    let mut c = CONTEXT.write().unwrap_or_else(|p| p.into_inner());
    let mut next = c.clone().unwrap_or_default();
    for change in update.changes {
        change(&mut next)?;
    }
    *c = Some(next);
    Ok(())
}

type Change = Box<dyn FnOnce(&mut AutoParallelContext) -> Result<()> + Send>;

/// Changes for [`set_auto_parallel_context`]; fields not named keep their values.
#[derive(Default)]
pub struct AutoParallelUpdate {
    changes: Vec<Change>,
    error: Option<String>,
}

fn invalid(message: String) -> Error {
    Error::invalid(format!("set_auto_parallel_context: {message}"))
}

/// Fields of the parallel modes that do not exist yet.
const LATER: &[&str] = &[
    "parallel_optimizer_config",
    "pipeline_config",
    "enable_alltoall",
    "group_ckpt_save_file",
    "auto_pipeline",
];

impl AutoParallelUpdate {
    pub fn new() -> Self {
        Self::default()
    }

    fn change(
        mut self,
        f: impl FnOnce(&mut AutoParallelContext) -> Result<()> + Send + 'static,
    ) -> Self {
        self.changes.push(Box::new(f));
        self
    }

    pub fn parallel_mode(self, mode: ParallelMode) -> Self {
        self.change(move |c| {
            c.parallel_mode = mode;
            Ok(())
        })
    }
    /// In [1, 4096].
    pub fn device_num(self, n: usize) -> Self {
        self.change(move |c| {
            if !(1..=4096).contains(&n) {
                return Err(invalid(format!("device_num must be in [1, 4096], got {n}")));
            }
            c.device_num = Some(n);
            Ok(())
        })
    }
    /// In [0, 4095].
    pub fn global_rank(self, r: usize) -> Self {
        self.change(move |c| {
            if r > 4095 {
                return Err(invalid(format!(
                    "global_rank must be in [0, 4095], got {r}"
                )));
            }
            c.global_rank = r;
            Ok(())
        })
    }
    pub fn gradients_mean(self, on: bool) -> Self {
        self.change(move |c| {
            c.gradients_mean = on;
            Ok(())
        })
    }
    pub fn gradient_fp32_sync(self, on: bool) -> Self {
        self.change(move |c| {
            c.gradient_fp32_sync = on;
            Ok(())
        })
    }
    pub fn loss_repeated_mean(self, on: bool) -> Self {
        self.change(move |c| {
            c.loss_repeated_mean = on;
            Ok(())
        })
    }
    pub fn parameter_broadcast(self, on: bool) -> Self {
        self.change(move |c| {
            c.parameter_broadcast = on;
            Ok(())
        })
    }
    /// Strictly increasing parameter indices of at least 1.
    pub fn all_reduce_fusion_config(self, indices: Vec<usize>) -> Self {
        self.change(move |c| {
            check_indices("all_reduce_fusion_config", &indices)?;
            c.all_reduce_fusion_config = indices;
            Ok(())
        })
    }
    /// `search_mode` (MindSpore's default here: `recursive_programming`).
    pub fn search_mode(self, mode: SearchMode) -> Self {
        self.change(move |c| {
            c.search_mode = mode;
            Ok(())
        })
    }
    /// `strategy_ckpt_config`: where strategies are saved to and loaded from (`None`
    /// leaves a file unset). Each stage of a sharded pipeline uses its own file, with
    /// its group's name before the extension (`strategy_pipeline_stage1_of2_ranks2.json`).
    pub fn strategy_ckpt_config(
        self,
        save_file: Option<PathBuf>,
        load_file: Option<PathBuf>,
    ) -> Self {
        self.change(move |c| {
            for f in save_file.iter().chain(&load_file) {
                if f.as_os_str().is_empty() {
                    return Err(invalid(
                        "strategy_ckpt_config: a file name is empty".to_string(),
                    ));
                }
            }
            c.strategy_ckpt_save_file = save_file;
            c.strategy_ckpt_load_file = load_file;
            Ok(())
        })
    }
    /// MindSpore's older `strategy_ckpt_save_file` (`save`) or `strategy_ckpt_load_file`:
    /// sets that file only (empty: unset).
    fn strategy_ckpt_file(self, save: bool, file: &str) -> Self {
        let file = (!file.is_empty()).then(|| PathBuf::from(file));
        self.change(move |c| {
            match save {
                true => c.strategy_ckpt_save_file = file,
                false => c.strategy_ckpt_load_file = file,
            }
            Ok(())
        })
    }
    /// MindSpore's `pipeline_stages`: at least 1; the job's ranks must divide into that
    /// many stages (checked when a `PipelineCell` is built).
    pub fn pipeline_stages(self, stages: usize) -> Self {
        self.change(move |c| {
            if stages == 0 {
                return Err(invalid(
                    "pipeline_stages must be at least 1, got 0".to_string(),
                ));
            }
            c.pipeline_stages = stages;
            Ok(())
        })
    }
    /// MindSpore's `enable_parallel_optimizer`: each of the `N` ranks that hold the same
    /// parameter (all ranks of a data-parallel job; those holding the same block in a
    /// sharded network; a pipeline stage's replicas) keeps the optimizer state of, and
    /// updates, a `1/N` slice of it.
    pub fn enable_parallel_optimizer(self, on: bool) -> Self {
        self.change(move |c| {
            c.enable_parallel_optimizer = on;
            Ok(())
        })
    }
    /// MindSpore's `full_batch`: in `semi_auto_parallel` and `auto_parallel`, whether
    /// each rank is given the whole batch (`true`) or its block of the first dimension
    /// (`false`, the default).
    pub fn full_batch(self, on: bool) -> Self {
        self.change(move |c| {
            c.full_batch = on;
            Ok(())
        })
    }
    /// MindSpore's `dataset_strategy` as a string: `"data_parallel"` (each rank its block
    /// of the batch) or `"full_batch"`. Per-input strategy tuples are refused until they
    /// exist.
    pub fn dataset_strategy(self, strategy: &str) -> Self {
        let strategy = strategy.trim().to_string();
        self.change(move |c| {
            c.full_batch = match strategy.as_str() {
                "data_parallel" => false,
                "full_batch" => true,
                other => {
                    return Err(invalid(format!(
                        "dataset_strategy must be \"data_parallel\" or \"full_batch\" (per-input strategy tuples are \
                         not available yet), got {other:?}"
                    )));
                }
            };
            Ok(())
        })
    }
    /// `comm_fusion`'s `allreduce` entry.
    pub fn comm_fusion(self, fusion: AllReduceFusion) -> Self {
        self.change(move |c| {
            match &fusion {
                AllReduceFusion::SizeMb(mb) if !(mb.is_finite() && *mb > 0.0) => {
                    return Err(invalid(format!(
                        "comm_fusion: the allreduce size must be a positive number of MB, got {mb}"
                    )));
                }
                AllReduceFusion::Index(i) => {
                    check_indices("comm_fusion's allreduce index config", i)?
                }
                _ => {}
            }
            c.comm_fusion = Some(fusion);
            Ok(())
        })
    }

    /// Sets a field from text, as a configuration file or command line gives it
    /// (`comm_fusion` as MindSpore's JSON dictionary, lists as `[1, 2]` or `1,2`).
    pub fn set(self, key: &str, value: &str) -> Result<Self> {
        let flag = || -> Result<bool> {
            match value.trim().to_ascii_lowercase().as_str() {
                "true" | "1" => Ok(true),
                "false" | "0" => Ok(false),
                _ => Err(invalid(format!(
                    "{key} must be true or false, got {value:?}"
                ))),
            }
        };
        let number = || -> Result<usize> {
            value.trim().parse::<usize>().map_err(|_| {
                invalid(format!(
                    "{key} must be a non-negative integer, got {value:?}"
                ))
            })
        };
        Ok(match key {
            "parallel_mode" => self.parallel_mode(ParallelMode::parse(value.trim())?),
            "device_num" => self.device_num(number()?),
            "global_rank" => self.global_rank(number()?),
            "gradients_mean" => self.gradients_mean(flag()?),
            "gradient_fp32_sync" => self.gradient_fp32_sync(flag()?),
            "loss_repeated_mean" => self.loss_repeated_mean(flag()?),
            "parameter_broadcast" => self.parameter_broadcast(flag()?),
            "all_reduce_fusion_config" => self.all_reduce_fusion_config(parse_indices(key, value)?),
            "comm_fusion" => self.comm_fusion(parse_comm_fusion(value)?),
            "pipeline_stages" => self.pipeline_stages(number()?),
            "enable_parallel_optimizer" => self.enable_parallel_optimizer(flag()?),
            "full_batch" => self.full_batch(flag()?),
            "dataset_strategy" => self.dataset_strategy(value.trim().trim_matches('"')),
            "search_mode" | "auto_parallel_search_mode" => {
                self.search_mode(SearchMode::parse(value).map_err(|e| invalid(e.to_string()))?)
            }
            "strategy_ckpt_save_file" => self.strategy_ckpt_file(true, value),
            "strategy_ckpt_load_file" => self.strategy_ckpt_file(false, value),
            "strategy_ckpt_config" => {
                let (save, load) = parse_strategy_ckpt_config(value)?;
                self.strategy_ckpt_config(save, load)
            }
            k if LATER.contains(&k) => {
                return Err(invalid(format!(
                    "{k} belongs to pipeline or optimizer parallelism, which is not available yet"
                )));
            }
            _ => {
                return Err(invalid(format!(
                    "unknown field {key:?}; expected one of parallel_mode, device_num, global_rank, gradients_mean, \
                     gradient_fp32_sync, loss_repeated_mean, parameter_broadcast, all_reduce_fusion_config, comm_fusion, \
                     search_mode, strategy_ckpt_config, pipeline_stages, enable_parallel_optimizer, full_batch, dataset_strategy"
                )));
            }
        })
    }
}

fn check_indices(what: &str, indices: &[usize]) -> Result<()> {
    for w in indices.windows(2) {
        if w[1] <= w[0] {
            return Err(invalid(format!(
                "{what} must be strictly increasing, got {indices:?}"
            )));
        }
    }
    if indices.first() == Some(&0) {
        return Err(invalid(format!(
            "{what}: indices split the parameter list and must be at least 1, got {indices:?}"
        )));
    }
    Ok(())
}

fn parse_indices(key: &str, value: &str) -> Result<Vec<usize>> {
    let inner = value.trim().trim_start_matches('[').trim_end_matches(']');
    if inner.trim().is_empty() {
        return Ok(vec![]);
    }
    inner
        .split(',')
        .map(|s| {
            s.trim().parse::<usize>().map_err(|_| {
                invalid(format!(
                    "{key} must be a list of parameter indices, got {value:?}"
                ))
            })
        })
        .collect()
}

/// MindSpore's `{"save_file": path, "load_file": path, "only_trainable_params": bool}`.
fn parse_strategy_ckpt_config(json: &str) -> Result<(Option<PathBuf>, Option<PathBuf>)> {
    let bad = |why: String| invalid(format!("strategy_ckpt_config {json:?}: {why}"));
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| bad(format!("not a JSON dictionary ({e})")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| bad("expected a dictionary".into()))?;
    let mut files = [None, None];
    for (key, value) in obj {
        let slot = match key.as_str() {
            "save_file" => 0,
            "load_file" => 1,
            "only_trainable_params" => continue,
            other => {
                return Err(bad(format!(
                    "unknown key {other:?}; expected save_file, load_file, only_trainable_params"
                )));
            }
        };
        let path = value
            .as_str()
            .ok_or_else(|| bad(format!("{key} must be a file name")))?;
        files[slot] = (!path.is_empty()).then(|| PathBuf::from(path));
    }
    let [save, load] = files;
    Ok((save, load))
}

/// MindSpore's `{"allreduce": {"mode": "auto" | "size" | "index", "config": ...}}`.
fn parse_comm_fusion(json: &str) -> Result<AllReduceFusion> {
    let bad = |why: String| invalid(format!("comm_fusion {json:?}: {why}"));
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| bad(format!("not a JSON dictionary ({e})")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| bad("expected a dictionary".into()))?;
    for key in obj.keys() {
        match key.as_str() {
            "allreduce" => {}
            "allgather" | "reducescatter" => {
                return Err(bad(format!(
                    "{key} fusion belongs to the parallel optimizer, which is not available yet"
                )));
            }
            other => {
                return Err(bad(format!(
                    "unknown key {other:?}; expected \"allreduce\""
                )));
            }
        }
    }
    let entry = obj
        .get("allreduce")
        .ok_or_else(|| bad("expected an \"allreduce\" entry".into()))?;
    let mode = entry
        .get("mode")
        .and_then(|m| m.as_str())
        .ok_or_else(|| bad("the allreduce entry needs a \"mode\" (auto, size or index)".into()))?;
    let config = entry.get("config");
    match mode {
        "auto" => Ok(AllReduceFusion::Auto),
        "size" => config
            .and_then(|c| c.as_f64())
            .map(AllReduceFusion::SizeMb)
            .ok_or_else(|| bad("mode \"size\" needs \"config\": a size in MB".into())),
        "index" => config
            .and_then(|c| c.as_array())
            .and_then(|a| a.iter().map(|i| i.as_u64().map(|i| i as usize)).collect())
            .map(AllReduceFusion::Index)
            .ok_or_else(|| {
                bad("mode \"index\" needs \"config\": a list of parameter indices".into())
            }),
        other => Err(bad(format!(
            "unknown mode {other:?}; expected auto, size or index"
        ))),
    }
}
