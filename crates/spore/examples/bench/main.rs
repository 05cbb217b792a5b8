//! Spore's benchmark harness (issue 8): the peers' workloads, in PyNative and in Graph
//! mode, timed with the anchors' protocol, reported as a table and as JSON Lines.
//!
//! ```text
//! cargo run --release --example bench -- [--json PATH] [--only lenet5_train_b32,gemm_2048] [--quick]
//! ```
//!
//! Workloads: LeNet5 training step (batch 32, 1x32x32, Momentum 0.9, sparse softmax
//! cross-entropy), the seed 004 MLP training step and inference (batch 64), ResNet-18
//! (CIFAR form) training step (batch 32), a BERT-style encoder training step (4 layers,
//! hidden 256, 4 heads, feed-forward 1024, sequence 128, batch 16, AdamW), ResNet-50
//! (224x224) training at batch 8 and inference at batch 1, fp32 GEMM 2048^3, and seed
//! 001's data pipeline.
//! Also the machine's FMA peak (`fma_peak`, `spore_kernels::peak`), and for every compiled
//! step the FLOP of its products and convolutions (`gflop_per_step`, `Graph::flops`): the
//! report states each workload's useful FLOP rate as a share of that peak.
//!
//! Protocol (the same as `bench/peers/py/common.py`): the first call is timed alone
//! (`first_ms`: trace + compile + first run in Graph mode); then synced warm-up steps;
//! then 5 repeats, each running back-to-back steps for at least 1.2 s; the figure is the
//! median over repeats of the per-step time. Noise control as the peers' driver's
//! (`bench/peers/py/driver.py`): each measurement records the share of the machine's
//! CPU that other processes used while it was timed (`foreign_cpu_frac`, from `/proc`),
//! and one above 8 % is run again, up to twice, keeping the least disturbed attempt.
//!
//! Why one process per measurement: peak memory (`VmHWM`) and the allocator counters
//! must belong to one workload, and thread pools or jit caches must not leak between
//! workloads, as the peers' driver does. The parent re-runs this binary with `--child`.
//! A counting global allocator measures the heap allocated per steady-state step;
//! `SPORE_TRACE_ALLOC=1` prints where each large allocation of one such step comes from,
//! and `SPORE_BENCH_SAVE_GRAPHS=DIR` writes the compiled graphs of a Graph-mode run.

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use spore::prelude::*;

mod checks;
mod proc_stats;

use proc_stats::{CpuTicks, peak_rss_mb, rss_mb};

/// The system allocator, counting what is allocated (calls and bytes) and the peak of
/// live heap bytes.
struct CountingAlloc;

