//! The Dump tool: every selected op's inputs and outputs written under MindSpore 2.x's
//! layout, in Graph and PyNative mode, configured by the JSON file named in
//! `SPORE_DUMP_CONFIG` (or `MINDSPORE_DUMP_CONFIG`), or by [`enable`].
//!
//! ```text
//! {path}/rank_{id}/{net_name}/{graph_id}/{iteration}/{op_type}.{op_name}.{task}.{stream}.{ts}.{input|output}.{slot}.DefaultFormat.npy
//! {path}/rank_{id}/{net_name}/{graph_id}/{iteration}/statistic.csv
//! {path}/rank_{id}/execution_order/ms_execution_order_graph_{graph_id}.csv
//! {path}/rank_{id}/graphs/ms_output_trace_code_graph_{graph_id}.ir
//! {path}/rank_{id}/.dump_metadata/data_dump.json
//! ```
//!
//! PyNative ops are graph 0 (compiled graphs count from 1); their iteration advances with
//! `debug::step_end`. In overflow mode (`op_debug_mode` non-zero) only ops whose outputs
//! hold NaN or Inf are written, and the first one of each run is logged and remembered
//! ([`last_overflow`]).
//!
//! ```no_run
//! use spore_core::debug::dump::{self, config::DumpConfig};
//! dump::enable(DumpConfig::parse(&std::fs::read_to_string("/abs/dump.json").unwrap()).unwrap()).unwrap();
//! ```

pub mod config;
pub mod inspect;
pub mod stats;
pub mod writer;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use config::{DumpConfig, SavedData};
use stats::TensorStats;
use writer::{Record, Writer};

use crate::error::{Error, Result};
use crate::ir::{Graph, NodeKind};
use crate::tensor::Tensor;

/// Bytes the asynchronous writer may hold in its queue before ops wait for it.
const ASYNC_QUEUE_BYTES: usize = 256 << 20;

pub struct Dumper {
    pub config: DumpConfig,
    writer: Writer,
    /// Next iteration number of each compiled graph.
    iterations: Mutex<HashMap<usize, u64>>,
    eager_iteration: AtomicU64,
    eager_task: AtomicU64,
    overflow_seen: Mutex<Option<String>>,
}

static DUMPER: RwLock<Option<Arc<Dumper>>> = RwLock::new(None);
static LAST_OVERFLOW: Mutex<Option<String>> = Mutex::new(None);

/// The active dumper, if any.
pub fn current() -> Option<Arc<Dumper>> {
    DUMPER.read().ok().and_then(|d| d.clone())
}

/// Starts dumping with `config` (replacing any active configuration).
pub fn enable(config: DumpConfig) -> Result<()> {
    let d = Arc::new(Dumper::new(config)?);
    if let Ok(mut g) = DUMPER.write() {
        *g = Some(d);
    }
    super::refresh();
    Ok(())
}

/// Stops dumping after writing everything pending.
pub fn disable() -> Result<()> {
    let old = DUMPER.write().ok().and_then(|mut g| g.take());
    super::refresh();
    match old {
        Some(d) => d.writer.flush(),
        None => Ok(()),
    }
}

/// The first op that produced NaN/Inf in the latest run with overflow detection on.
pub fn last_overflow() -> Option<String> {
    LAST_OVERFLOW.lock().ok().and_then(|g| g.clone())
}

fn timestamp() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0)
}

impl Dumper {
    pub fn new(config: DumpConfig) -> Result<Dumper> {
        let writer = if config.synchronous {
            Writer::synchronous()
        } else {
            Writer::asynchronous(ASYNC_QUEUE_BYTES)
        };
        let d = Dumper {
            writer,
            iterations: Mutex::new(HashMap::new()),
            eager_iteration: AtomicU64::new(0),
            eager_task: AtomicU64::new(0),
            overflow_seen: Mutex::new(None),
            config,
        };
        let meta = d.rank_dir().join(".dump_metadata");
        std::fs::create_dir_all(&meta)
            .map_err(|e| Error::io(&meta, format!("cannot create dump folder: {e}")))?;
        let copy = meta.join("data_dump.json");
        std::fs::write(&copy, &d.config.source).map_err(|e| Error::io(&copy, e))?;
        Ok(d)
    }

    pub fn rank_dir(&self) -> PathBuf {
        self.config
            .path
            .join(format!("rank_{}", super::process_rank()))
    }

    fn iteration_dir(&self, graph_id: usize, iteration: u64) -> PathBuf {
        self.rank_dir()
            .join(&self.config.net_name)
            .join(graph_id.to_string())
            .join(iteration.to_string())
    }

