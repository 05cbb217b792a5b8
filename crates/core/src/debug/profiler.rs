//! The profiler: records every op execution (type, full name, start, duration, thread)
//! and the iteration trace (data wait, forward, backward, update), and writes
//! `trace_view.json` (Chrome trace events; open it in Perfetto), MindSpore's CPU tables
//! `cpu_op_detail_info_{rank}.csv` and `cpu_op_type_info_{rank}.csv`,
//! `step_trace_raw_{rank}_detail_time.csv`, and a summary table on the terminal.
//!
//! ```no_run
//! use spore_core::debug::profiler::Profiler;
//! let p = Profiler::new("./profile");
//! p.start();
//! // ... train ...
//! p.stop();
//! p.analyse().unwrap();
//! ```
//!
//! Ops are classified for the iteration trace by name: names under `Gradients/` are the
//! backward pass, names with an `optimizer` scope the update, everything else forward.

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

#[derive(Clone, Debug)]
pub struct OpRecord {
    pub op_type: String,
    pub name: String,
    pub graph_id: usize,
    /// Microseconds since the profiler started.
    pub start_us: f64,
    pub dur_us: f64,
    pub thread: u64,
}

#[derive(Clone, Debug)]
struct StepRecord {
    start_us: f64,
    end_us: f64,
    data_wait_us: f64,
}

pub struct Profiler {
    output: PathBuf,
    origin: Instant,
    ops: Mutex<Vec<OpRecord>>,
    communication: Mutex<Vec<OpRecord>>,
    steps: Mutex<Vec<StepRecord>>,
    last_boundary: Mutex<f64>,
}

static ACTIVE: RwLock<Option<Arc<Profiler>>> = RwLock::new(None);
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD: Cell<u64> = const { Cell::new(0) };
}

fn thread_number() -> u64 {
    THREAD.with(|t| {
        if t.get() == 0 {
            t.set(NEXT_THREAD.fetch_add(1, Ordering::Relaxed));
        }
        t.get()
    })
}

/// The running profiler, if any.
pub fn current() -> Option<Arc<Profiler>> {
    ACTIVE.read().ok().and_then(|p| p.clone())
}

/// Phase of an op in the iteration trace, from its full name.
pub fn phase_of(name: &str) -> &'static str {
    if name.starts_with("Gradients/") {
        "backward"
    } else if name.contains("/optimizer") {
        "update"
    } else {
        "forward"
    }
}

/// Totals per op type, for the terminal summary and the type table.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeSummary {
    pub op_type: String,
    pub count: usize,
    pub total_ms: f64,
    pub percent: f64,
}

impl Profiler {
    /// A profiler writing into `output_path/profiler/`; call [`Profiler::start`].
    pub fn new(output_path: impl Into<PathBuf>) -> Arc<Profiler> {
        Arc::new(Profiler {
            output: output_path.into().join("profiler"),
            origin: Instant::now(),
            ops: Mutex::new(Vec::new()),
            communication: Mutex::new(Vec::new()),
            steps: Mutex::new(Vec::new()),
            last_boundary: Mutex::new(0.0),
        })
    }

    /// Starts recording (replacing any running profiler).
    pub fn start(self: &Arc<Self>) {
        if let Ok(mut a) = ACTIVE.write() {
            *a = Some(self.clone());
        }
        super::refresh();
    }

    /// Stops recording; the data stays for [`Profiler::analyse`].
    pub fn stop(&self) {
        if let Ok(mut a) = ACTIVE.write()
            && a.as_ref()
                .is_some_and(|p| std::ptr::eq(Arc::as_ptr(p), self))
        {
            *a = None;
        }
        super::refresh();
    }

