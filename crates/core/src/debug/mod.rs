//! Observability: the Dump tool ([`dump`]), the profiler ([`profiler`]) and the Print
//! operator's output ([`mod@print`]). Eager `apply` and the graph executor report every op
//! here, but only when something is enabled: disabled, the cost is one atomic load.
//!
//! ```
//! assert!(!spore_core::debug::enabled() || std::env::var("SPORE_DUMP_CONFIG").is_ok());
//! ```

pub mod dump;
pub mod npy;
pub mod print;
pub mod profiler;

use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Instant;

use crate::error::{Error, Result};
use crate::op::Op;
use crate::tensor::Tensor;

static ENABLED: AtomicBool = AtomicBool::new(false);
/// Set by a distributed job's `init`; `u32::MAX` until then.
static PROCESS_RANK: AtomicU32 = AtomicU32::new(u32::MAX);

/// This process's rank in a distributed job, which names dump folders (`rank_{id}`) and
/// profiler files: what the communication layer's `init` set, else MindSpore's `RANK_ID`
/// variable, else 0.
pub fn process_rank() -> u32 {
    match PROCESS_RANK.load(Ordering::Relaxed) {
        u32::MAX => std::env::var("RANK_ID")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(0),
        rank => rank,
    }
}

/// Records this process's rank (called by the communication layer's `init`).
pub fn set_process_rank(rank: u32) {
    PROCESS_RANK.store(rank, Ordering::Relaxed);
}
static ENV: Once = Once::new();
static ENV_ERROR: std::sync::Mutex<Option<Error>> = std::sync::Mutex::new(None);

/// Recomputes the fast flag after a dumper or profiler starts or stops.
pub(crate) fn refresh() {
    ENABLED.store(
        dump::current().is_some() || profiler::current().is_some(),
        Ordering::Release,
    );
}

/// Reads the dump configuration named by `SPORE_DUMP_CONFIG` (or, so that a MindSpore
/// user's setup just works, `MINDSPORE_DUMP_CONFIG`) and starts dumping; returns whether a
/// configuration was named. Done automatically once per process; call it again after
/// changing the variable.
pub fn reload_env() -> Result<bool> {
    let Some(path) =
        std::env::var_os("SPORE_DUMP_CONFIG").or_else(|| std::env::var_os("MINDSPORE_DUMP_CONFIG"))
    else {
        return Ok(false);
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Error::io(&path, format!("cannot read the dump configuration: {e}")))?;
    let cfg = dump::config::DumpConfig::parse(&text).map_err(|e| Error::io(&path, e))?;
    dump::enable(cfg)?;
    Ok(true)
}

fn load_env() -> Result<()> {
    reload_env().map(|_| ())
}

fn init_env() {
    ENV.call_once(|| {
        if let Err(e) = load_env() {
            log::error!("{e}");
            if let Ok(mut g) = ENV_ERROR.lock() {
                *g = Some(e);
            }
        }
    });
}

/// Loads the environment's dump configuration once; reports an invalid one.
pub fn check_env() -> Result<()> {
    init_env();
    match ENV_ERROR.lock().ok().and_then(|g| g.clone()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Whether any observer (dump or profiler) wants op events.
#[inline]
pub fn enabled() -> bool {
    init_env();
    ENABLED.load(Ordering::Acquire)
}

/// Where an executed op sits: its graph (0 for PyNative), iteration and position.
#[derive(Clone, Copy, Debug)]
pub struct OpSite {
    pub graph_id: usize,
    pub iteration: u64,
    pub task_id: usize,
}

/// Reports an executed op to the active observers.
pub fn report_op(
    site: OpSite,
    op: &Op,
    name: &str,
    inputs: &[&Tensor],
    output: &Tensor,
    start: Instant,
) -> Result<()> {
    let end = Instant::now();
    let op_type = op.name();
    if let Some(p) = profiler::current() {
        p.record(&op_type, name, site.graph_id, start, end);
    }
    if let Some(d) = dump::current() {
        d.on_op(
            site.graph_id,
            site.iteration,
            site.task_id,
            &op_type,
            name,
            inputs,
            output,
        )?;
    }
    Ok(())
}

/// Called by `apply` for an op computed in PyNative mode.
pub(crate) fn report_eager(
    op: &Op,
    inputs: &[&Tensor],
    output: &Tensor,
    start: Instant,
) -> Result<()> {
    let name = crate::scope::eager_op_name(op);
    let (task_id, iteration) = dump::current()
        .map(|d| d.eager_position())
        .unwrap_or((0, 0));
    report_op(
        OpSite {
            graph_id: 0,
            iteration,
            task_id,
        },
        op,
        &name,
        inputs,
        output,
        start,
    )
}

/// Marks the end of a PyNative training step (dump iteration, profiler step).
pub fn step_end() -> Result<()> {
    if let Some(d) = dump::current() {
        d.eager_step_end();
        d.flush()?;
    }
    Ok(())
}

/// Writes everything pending.
pub fn flush() -> Result<()> {
    match dump::current() {
        Some(d) => d.flush(),
        None => Ok(()),
    }
}
