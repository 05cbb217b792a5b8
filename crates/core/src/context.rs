//! The runtime context (MindSpore's `set_context` / `get_context`): execution mode,
//! device, graph saving, seed and thread count. Invalid values are errors that list the
//! allowed ones; nothing falls back silently.
//!
//! ```
//! use spore_core::context::{get_context, set_context, ContextUpdate, Mode};
//! set_context(ContextUpdate::new().mode(Mode::Graph)).unwrap();
//! assert_eq!(get_context().mode, Mode::Graph);
//! set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
//! let err = set_context(ContextUpdate::new().set("device_target", "GPU").unwrap()).unwrap_err();
//! assert!(err.to_string().contains("not available"));
//! ```

use std::path::PathBuf;
use std::sync::RwLock;

use crate::error::{Error, Result};

/// MindSpore's execution modes: `GRAPH_MODE` compiles whole networks, `PYNATIVE_MODE`
/// (the default) runs op by op (a training step's optimizer update excepted: it runs
/// compiled, as MindSpore's fused optimizer kernels do).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    Graph,
    PyNative,
}

impl Mode {
    pub fn parse(s: &str) -> Result<Mode> {
        match s.to_ascii_uppercase().as_str() {
            "GRAPH" | "GRAPH_MODE" | "0" => Ok(Mode::Graph),
            "PYNATIVE" | "PYNATIVE_MODE" | "1" => Ok(Mode::PyNative),
            _ => Err(Error::invalid(format!(
                "set_context: mode must be one of GRAPH_MODE (0), PYNATIVE_MODE (1); got {s:?}"
            ))),
        }
    }
}

/// Where kernels run. Only the CPU exists in this build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceTarget {
    Cpu,
}

/// A snapshot of the context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Context {
    pub mode: Mode,
    pub device_target: DeviceTarget,
    pub device_id: u32,
    /// 0 = off; 1..=3 = write the IR of every compile stage (MindSpore's levels).
    pub save_graphs: u8,
    pub save_graphs_path: PathBuf,
    pub seed: u64,
    /// Threads for parallel kernels, the main thread among them (see
    /// [`crate::threads`]); `None` = rayon's default (one per core).
    pub num_threads: Option<usize>,
    /// Where `ops::print` writes; `None` = standard output.
    pub print_file_path: Option<PathBuf>,
    pub enable_profiling: bool,
    /// Profiler output folder (`profiling_options.result_path`).
    pub profiling_result_path: PathBuf,
    /// Whether the iteration trace is recorded (`profiling_options.training_trace`).
    pub training_trace: bool,
    /// The most bytes one tensor may take (MindSpore's `max_device_memory`, e.g. "3.5GB");
    /// `None` = what the machine has available (see [`crate::memory`]).
    pub max_device_memory: Option<u64>,
    /// Whether Spore sets glibc's `mmap` and trim thresholds for the whole process (see
    /// `spore_kernels::arena::tune_system_allocator`); off unless asked for, here or with
    /// `SPORE_MALLOC_TUNING=1`, because it changes the allocator of every library in the
    /// process.
    pub malloc_tuning: bool,
}

impl Default for Context {
    fn default() -> Self {
        Context {
            mode: Mode::PyNative,
            device_target: DeviceTarget::Cpu,
            device_id: 0,
            save_graphs: 0,
            save_graphs_path: PathBuf::from("."),
            seed: 0,
            num_threads: None,
            print_file_path: None,
            enable_profiling: false,
            profiling_result_path: PathBuf::from("./data"),
            training_trace: true,
            max_device_memory: None,
            malloc_tuning: false,
        }
    }
}

static CONTEXT: RwLock<Option<Context>> = RwLock::new(None);

/// The current context.
pub fn get_context() -> Context {
    match CONTEXT.read() {
        Ok(c) => c.clone().unwrap_or_default(),
        Err(p) => p.into_inner().clone().unwrap_or_default(),
    }
}