    fn us(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.origin).as_secs_f64() * 1e6
    }

    pub(crate) fn record(
        &self,
        op_type: &str,
        name: &str,
        graph_id: usize,
        start: Instant,
        end: Instant,
    ) {
        let r = OpRecord {
            op_type: op_type.to_string(),
            name: name.to_string(),
            graph_id,
            start_us: self.us(start),
            dur_us: end.saturating_duration_since(start).as_secs_f64() * 1e6,
            thread: thread_number(),
        };
        if let Ok(mut ops) = self.ops.lock() {
            ops.push(r);
        }
    }

    /// Records a collective as the communication thread ran it (`name` like
    /// `AllReduce[world_group, 1.0 MB]`), from `start` to `end`. These go on a track of
    /// their own in `trace_view.json`, apart from the ops (whose waits for a collective
    /// show as ops), so that the overlap of communication and computation can be read.
    pub fn record_communication(&self, op_type: &str, name: &str, start: Instant, end: Instant) {
        let r = OpRecord {
            op_type: op_type.to_string(),
            name: name.to_string(),
            graph_id: 0,
            start_us: self.us(start),
            dur_us: end.saturating_duration_since(start).as_secs_f64() * 1e6,
            thread: thread_number(),
        };
        if let Ok(mut c) = self.communication.lock() {
            c.push(r);
        }
    }

    /// A copy of the communication records so far.
    pub fn communication_records(&self) -> Vec<OpRecord> {
        self.communication
            .lock()
            .map(|o| o.clone())
            .unwrap_or_default()
    }

    /// Ends a training step now; `data_wait` is how long the step waited for its batch.
    pub fn step_end(&self, data_wait: Duration) {
        let now = self.us(Instant::now());
        if let (Ok(mut last), Ok(mut steps)) = (self.last_boundary.lock(), self.steps.lock()) {
            steps.push(StepRecord {
                start_us: *last,
                end_us: now,
                data_wait_us: data_wait.as_secs_f64() * 1e6,
            });
            *last = now;
        }
    }

    /// A copy of the op records so far.
    pub fn records(&self) -> Vec<OpRecord> {
        self.ops.lock().map(|o| o.clone()).unwrap_or_default()
    }

    /// Per-type totals, largest first.
    pub fn type_summary(&self) -> Vec<TypeSummary> {
        let ops = self.records();
        let total: f64 = ops.iter().map(|o| o.dur_us).sum::<f64>().max(1e-9);
        let mut by_type: HashMap<&str, (usize, f64)> = HashMap::new();
        for o in &ops {
            let e = by_type.entry(&o.op_type).or_insert((0, 0.0));
            e.0 += 1;
            e.1 += o.dur_us;
        }
        let mut v: Vec<TypeSummary> = by_type
            .into_iter()
            .map(|(t, (n, us))| TypeSummary {
                op_type: t.to_string(),
                count: n,
                total_ms: us / 1e3,
                percent: 100.0 * us / total,
            })
            .collect();
        v.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms));
        v
    }

    /// Writes the result files and prints a summary table; returns the per-type totals.
    pub fn analyse(&self) -> Result<Vec<TypeSummary>> {
        let dir = &self.output;
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(dir, format!("cannot create the profiler folder: {e}")))?;
        let ops = self.records();
        let steps = self.steps.lock().map(|s| s.clone()).unwrap_or_default();
        let write = |name: String, text: String| -> Result<()> {
            let p = dir.join(name);
            std::fs::write(&p, text).map_err(|e| Error::io(&p, e))
        };
        write("trace_view.json".into(), self.trace_json(&ops, &steps))?;
        write(
            format!("cpu_op_detail_info_{}.csv", super::process_rank()),
            self.detail_csv(&ops),
        )?;
        let summary = self.type_summary();
        let n_steps = steps.len().max(1);
        let mut types = String::from(
            "op_type,type_occurrences,execution_frequency(per-step),total_compute_time,avg_time(ms),percent\n",
        );
        for t in &summary {
            let _ = writeln!(
                types,
                "{},{},{},{:.6},{:.6},{:.4}",
                t.op_type,
                t.count,
                t.count / n_steps,
                t.total_ms,
                t.total_ms / t.count.max(1) as f64,
                t.percent
            );
        }
        write(
            format!("cpu_op_type_info_{}.csv", super::process_rank()),
            types,
        )?;
        write(
            format!("step_trace_raw_{}_detail_time.csv", super::process_rank()),
            self.step_csv(&ops, &steps),
        )?;
        let mut table = format!(
            "{:<28}{:>10}{:>14}{:>10}\n",
            "op type", "count", "total (ms)", "%"
        );
        for t in summary.iter().take(15) {
            let _ = writeln!(
                table,
                "{:<28}{:>10}{:>14.3}{:>10.2}",
                t.op_type, t.count, t.total_ms, t.percent
            );
        }
        println!(
            "Spore profiler: {} op executions, {} steps; results in {}\n{table}",
            ops.len(),
            steps.len(),
            dir.display()
        );
        Ok(summary)
    }

    fn trace_json(&self, ops: &[OpRecord], steps: &[StepRecord]) -> String {
        let mut events: Vec<serde_json::Value> = ops
            .iter()
            .map(|o| {
                serde_json::json!({"name": o.name, "cat": o.op_type, "ph": "X", "ts": o.start_us, "dur": o.dur_us, "pid": 1, "tid": o.thread,
                                   "args": {"op_type": o.op_type, "graph_id": o.graph_id, "phase": phase_of(&o.name)}})
            })
            .collect();
        for (i, s) in steps.iter().enumerate() {
            events.push(serde_json::json!({"name": format!("step {}", i + 1), "cat": "step", "ph": "X", "ts": s.start_us, "dur": s.end_us - s.start_us, "pid": 2, "tid": 0}));
            if s.data_wait_us > 0.0 {
                events.push(serde_json::json!({"name": "data wait", "cat": "step", "ph": "X", "ts": s.start_us, "dur": s.data_wait_us, "pid": 2, "tid": 1}));
            }
        }
        events.push(serde_json::json!({"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "CPU ops"}}));
        for c in self.communication_records() {
            events.push(serde_json::json!({"name": c.name, "cat": c.op_type, "ph": "X", "ts": c.start_us, "dur": c.dur_us, "pid": 3, "tid": 0}));
        }
        events.push(serde_json::json!({"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "Steps"}}));
        events.push(serde_json::json!({"name": "process_name", "ph": "M", "pid": 3, "args": {"name": "Communication"}}));
        serde_json::json!({"traceEvents": events, "displayTimeUnit": "ms"}).to_string()
    }

    fn detail_csv(&self, ops: &[OpRecord]) -> String {
        let total: f64 = ops.iter().map(|o| o.dur_us).sum::<f64>().max(1e-9);
        let mut by_name: Vec<(String, String, usize, f64)> = vec![];
        let mut index: HashMap<&str, usize> = HashMap::new();
        for o in ops {
            match index.get(o.name.as_str()) {
                Some(&i) => {
                    by_name[i].2 += 1;
                    by_name[i].3 += o.dur_us;
                }
                None => {
                    index.insert(&o.name, by_name.len());
                    by_name.push((o.op_type.clone(), o.name.clone(), 1, o.dur_us));
                }
            }
        }
        let mut csv = String::from(
            "op_side,op_type,op_name,full_op_name,op_occurrences,op_total_time(ms),op_avg_time(ms),total_proportion,subgraph,pid\n",
        );
        for (t, name, n, us) in by_name {
            let short = name.rsplit('/').next().unwrap_or(&name).to_string();
            let _ = writeln!(
                csv,
                "Host,{t},{short},{name},{n},{:.6},{:.6},{:.6},Default,{}",
                us / 1e3,
                us / 1e3 / n as f64,
                us / total,
                std::process::id()
            );
        }
        csv
    }

    fn step_csv(&self, ops: &[OpRecord], steps: &[StepRecord]) -> String {
        let mut csv = String::from(
            "step_num,start_point(us),end_point(us),total(ms),data_wait(ms),forward(ms),backward(ms),update(ms)\n",
        );
        for (i, s) in steps.iter().enumerate() {
            let mut phases: HashMap<&str, f64> = HashMap::new();
            for o in ops
                .iter()
                .filter(|o| o.start_us >= s.start_us && o.start_us < s.end_us)
            {
                *phases.entry(phase_of(&o.name)).or_insert(0.0) += o.dur_us;
            }
            let ms = |k: &str| phases.get(k).copied().unwrap_or(0.0) / 1e3;
            let _ = writeln!(
                csv,
                "{},{:.1},{:.1},{:.4},{:.4},{:.4},{:.4},{:.4}",
                i + 1,
                s.start_us,
                s.end_us,
                (s.end_us - s.start_us) / 1e3,
                s.data_wait_us / 1e3,
                ms("forward"),
                ms("backward"),
                ms("update")
            );
        }
        csv
    }
}