static ALLOC_CALLS: AtomicU64 = AtomicU64::new(0);
static ALLOC_BYTES: AtomicU64 = AtomicU64::new(0);
static LIVE_BYTES: AtomicU64 = AtomicU64::new(0);
static PEAK_LIVE_BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to `System`; the counters are side effects.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_alloc(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_alloc(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as u64, Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_sub(layout.size() as u64, Relaxed);
        count_alloc(new_size);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// `SPORE_TRACE_ALLOC=1`: print where each allocation of 1 KiB or more comes from during
/// one steady-state step (Spore frames only), to find what still allocates.
/// `SPORE_TRACE_ALLOC_MIN=N` lowers (or raises) the 1 KiB threshold.
static TRACE_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static TRACE_MIN: AtomicU64 = AtomicU64::new(1024);
thread_local! {
    /// Set while a backtrace is being captured (capturing allocates too).
    static IN_TRACE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn count_alloc(size: usize) {
    if size as u64 >= TRACE_MIN.load(Relaxed)
        && TRACE_ON.load(Relaxed)
        && !IN_TRACE.with(|c| c.replace(true))
    {
        let bt = std::backtrace::Backtrace::force_capture().to_string();
        let frames: Vec<&str> = bt
            .lines()
            .filter(|l| l.contains("spore") && !l.contains(" at "))
            .take(8)
            .map(str::trim)
            .collect();
        eprintln!("ALLOC {size} B: {}", frames.join(" <- "));
        IN_TRACE.with(|c| c.set(false));
    }
    ALLOC_CALLS.fetch_add(1, Relaxed);
    ALLOC_BYTES.fetch_add(size as u64, Relaxed);
    let live = LIVE_BYTES.fetch_add(size as u64, Relaxed) + size as u64;
    PEAK_LIVE_BYTES.fetch_max(live, Relaxed);
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Every workload, in the order the table lists them, with the modes it runs in.
const BENCHES: &[(&str, &[&str])] = &[
    ("lenet5_train_b32", &["pynative", "graph"]),
    ("mlp_train_b64", &["pynative", "graph"]),
    ("mlp_infer_b64", &["pynative", "graph"]),
    ("resnet18_train_b32", &["pynative", "graph"]),
    ("bert_train_b16", &["pynative", "graph"]),
    ("resnet50_train_b8", &["pynative", "graph"]),
    ("resnet50_infer_b1", &["pynative", "graph"]),
    ("gemm_2048", &["n/a"]),
    ("fma_peak", &["n/a"]),
    ("pipeline_mnist", &["n/a"]),
];

/// Timing settings; `--quick` shortens everything for smoke tests.
#[derive(Clone, Copy)]
struct Protocol {
    warmup: usize,
    /// Set by `ANCHOR_WARMUP`, which then holds for every workload that `bench/interleaved.py`
    /// runs (see [`Protocol::slow`]).
    warmup_set: bool,
    repeats: usize,
    repeat_s: f64,
}

impl Protocol {
    /// The protocol for workloads of a second or more per step: two warm-up steps, unless
    /// `ANCHOR_WARMUP` says otherwise (so an interleaved run warms every framework alike).
    fn slow(self) -> Protocol {
        let warmup = if self.warmup_set { self.warmup } else { 2 };
        Protocol { warmup, ..self }
    }
}

/// What one child process measured.
struct Measurement {
    first_ms: f64,
    repeats_ms: Vec<f64>,
    steady_allocs_per_step: f64,
    steady_alloc_bytes_per_step: f64,
    /// Work per step for rates: FLOP (GEMM, FMA peak) or samples (pipeline).
    work_per_step: f64,
    /// FLOP of the compiled step's products and convolutions (`Graph::flops`); NaN when
    /// no graph was compiled (PyNative mode, GEMM, pipeline).
    graph_flop_per_step: f64,
    /// Share of the machine's CPU capacity other processes used while the repeats ran
    /// (`None` where `/proc` cannot tell).
    foreign_cpu_frac: Option<f64>,
    /// Peak resident memory (`VmHWM`, MiB) and peak live heap (MiB) when the timed steps
    /// ended, before the checks.
    peak_rss_mb: f64,
    peak_heap_mb: f64,
    /// The result checks that ran after the timed steps (see `checks`).
    checks: Vec<checks::Check>,
}

impl Measurement {
    fn median_ms(&self) -> f64 {
        let mut v = self.repeats_ms.clone();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }
}

/// Times `step` with the anchors' protocol and counts steady-state allocations.
fn measure(p: Protocol, mut step: impl FnMut() -> Result<()>) -> Result<Measurement> {
    let t = Instant::now();
    step()?;
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut fastest = f64::INFINITY;
    for _ in 0..p.warmup.max(1) {
        let t = Instant::now();
        step()?;
        fastest = fastest.min(t.elapsed().as_secs_f64());
    }
    let n = ((p.repeat_s / fastest.max(1e-7)).ceil() as usize).clamp(1, 1_000_000);
    // Allocated before the counters are read, and the CPU times read outside them (they
    // allocate): the harness's own memory is not the step's.
    let mut repeats_ms = Vec::with_capacity(p.repeats);
    let cpu0 = CpuTicks::now();
    let (calls0, bytes0) = (ALLOC_CALLS.load(Relaxed), ALLOC_BYTES.load(Relaxed));
    for _ in 0..p.repeats {
        let t = Instant::now();
        for _ in 0..n {
            step()?;
        }
        repeats_ms.push(t.elapsed().as_secs_f64() * 1e3 / n as f64);
    }
    let (calls1, bytes1) = (ALLOC_CALLS.load(Relaxed), ALLOC_BYTES.load(Relaxed));
    let foreign_cpu_frac = cpu0
        .zip(CpuTicks::now())
        .map(|(a, b)| a.foreign_share_until(b));
    if std::env::var_os("SPORE_TRACE_ALLOC").is_some_and(|v| v == "1") {
        if let Some(min) = std::env::var("SPORE_TRACE_ALLOC_MIN")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            TRACE_MIN.store(min, Relaxed);
        }
        TRACE_ON.store(true, Relaxed);
        step()?;
        TRACE_ON.store(false, Relaxed);
    }
    let steps = (n * p.repeats) as f64;
    Ok(Measurement {
        first_ms,
        repeats_ms,
        steady_allocs_per_step: (calls1 - calls0) as f64 / steps,
        steady_alloc_bytes_per_step: (bytes1 - bytes0) as f64 / steps,
        work_per_step: 0.0,
        graph_flop_per_step: f64::NAN,
        foreign_cpu_frac,
        peak_rss_mb: peak_rss_mb(),
        peak_heap_mb: PEAK_LIVE_BYTES.load(Relaxed) as f64 / (1 << 20) as f64,
        checks: Vec::new(),
    })
}

/// FLOP of the graph `cell` compiled for `inputs` (either training flag), or NaN when it
/// compiled none (PyNative mode).
fn compiled_flops(cell: &dyn Cell, inputs: &[&Tensor]) -> f64 {
    let types: Vec<spore::core::TensorType> =
        inputs.iter().map(|t| t.tensor_type().clone()).collect();
    [true, false]
        .into_iter()
        .find_map(|training| cell.base().compiled(training)?.graph_for(&types))
        .map_or(f64::NAN, |g| g.flops() as f64)
}

/// One fixed synthetic batch: N(0, 1) inputs and labels `i % 10`, reused every step.
fn batch(x_shape: &[usize]) -> Result<(Tensor, Tensor)> {
    let x = Tensor::randn(x_shape, DType::F32, Some(0))?;
    let labels: Vec<i32> = (0..x_shape[0] as i32).map(|i| (i * 7 + 3) % 10).collect();
    Ok((x, Tensor::from_vec(labels, &[x_shape[0]])?))
}

/// The BERT workload's batch, as `bench/peers/py/models_spec.py` builds it: ids
/// `1 + (7919 i + 13) mod (vocab - 1)` over the flattened `batch x sequence`, the last
/// quarter of every odd row padding (id 0); labels `row mod 2`.
fn token_batch(batch: usize, seq: usize, vocab: usize) -> Result<(Tensor, Tensor)> {
    let ids: Vec<i32> = (0..batch * seq)
        .map(|i| {
            let (row, col) = (i / seq, i % seq);
            let padding = row % 2 == 1 && col >= seq - seq / 4;
            if padding {
                0
            } else {
                1 + ((7919 * i + 13) % (vocab - 1)) as i32
            }
        })
        .collect();
    let labels: Vec<i32> = (0..batch as i32).map(|r| r % 2).collect();
    Ok((
        Tensor::from_vec(ids, &[batch, seq])?,
        Tensor::from_vec(labels, &[batch])?,
    ))
}

/// The seed every network is built under, so the checks can build it again.
const SEED: u64 = 0;

/// How far Graph mode's second-step loss may be from PyNative's (see
/// `checks::two_steps_against_pynative`): 1e-4, except for ResNet-50, whose first update
/// moves by 4.9e-3 (relative) between two correct convolution algorithms; its bound is three
/// times that.
const SECOND_STEP: f64 = 1e-4;
const SECOND_STEP_RESNET50: f64 = 1.5e-2;

/// The peers' step: sparse softmax cross-entropy (mean) and Momentum(0.01, 0.9).
fn train_step(
    net: impl Fn() -> Result<Arc<dyn Cell>>,
    x_shape: &[usize],
    p: Protocol,
    second_step: f64,
) -> Result<Measurement> {
    let (x, y) = batch(x_shape)?;
    let build = || -> Result<(Arc<dyn Cell>, Arc<dyn Optimizer>)> {
        let net = net()?;
        let opt: Arc<dyn Optimizer> = Momentum::new(net.trainable_params(), 0.01, 0.9)?;
        Ok((net, opt))
    };
    timed_train_step(&build, &x, &y, p, second_step)
}

/// The encoder's step: sparse softmax cross-entropy (mean) and AdamW(1e-4, weight decay
/// 0.01), as BERT is fine-tuned.
fn bert_step(p: Protocol) -> Result<Measurement> {
    let cfg = BertConfig::small();
    let (x, y) = token_batch(16, 128, cfg.vocab_size)?;
    let build = || -> Result<(Arc<dyn Cell>, Arc<dyn Optimizer>)> {
        let net: Arc<dyn Cell> = BertClassifier::new(&cfg)?;
        let opt: Arc<dyn Optimizer> = AdamW::config(net.trainable_params(), 1e-4)
            .weight_decay(0.01)
            .build()?;
        Ok((net, opt))
    };
    timed_train_step(&build, &x, &y, p, SECOND_STEP)
}

/// Builds the step under [`SEED`], times it, then checks it (Graph mode: against PyNative).
fn timed_train_step(
    build: checks::Build,
    x: &Tensor,
    y: &Tensor,
    p: Protocol,
    second_step: f64,
) -> Result<Measurement> {
    spore::rng::set_seed(SEED);
    let (net, opt) = build()?;
    let step = TrainOneStepCell::new_dyn(checks::loss_cell(net.clone()), opt);
    let mut m = measure(p, || step.step(x, y).map(drop))?;
    m.graph_flop_per_step = compiled_flops(&*step, &[x, y]);
    if get_context().mode == Mode::Graph {
        m.checks.push(checks::loss_after_timing(&step, net, x, y)?);
        let steps = checks::two_steps_against_pynative(build, SEED, x, y, second_step)?;
        m.checks.extend(steps);
    }
    Ok(m)
}

/// Inference of `net` on `x` under `no_grad`; Graph mode checks it against PyNative.
fn timed_inference(net: Arc<dyn Cell>, x: &Tensor, p: Protocol) -> Result<Measurement> {
    net.set_train(false);
    let mut m = measure(p, || no_grad(|| net.call1(x)).map(drop))?;
    m.graph_flop_per_step = compiled_flops(&*net, &[x]);
    if get_context().mode == Mode::Graph {
        m.checks.push(checks::output_against_pynative(&net, x)?);
    }
    Ok(m)
}

fn run_child(bench: &str, mode: &str, p: Protocol) -> Result<Measurement> {
    let mut ctx = ContextUpdate::new().mode(match mode {
        "graph" => Mode::Graph,
        _ => Mode::PyNative,
    });
    // `SPORE_BENCH_SAVE_GRAPHS=DIR` writes the compiled graphs, to see what a step runs.
    if let Some(dir) = std::env::var_os("SPORE_BENCH_SAVE_GRAPHS") {
        ctx = ctx.save_graphs(1).save_graphs_path(dir);
    }
    set_context(ctx)?;
    match bench {
        "lenet5_train_b32" => train_step(|| Ok(LeNet5::new(10)?), &[32, 1, 32, 32], p, SECOND_STEP),
        "mlp_train_b64" => train_step(|| Ok(Mlp::new()?), &[64, 1, 28, 28], p, SECOND_STEP),
        "resnet18_train_b32" => train_step(
            || Ok(ResNet::resnet18(10)?),
            &[32, 3, 32, 32],
            p.slow(),
            SECOND_STEP,
        ),
        "bert_train_b16" => bert_step(p.slow()),
        "resnet50_train_b8" => train_step(
            || Ok(ImageNetResNet::resnet50(1000)?),
            &[8, 3, 224, 224],
            p.slow(),
            SECOND_STEP_RESNET50,
        ),
        "resnet50_infer_b1" => {
            let (x, _) = batch(&[1, 3, 224, 224])?;
            timed_inference(ImageNetResNet::resnet50(1000)?, &x, p)
        }
        "mlp_infer_b64" => timed_inference(Mlp::new()?, &batch(&[64, 1, 28, 28])?.0, p),
        "fma_peak" => {
            // Each step: 2M rounds of 12 FMAs on every thread at once (about 4 ms).
            let threads = rayon::current_num_threads();
            let mut flop = 0.0;
            let mut m = measure(p, || {
                flop = spore::kernels::peak::fma_flops(threads, 2_000_000).ok_or_else(|| {
                    Error::invalid("fma_peak: this CPU has no AVX2 and FMA to measure")
                })?;
                Ok(())
            })?;
            m.work_per_step = flop;
            Ok(m)
        }
        "gemm_2048" => {
            let n = 2048;
            let a = Tensor::randn(&[n, n], DType::F32, Some(1))?;
            let b = Tensor::randn(&[n, n], DType::F32, Some(2))?;
            let mut m = measure(p, || a.matmul(&b).map(drop))?;
            m.work_per_step = 2.0 * (n as f64).powi(3);
            m.checks.push(checks::gemm_entries(&a, &b, &a.matmul(&b)?)?);
            Ok(m)
        }
        "pipeline_mnist" => {
            // One step = one epoch of seed 001's training pipeline over the 8,000 digits.
            let ds = spore::datasets::create_dataset(
                spore::datasets::bundled_mnist().join("train"),
                32,
                1,
                1,
                true,
            )?;
            let mut samples = 0.0;
            let mut m = measure(Protocol { warmup: 1, ..p }, || {
                samples = 0.0;
                for row in ds.create_tuple_iterator(1) {
                    samples += row?[0].shape()[0] as f64;
                }
                Ok(())
            })?;
            m.work_per_step = samples;
            Ok(m)
        }
        other => Err(Error::invalid(format!(
            "unknown benchmark `{other}`; expected one of {}",
            BENCHES.iter().map(|b| b.0).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// A JSON number, or `null` for NaN/inf (JSON has no NaN).
fn num(v: f64) -> serde_json::Value {
    serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

fn child_record(bench: &str, mode: &str, m: &Measurement, idle_rss_mb: f64) -> serde_json::Value {
    let median = m.median_ms();
    let per_s = 1e3 / median;
    let is = |b: &str| bench == b;
    serde_json::json!({
        "lib": "spore",
        "mode": mode,
        "bench": bench,
        "first_ms": num(m.first_ms),
        "median_ms": num(median),
        "steps_per_s": num(per_s),
        "gflops": num(if is("gemm_2048") || is("fma_peak") { m.work_per_step * per_s / 1e9 } else { 0.0 }),
        "gflop_per_step": num(m.graph_flop_per_step / 1e9),
        "samples_per_s": num(if is("pipeline_mnist") { m.work_per_step * per_s } else { 0.0 }),
        "peak_mem_mb": num(m.peak_rss_mb),
        "peak_rss_mb": num(m.peak_rss_mb),
        "idle_rss_mb": num(idle_rss_mb),
        "net_peak_mb": num(m.peak_rss_mb - idle_rss_mb),
        "peak_heap_mb": num(m.peak_heap_mb),
        "checks": m.checks.iter().map(checks::Check::to_json).collect::<Vec<_>>(),
        "steady_allocs": num(m.steady_allocs_per_step),
        "steady_alloc_bytes": num(m.steady_alloc_bytes_per_step),
        "repeats_ms": m.repeats_ms.iter().map(|&v| num(v)).collect::<Vec<_>>(),
        "threads": rayon::current_num_threads(),
        "foreign_cpu_frac": m.foreign_cpu_frac.map_or(serde_json::Value::Null, num),
    })
}

/// Foreign CPU share above which a measurement is run again (the peers' driver's
/// `RETRY_ABOVE`), and how many times at most.
const RETRY_ABOVE: f64 = 0.08;
const RETRIES: usize = 2;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// The kernel threads asked for with `--threads` (2 when absent).
fn threads_arg(args: &[String]) -> Result<usize> {
    match arg(args, "--threads") {
        None => Ok(2),
        Some(t) => t.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
            Error::invalid(format!(
                "--threads expects a whole number of at least 1, got {t:?}"
            ))
        }),
    }
}

/// Runs every selected (bench, mode) in its own child process; prints the table and
/// writes JSON Lines.
fn run_parent(args: &[String]) -> Result<()> {
    let only: Option<Vec<String>> =
        arg(args, "--only").map(|s| s.split(',').map(|b| b.trim().to_string()).collect());
    if let Some(only) = &only {
        for name in only {
            if !BENCHES.iter().any(|b| b.0 == name) {
                return Err(Error::invalid(format!(
                    "--only: unknown benchmark `{name}`; expected one of {}",
                    BENCHES.iter().map(|b| b.0).collect::<Vec<_>>().join(", ")
                )));
            }
        }
    }
    let quick = args.iter().any(|a| a == "--quick");
    let threads = threads_arg(args)?;
    let exe = std::env::current_exe().map_err(|e| Error::invalid(format!("current_exe: {e}")))?;
    let mut lines = Vec::new();
    println!(
        "{:<20} {:<9} {:>11} {:>11} {:>12} {:>10} {:>14}",
        "bench", "mode", "median ms", "first ms", "rate", "peak MiB", "alloc/step"
    );
    for (bench, modes) in BENCHES {
        if only.as_ref().is_some_and(|o| !o.iter().any(|b| b == bench)) {
            continue;
        }
        for mode in *modes {
            let mut best: Option<serde_json::Value> = None;
            let foreign = |r: &serde_json::Value| r["foreign_cpu_frac"].as_f64().unwrap_or(0.0);
            for attempt in 1..=1 + RETRIES {
                let rec = match run_child_process(&exe, bench, mode, quick, threads)? {
                    Ok(rec) => rec,
                    Err(message) if best.is_none() => {
                        println!("{bench:<20} {mode:<9} failed: {message}");
                        break;
                    }
                    Err(message) => {
                        eprintln!(
                            "{bench} {mode}: attempt {attempt} failed ({message}); keeping the earlier one"
                        );
                        break;
                    }
                };
                let share = foreign(&rec);
                if best.as_ref().is_none_or(|b| foreign(&rec) < foreign(b)) {
                    best = Some(rec);
                }
                if let Some(serde_json::Value::Object(b)) = best.as_mut() {
                    b.insert("attempts".into(), attempt.into());
                }
                if share <= RETRY_ABOVE || quick || attempt > RETRIES {
                    break;
                }
                eprintln!(
                    "{bench} {mode}: other processes used {:.0} % of the CPU while it was timed; running it again",
                    share * 100.0
                );
            }
            let Some(rec) = best else {
                continue;
            };
            let f = |k: &str| rec[k].as_f64().unwrap_or(f64::NAN);
            let rate = if f("gflops") > 0.0 {
                format!("{:.1} GFLOP/s", f("gflops"))
            } else if f("samples_per_s") > 0.0 {
                format!("{:.0} smp/s", f("samples_per_s"))
            } else {
                format!("{:.1} st/s", f("steps_per_s"))
            };
            println!(
                "{bench:<20} {mode:<9} {:>11.3} {:>11.1} {rate:>12} {:>10.1} {:>8.0} B/{:.0}",
                f("median_ms"),
                f("first_ms"),
                f("peak_mem_mb"),
                f("steady_alloc_bytes"),
                f("steady_allocs"),
            );
            lines.push(rec.to_string());
        }
    }
    if let Some(path) = arg(args, "--json") {
        let path = std::path::PathBuf::from(path);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e.to_string()))?;
        }
        std::fs::write(&path, lines.join("\n") + "\n")
            .map_err(|e| Error::io(&path, e.to_string()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Runs one measurement in a child process: its RESULT record, or why it failed (the
/// outer error is for a child that could not be started or printed a malformed record).
fn run_child_process(
    exe: &std::path::Path,
    bench: &str,
    mode: &str,
    quick: bool,
    threads: usize,
) -> Result<std::result::Result<serde_json::Value, String>> {
    let mut cmd = Command::new(exe);
    cmd.args(["--child", &format!("{bench}:{mode}")]);
    // The child measures, so it is the process whose kernel pool must have this size.
    cmd.args(["--threads", &threads.to_string()]);
    if quick {
        cmd.arg("--quick");
    }
    let out = cmd
        .output()
        .map_err(|e| Error::invalid(format!("could not run {}: {e}", exe.display())))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let Some(json) = stdout.lines().find_map(|l| l.strip_prefix("RESULT ")) else {
        let err = String::from_utf8_lossy(&out.stderr);
        return Ok(Err(err.trim().to_string()));
    };
    serde_json::from_str(json)
        .map(Ok)
        .map_err(|e| Error::invalid(format!("bad RESULT line from child {bench}:{mode}: {e}")))
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let threads = threads_arg(&args)?;
    // The main thread is one of the kernel pool's workers (see `spore::core::threads`).
    spore::core::threads::join_kernel_pool(Some(threads))?;
    // An application's choice, made here as the `spore` command makes it: glibc tuned for
    // eager mode's allocations, unless `SPORE_MALLOC_TUNING=0` (to measure without).
    spore::kernels::arena::set_malloc_tuning(
        std::env::var("SPORE_MALLOC_TUNING").as_deref() != Ok("0"),
    );
    let Some(which) = arg(&args, "--child") else {
        return run_parent(&args);
    };
    let (bench, mode) = which.split_once(':').unwrap_or((which.as_str(), "n/a"));
    let p = protocol(args.iter().any(|a| a == "--quick"))?;
    // The runtime's idle footprint (one trivial op), so that memory compares as what the
    // workload adds, as the peers' `idle_rss_mb` does.
    Tensor::ones(&[1], DType::F32)?.add_scalar(1.0)?;
    let idle_rss_mb = rss_mb();
    let m = run_child(bench, mode, p)?;
    if let Some(failed) = m.checks.iter().find(|c| !c.passed()) {
        return Err(Error::invalid(format!(
            "{bench} {mode}: check failed, no figure reported: {} differs by {:.3e} (tolerance {:.0e})",
            failed.what, failed.worst, failed.tolerance
        )));
    }
    println!("RESULT {}", child_record(bench, mode, &m, idle_rss_mb));
    Ok(())
}

/// The timing protocol: `--quick`'s short one, else the anchors' (5 warm-up steps, 5
/// repeats of at least 1.2 s), each overridden by the peers' knobs `ANCHOR_WARMUP`,
/// `ANCHOR_REPEATS` and `ANCHOR_REPEAT_S` (so an interleaved run times every framework
/// alike).
fn protocol(quick: bool) -> Result<Protocol> {
    let parse = |key: &str, default: f64, least: f64| -> Result<f64> {
        match std::env::var(key) {
            Err(_) => Ok(default),
            Ok(v) => v
                .parse::<f64>()
                .ok()
                .filter(|x| *x >= least)
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "{key} must be a number of at least {least}, got {v:?}"
                    ))
                }),
        }
    };
    let env = |key: &str, default: f64| parse(key, default, f64::MIN_POSITIVE);
    let env_or_zero = |key: &str, default: f64| parse(key, default, 0.0);
    let (warmup, repeats, repeat_s) = if quick {
        (2.0, 3.0, 0.3)
    } else {
        (5.0, 5.0, 1.2)
    };
    Ok(Protocol {
        warmup_set: std::env::var_os("ANCHOR_WARMUP").is_some(),
        warmup: env_or_zero("ANCHOR_WARMUP", warmup)? as usize,
        repeats: env("ANCHOR_REPEATS", repeats)?.max(1.0) as usize,
        repeat_s: env("ANCHOR_REPEAT_S", repeat_s)?,
    })
}
