//! Pipeline parallelism against the clock: an MLP of four 2048-wide Dense layers, batch
//! 128, Graph mode, trained for 20 steps whole, or with `--micro M` as a `PipelineCell`
//! of one stage per rank and M micro-batches (GPipe: at best M / (M + stages - 1) of
//! linear speed-up; on one rank, what micro-batching alone costs). Rank 0 prints the
//! median step time.
//!
//! ```text
//! cargo build --release -p spore-parallel --features mpi --example pipeline_speed
//! RAYON_NUM_THREADS=1 target/release/examples/pipeline_speed [--micro 4] [--profile]
//! RAYON_NUM_THREADS=1 mpirun --allow-run-as-root -n 2 target/release/examples/pipeline_speed --micro 4
//! ```

use std::time::Instant;

use spore_core::context::{ContextUpdate, Mode, set_context};
use spore_core::{Error, Result, Tensor};
use spore_nn::prelude::*;
use spore_parallel::context::{AutoParallelUpdate, ParallelMode, set_auto_parallel_context};
use spore_parallel::pipeline::PipelineCell;

const BATCH: usize = 128;
const STEPS: usize = 20;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let micro = match args.iter().position(|a| a == "--micro") {
        Some(i) => Some(
            args.get(i + 1)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| Error::invalid("--micro expects a positive integer"))?,
        ),
        None => None,
    };
    spore_parallel::init()?;
    let rank = spore_parallel::get_rank(None)?;
    let n = spore_parallel::get_group_size(None)?;
    set_context(ContextUpdate::new().mode(Mode::Graph))?;
    let mut cells: Vec<std::sync::Arc<dyn Cell>> = Vec::new();
    let widths = [784, 2048, 2048, 2048, 2048, 10];
    // Each layer goes to the stage where the middle of its work falls, so the stages'
    // products are about equal.
    let work: Vec<usize> = widths.windows(2).map(|w| w[0] * w[1]).collect();
    let total: usize = work.iter().sum();
    let mut before = 0;
    for k in 0..5 {
        let dense = Dense::new(widths[k], widths[k + 1])?;
        let middle = before + work[k] / 2;
        before += work[k];
        dense
            .base()
            .set_pipeline_stage((middle * n / total).min(n - 1));
        cells.push(dense);
        if k < 4 {
            cells.push(ReLU::new());
        }
    }
    let net = WithLossCell::new(
        SequentialCell::new(cells),
        SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean),
    );
    let network: std::sync::Arc<dyn Cell> = match micro {
        Some(micro) => {
            set_auto_parallel_context(
                AutoParallelUpdate::new()
                    .parallel_mode(ParallelMode::SemiAutoParallel)
                    .pipeline_stages(n),
            )?;
            PipelineCell::new(net, micro)?
        }
        None => net,
    };
    let opt = Momentum::new(network.trainable_params(), 0.01, 0.9)?;
    let step = TrainOneStepCell::new_dyn(network, opt);
    let x = Tensor::from_vec(
        (0..BATCH * 784)
            .map(|i| (i as f32 * 0.01).sin())
            .collect::<Vec<f32>>(),
        &[BATCH, 784],
    )?;
    let y = Tensor::from_vec(
        (0..BATCH).map(|i| (i % 10) as i32).collect::<Vec<i32>>(),
        &[BATCH],
    )?;
    let mut times = Vec::with_capacity(STEPS);
    for s in 0..STEPS + 2 {
        let t = Instant::now();
        let loss = step.call(&[x.clone(), y.clone()])?.remove(0);
        loss.item()?;
        if s >= 2 {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    if args.iter().any(|a| a == "--profile") {
        // Spore's profiler over 3 more steps: per-op times in
        // $TMPDIR/spore-pipeline-profile/profiler/cpu_op_detail_info_<rank>.csv.
        let p = spore_core::debug::profiler::Profiler::new(
            std::env::temp_dir().join("spore-pipeline-profile"),
        );
        p.start();
        for _ in 0..3 {
            step.call(&[x.clone(), y.clone()])?;
            p.step_end(std::time::Duration::ZERO);
        }
        p.stop();
        p.analyse()?;
    }
    times.sort_by(f64::total_cmp);
    if rank == 0 {
        let what = match micro {
            None => "the whole network, unpipelined".to_string(),
            Some(m) => format!("{n} stage(s), {m} micro-batches"),
        };
        println!("{what}: median step {:.2} ms", times[times.len() / 2]);
    }
    Ok(())
}