/// The mode, kept apart from the context so that reading it (every cell call) costs one
/// atomic load instead of cloning the whole context. 1 = Graph, 0 = PyNative.
static GRAPH_MODE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The current execution mode.
pub fn mode() -> Mode {
    if GRAPH_MODE.load(std::sync::atomic::Ordering::Acquire) {
        Mode::Graph
    } else {
        Mode::PyNative
    }
}

/// Changes to apply with [`set_context`]; unset fields keep their value.
#[derive(Clone, Debug, Default)]
pub struct ContextUpdate {
    mode: Option<Mode>,
    device_target: Option<String>,
    device_id: Option<u32>,
    save_graphs: Option<u8>,
    save_graphs_path: Option<PathBuf>,
    seed: Option<u64>,
    num_threads: Option<usize>,
    print_file_path: Option<Option<PathBuf>>,
    enable_profiling: Option<bool>,
    profiling_result_path: Option<PathBuf>,
    training_trace: Option<bool>,
    max_device_memory: Option<String>,
    malloc_tuning: Option<bool>,
    bad_option: Option<String>,
}

/// Keys understood by [`ContextUpdate::set`].
pub const CONTEXT_KEYS: &[&str] = &[
    "mode",
    "device_target",
    "device_id",
    "save_graphs",
    "save_graphs_path",
    "seed",
    "num_threads",
    "print_file_path",
    "enable_profiling",
    "profiling_result_path",
    "profiling_options",
    "max_device_memory",
    "malloc_tuning",
];

impl ContextUpdate {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn mode(mut self, m: Mode) -> Self {
        self.mode = Some(m);
        self
    }
    /// "CPU" (case-insensitive); "GPU" and "Ascend" are refused with an explanation.
    pub fn device_target(mut self, t: &str) -> Self {
        self.device_target = Some(t.to_string());
        self
    }
    pub fn device_id(mut self, id: u32) -> Self {
        self.device_id = Some(id);
        self
    }
    /// 0 (off) to 3; `true` in MindSpore is 1.
    pub fn save_graphs(mut self, level: u8) -> Self {
        self.save_graphs = Some(level);
        self
    }
    pub fn save_graphs_path(mut self, p: impl Into<PathBuf>) -> Self {
        self.save_graphs_path = Some(p.into());
        self
    }
    pub fn seed(mut self, s: u64) -> Self {
        self.seed = Some(s);
        self
    }
    /// Threads for parallel kernels. Only before the first kernel runs: the pool is built
    /// once (see [`crate::threads::join_kernel_pool`]); a later different size is an error.
    pub fn num_threads(mut self, n: usize) -> Self {
        self.num_threads = Some(n);
        self
    }
    pub fn print_file_path(mut self, p: Option<PathBuf>) -> Self {
        self.print_file_path = Some(p);
        self
    }
    pub fn enable_profiling(mut self, on: bool) -> Self {
        self.enable_profiling = Some(on);
        self
    }
    pub fn profiling_result_path(mut self, p: impl Into<PathBuf>) -> Self {
        self.profiling_result_path = Some(p.into());
        self
    }
    /// MindSpore's JSON string, e.g. `{"result_path": "/tmp/prof", "training_trace": "on"}`.
    pub fn profiling_options(mut self, json: &str) -> Self {
        match parse_profiling_options(json) {
            Ok((path, trace)) => {
                if let Some(p) = path {
                    self.profiling_result_path = Some(p);
                }
                if let Some(t) = trace {
                    self.training_trace = Some(t);
                }
            }
            Err(e) => self.bad_option = Some(e.to_string()),
        }
        self
    }

    /// The most memory one tensor may take, as MindSpore writes it: "3.5GB", "512MB",
    /// "64KB" or a number of bytes. A larger tensor is an error naming its size.
    pub fn max_device_memory(mut self, size: &str) -> Self {
        self.max_device_memory = Some(size.to_string());
        self
    }
    /// Let Spore set glibc's `mmap` and trim thresholds for the process (faster eager
    /// mode; see [`Context::malloc_tuning`]).
    pub fn malloc_tuning(mut self, on: bool) -> Self {
        self.malloc_tuning = Some(on);
        self
    }