    /// Writes a compiled graph's `.ir` and execution order.
    pub fn register_graph(&self, graph_id: usize, g: &Graph) -> Result<()> {
        let graphs = self.rank_dir().join("graphs");
        let order = self.rank_dir().join("execution_order");
        for d in [&graphs, &order] {
            std::fs::create_dir_all(d)
                .map_err(|e| Error::io(d, format!("cannot create dump folder: {e}")))?;
        }
        let ir = graphs.join(format!("ms_output_trace_code_graph_{graph_id}.ir"));
        std::fs::write(&ir, g.to_ir()).map_err(|e| Error::io(&ir, e))?;
        let mut csv = String::from("NodeExecutionOrder-FullNameWithScope\n");
        for n in g.nodes.iter().filter(|n| n.op().is_some()) {
            let _ = writeln!(csv, "{}", n.name);
        }
        let path = order.join(format!("ms_execution_order_graph_{graph_id}.csv"));
        std::fs::write(&path, csv).map_err(|e| Error::io(&path, e))
    }

    /// Starts a run of compiled graph `graph_id`: returns its iteration and dumps the
    /// parameters' values when the iteration is selected.
    pub fn begin_graph_run(&self, graph_id: usize, g: &Graph) -> Result<u64> {
        let it = {
            let mut its = self
                .iterations
                .lock()
                .map_err(|_| Error::invalid("dump state poisoned"))?;
            let e = its.entry(graph_id).or_insert(0);
            *e += 1;
            *e - 1
        };
        // A graph run inside a PyNative step (its compiled optimizer update) continues
        // that step: the first overflow stays the step's first, not the update's.
        if self.eager_task.load(Ordering::Relaxed) == 0
            && let Ok(mut o) = self.overflow_seen.lock()
        {
            *o = None;
        }
        // Parameters are outputs of a `Parameter` pseudo-op, selected like any op.
        let c = &self.config;
        if c.iteration_selected(it) && c.op_debug_mode == 0 && c.input_output != 1 {
            for n in &g.nodes {
                if let NodeKind::Parameter(i) = n.kind {
                    let name = g.params[i].name();
                    if c.op_selected("Parameter", &name) {
                        self.write(
                            graph_id,
                            it,
                            0,
                            "Parameter",
                            &name,
                            "output",
                            0,
                            g.params[i].stored(),
                        )?;
                    }
                }
            }
        }
        Ok(it)
    }

    /// The next task id and current iteration for a PyNative op.
    pub fn eager_position(&self) -> (usize, u64) {
        (
            self.eager_task.fetch_add(1, Ordering::Relaxed) as usize,
            self.eager_iteration.load(Ordering::Relaxed),
        )
    }

    /// Advances the PyNative iteration (one training step).
    pub fn eager_step_end(&self) {
        self.eager_iteration.fetch_add(1, Ordering::Relaxed);
        self.eager_task.store(0, Ordering::Relaxed);
        if let Ok(mut o) = self.overflow_seen.lock() {
            *o = None;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        graph_id: usize,
        it: u64,
        task: usize,
        op_type: &str,
        name: &str,
        io: &'static str,
        slot: usize,
        t: Tensor,
    ) -> Result<()> {
        let saved = self.config.saved_data;
        self.writer.submit(Record {
            dir: self.iteration_dir(graph_id, it),
            op_type: op_type.to_string(),
            op_name: name.to_string(),
            task_id: task,
            timestamp: timestamp(),
            io,
            slot,
            tensor: t,
            write_npy: saved != SavedData::Statistic,
            write_stats: saved != SavedData::Tensor,
        })
    }

    /// Dumps one executed op if the configuration selects it.
    #[allow(clippy::too_many_arguments)]
    pub fn on_op(
        &self,
        graph_id: usize,
        it: u64,
        task: usize,
        op_type: &str,
        name: &str,
        inputs: &[&Tensor],
        output: &Tensor,
    ) -> Result<()> {
        let c = &self.config;
        if !c.iteration_selected(it) || !c.op_selected(op_type, name) || output.is_symbolic() {
            return Ok(());
        }
        if c.op_debug_mode != 0 {
            if !TensorStats::of(output)?.overflowed() {
                return Ok(());
            }
            let mut seen = self
                .overflow_seen
                .lock()
                .map_err(|_| Error::invalid("dump state poisoned"))?;
            if seen.is_none() {
                log::warn!(
                    "overflow: {name} ({op_type}) is the first op of this run whose output holds NaN or Inf"
                );
                *seen = Some(name.to_string());
                if let Ok(mut l) = LAST_OVERFLOW.lock() {
                    *l = Some(name.to_string());
                }
            }
        }
        if c.input_output != 2 {
            for (slot, t) in inputs.iter().enumerate() {
                self.write(
                    graph_id,
                    it,
                    task,
                    op_type,
                    name,
                    "input",
                    slot,
                    (*t).clone(),
                )?;
            }
        }
        if c.input_output != 1 {
            self.write(
                graph_id,
                it,
                task,
                op_type,
                name,
                "output",
                0,
                output.clone(),
            )?;
        }
        Ok(())
    }

    /// Waits for pending writes.
    pub fn flush(&self) -> Result<()> {
        self.writer.flush()
    }
}
