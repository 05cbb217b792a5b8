//! Data-parallel training throughput and exposed communication (BENCHMARKS.md,
//! "Distributed training"). Every rank trains `--steps` Graph-mode steps on its own
//! batch of `--batch` synthetic samples; rank 0 prints one line of figures. Weak scaling
//! compares the global samples per second of `mpirun -n 2` with one process, each rank
//! on one thread (`RAYON_NUM_THREADS=1`).
//!
//! The profiler gives the communication figures: `comm` is the time the communication
//! thread spent in collectives per step (its track in `trace_view.json`), `exposed` the
//! time the step waited for them (the `AllReduceWait` ops). `--fusion one` puts every
//! gradient into one bucket, which can only start when the backward pass has ended: the
//! no-overlap baseline.
//!
//! ```sh
//! cargo build --release --features mpi --example bench_data_parallel
//! RAYON_NUM_THREADS=1 target/release/examples/bench_data_parallel --model lenet
//! RAYON_NUM_THREADS=1 mpirun -n 2 target/release/examples/bench_data_parallel --model lenet --fusion 25
//! ```

use std::sync::Arc;
use std::time::Instant;

use spore::parallel::context::AllReduceFusion;
use spore::prelude::*;
use spore_core::debug::profiler::Profiler;

struct Args {
    model: String,
    steps: usize,
    warmup: usize,
    batch: usize,
    fusion: AllReduceFusion,
}

fn parse_args() -> std::result::Result<Args, String> {
    let mut a = Args {
        model: "lenet".into(),
        steps: 200,
        warmup: 20,
        batch: 32,
        fusion: AllReduceFusion::SizeMb(25.0),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |v: &str| {
            v.parse::<usize>()
                .map_err(|_| format!("{flag} expects a positive integer, got {v:?}"))
        };
        match flag.as_str() {
            "--model" => a.model = value,
            "--steps" => a.steps = number(&value)?.max(1),
            "--warmup" => a.warmup = number(&value)?,
            "--batch" => a.batch = number(&value)?.max(1),
            "--fusion" => {
                a.fusion = match value.as_str() {
                    "off" => AllReduceFusion::Off,
                    "one" => AllReduceFusion::SizeMb(1e6),
                    mb => AllReduceFusion::SizeMb(mb.parse().map_err(|_| {
                        format!("--fusion expects off, one or a size in MB, got {mb:?}")
                    })?),
                }
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?}; expected --model lenet|resnet18, --steps N, --warmup N, --batch N, --fusion off|one|MB"
                ));
            }
        }
    }
    Ok(a)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    init()?;
    let (rank, size) = (get_rank(None)?, get_group_size(None)?);
    set_context(ContextUpdate::new().mode(Mode::Graph).seed(1))?;
    // One process is the plain single-process step (no reduction at all): the baseline.
    if size > 1 {
        set_auto_parallel_context(
            AutoParallelUpdate::new()
                .parallel_mode(ParallelMode::DataParallel)
                .gradients_mean(true)
                .comm_fusion(args.fusion.clone()),
        )?;
    }
    let (net, shape): (Arc<dyn Cell>, Vec<usize>) = match args.model.as_str() {
        "lenet" => (LeNet5::new(10)?, vec![args.batch, 1, 32, 32]),
        "resnet18" => (ResNet::resnet18(10)?, vec![args.batch, 3, 32, 32]),
        other => return Err(format!("--model must be lenet or resnet18, got {other:?}").into()),
    };
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.01, 0.9)?;
    let step = TrainOneStepCell::new_dyn(WithLossCell::new_dyn(net, loss), opt);
    let x = Tensor::randn(&shape, DType::F32, Some(rank as u64 + 1))?;
    let y = Tensor::from_vec(
        (0..args.batch as i32).map(|i| i % 10).collect(),
        &[args.batch],
    )?;
    for _ in 0..args.warmup {
        step.step(&x, &y)?;
    }
    let dir = std::env::temp_dir().join(format!("spore-bench-dp-{}", std::process::id()));
    let profiler = Profiler::new(&dir);
    let timed = |profile: bool| -> spore::Result<f64> {
        spore::parallel::barrier(None)?;
        if profile {
            profiler.start();
        }
        let t = Instant::now();
        for _ in 0..args.steps {
            step.step(&x, &y)?.item()?;
        }
        let seconds = t.elapsed().as_secs_f64();
        profiler.stop();
        Ok(seconds)
    };
    // Throughput without the profiler; the communication figures from a profiled run.
    let seconds = timed(false)?;
    let slowest = spore::parallel::collective_max_f64(seconds)?;
    timed(true)?;
    let per_step = |total_us: f64| total_us / 1e3 / args.steps as f64;
    let comm = per_step(
        profiler
            .communication_records()
            .iter()
            .map(|r| r.dur_us)
            .fold(0.0, |a, b| a + b),
    );
    let exposed = per_step(
        profiler
            .records()
            .iter()
            .filter(|r| r.op_type == "AllReduceWait")
            .map(|r| r.dur_us)
            .fold(0.0, |a, b| a + b),
    );
    std::fs::remove_dir_all(&dir).ok();
    if rank == 0 {
        let step_ms = slowest * 1e3 / args.steps as f64;
        println!(
            "model={} ranks={size} batch_per_rank={} fusion={:?} step_ms={step_ms:.2} samples_per_s={:.1} comm_ms_per_step={comm:.2} exposed_ms_per_step={exposed:.2}",
            args.model,
            args.batch,
            args.fusion,
            (size * args.batch) as f64 / (step_ms / 1e3),
        );
    }
    Ok(())
}