    /// Sets a field from strings, as a configuration file or command line would.
    pub fn set(self, key: &str, value: &str) -> Result<Self> {
        let num = |what: &str| -> Result<u64> {
            value.parse::<u64>().map_err(|_| {
                Error::invalid(format!(
                    "set_context: {what} must be a non-negative integer, got {value:?}"
                ))
            })
        };
        let flag = || -> Result<bool> {
            match value.to_ascii_lowercase().as_str() {
                "true" | "1" => Ok(true),
                "false" | "0" => Ok(false),
                _ => Err(Error::invalid(format!(
                    "set_context: {key} must be true or false, got {value:?}"
                ))),
            }
        };
        Ok(match key {
            "mode" => self.mode(Mode::parse(value)?),
            "device_target" => self.device_target(value),
            "device_id" => self.device_id(num("device_id")? as u32),
            "save_graphs" => match value.to_ascii_lowercase().as_str() {
                "true" => self.save_graphs(1),
                "false" => self.save_graphs(0),
                _ => self.save_graphs(num("save_graphs")?.min(255) as u8),
            },
            "save_graphs_path" => self.save_graphs_path(value),
            "seed" => self.seed(num("seed")?),
            "num_threads" => self.num_threads(num("num_threads")? as usize),
            "print_file_path" => self.print_file_path(Some(PathBuf::from(value))),
            "enable_profiling" => self.enable_profiling(flag()?),
            "profiling_result_path" => self.profiling_result_path(value),
            "profiling_options" => {
                parse_profiling_options(value)?;
                self.profiling_options(value)
            }
            "max_device_memory" => self.max_device_memory(value),
            "malloc_tuning" => self.malloc_tuning(flag()?),
            _ => {
                return Err(Error::invalid(format!(
                    "set_context: unknown key {key:?}; known keys: {}",
                    CONTEXT_KEYS.join(", ")
                )));
            }
        })
    }
}

/// "3.5GB", "512MB", "64KB", "100B" or "100" to bytes (binary units, as MindSpore's
/// memory pool counts them).
fn parse_memory_size(text: &str) -> Result<u64> {
    let t = text.trim().to_ascii_uppercase();
    let (number, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => t.split_at(i),
        None => (t.as_str(), "B"),
    };
    let scale = match unit {
        "GB" => 1u64 << 30,
        "MB" => 1 << 20,
        "KB" => 1 << 10,
        "B" => 1,
        _ => 0,
    };
    match number.trim().parse::<f64>() {
        Ok(n) if scale > 0 && n.is_finite() && n > 0.0 && n * (scale as f64) < u64::MAX as f64 => {
            Ok((n * scale as f64) as u64)
        }
        _ => Err(Error::invalid(format!(
            "set_context: max_device_memory must be a positive size such as \"3.5GB\" or \"512MB\", got {text:?}"
        ))),
    }
}

fn parse_device(t: &str) -> Result<DeviceTarget> {
    match t.to_ascii_uppercase().as_str() {
        "CPU" => Ok(DeviceTarget::Cpu),
        "GPU" | "ASCEND" => Err(Error::invalid(format!(
            "set_context: device_target {t} is not available in this build/machine: Spore has CPU kernels only (allowed: CPU)"
        ))),
        _ => Err(Error::invalid(format!(
            "set_context: device_target must be one of CPU, GPU, Ascend; got {t:?}"
        ))),
    }
}

/// Parses `profiling_options`: `result_path` and `training_trace` ("on"/"off").
fn parse_profiling_options(json: &str) -> Result<(Option<PathBuf>, Option<bool>)> {
    let bad = |m: String| Error::invalid(format!("set_context: profiling_options {m}"));
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| bad(format!("must be a JSON object: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| bad("must be a JSON object".into()))?;
    let (mut path, mut trace) = (None, None);
    for (k, v) in obj {
        match k.as_str() {
            "result_path" => {
                path = Some(PathBuf::from(
                    v.as_str()
                        .ok_or_else(|| bad("result_path must be a string".into()))?,
                ))
            }
            "training_trace" => {
                trace = Some(match v.as_str() {
                    Some("on") => true,
                    Some("off") => false,
                    _ => {
                        return Err(bad(format!(
                            "training_trace must be \"on\" or \"off\", got {v}"
                        )));
                    }
                })
            }
            // Ascend-only options are accepted and ignored on CPU.
            "output" | "fp_point" | "bp_point" | "aicpu_trace" | "task_trace" => {}
            other => {
                return Err(bad(format!(
                    "has unknown key {other:?}; known: result_path, training_trace"
                )));
            }
        }
    }
    Ok((path, trace))
}

static CONTEXT_PROFILER: std::sync::Mutex<
    Option<std::sync::Arc<crate::debug::profiler::Profiler>>,
> = std::sync::Mutex::new(None);

/// Serialises `set_context` calls: each reads the context, changes it and writes it back,
/// so two threads calling it at once would otherwise lose one's change.
static UPDATING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Applies `update` after validating every field (nothing changes if one is invalid).
pub fn set_context(update: ContextUpdate) -> Result<()> {
    crate::logging::init();
    if let Some(e) = &update.bad_option {
        return Err(Error::invalid(e.clone()));
    }
    let _updating = UPDATING.lock().unwrap_or_else(|p| p.into_inner());
    let previous = get_context();
    let mut next = previous.clone();
    if let Some(m) = update.mode {
        next.mode = m;
    }
    if let Some(t) = &update.device_target {
        next.device_target = parse_device(t)?;
    }
    if let Some(id) = update.device_id {
        if id >= 4096 {
            return Err(Error::invalid(format!(
                "set_context: device_id must be in 0..4096, got {id}"
            )));
        }
        next.device_id = id;
    }
    if let Some(level) = update.save_graphs {
        if level > 3 {
            return Err(Error::invalid(format!(
                "set_context: save_graphs must be one of 0, 1, 2, 3 (or true/false), got {level}"
            )));
        }
        next.save_graphs = level;
    }
    if let Some(p) = update.save_graphs_path {
        next.save_graphs_path = p;
    }
    // The first `set_context` of a program (usually its first line) is where the main
    // thread joins the kernel pool, before any kernel builds the pool without it.
    if let Some(n) = update.num_threads {
        crate::threads::join_kernel_pool(Some(n))?;
        next.num_threads = Some(n);
    } else {
        crate::threads::join_kernel_pool_once();
    }
    if let Some(p) = update.print_file_path {
        next.print_file_path = p;
    }
    if let Some(on) = update.enable_profiling {
        next.enable_profiling = on;
    }
    if let Some(p) = update.profiling_result_path {
        next.profiling_result_path = p;
    }
    if let Some(t) = update.training_trace {
        next.training_trace = t;
    }
    if let Some(size) = &update.max_device_memory {
        next.max_device_memory = Some(parse_memory_size(size)?);
    }
    if let Some(on) = update.malloc_tuning {
        next.malloc_tuning = on;
    }
    if let Some(s) = update.seed {
        next.seed = s;
        crate::rng::set_seed(s);
    }
    log::info!("context: {next:?}");
    let (start, stop) = (
        next.enable_profiling && !previous.enable_profiling,
        !next.enable_profiling && previous.enable_profiling,
    );
    let result_path = next.profiling_result_path.clone();
    GRAPH_MODE.store(
        next.mode == Mode::Graph,
        std::sync::atomic::Ordering::Release,
    );
    crate::memory::set_cap(next.max_device_memory);
    spore_kernels::arena::set_malloc_tuning(next.malloc_tuning);
    match CONTEXT.write() {
        Ok(mut c) => *c = Some(next),
        Err(p) => *p.into_inner() = Some(next),
    }
    // enable_profiling starts a profiler; turning it off stops it and writes the results.
    if start {
        let p = crate::debug::profiler::Profiler::new(result_path);
        p.start();
        if let Ok(mut g) = CONTEXT_PROFILER.lock() {
            *g = Some(p);
        }
    }
    if stop && let Some(p) = CONTEXT_PROFILER.lock().ok().and_then(|mut g| g.take()) {
        p.stop();
        p.analyse()?;
    }
    Ok(())
}
