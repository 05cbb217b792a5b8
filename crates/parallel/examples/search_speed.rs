//! How long the strategy search takes on a graph of about 1,000 operators: a 250-layer
//! MLP (each Dense layer a Transpose, a MatMul and an Add, then a ReLU) with its loss,
//! planned for 8 devices by `recursive_programming` (and, with `--exact`, by
//! `dynamic_programming`, which is far slower on graphs this size).
//!
//! ```text
//! cargo run --release -p spore-parallel --example search_speed [-- --exact]
//! ```

use std::sync::Arc;
use std::time::Instant;

use spore_core::{DType, TensorType};
use spore_nn::prelude::*;
use spore_parallel::sharding::{Cluster, SearchMode, Strategies, search};

fn main() -> spore_core::Result<()> {
    let exact = std::env::args().any(|a| a == "--exact");
    let mut layers: Vec<Arc<dyn Cell>> = vec![];
    for _ in 0..250 {
        layers.push(Dense::new(256, 256)?);
        layers.push(ReLU::new());
    }
    let net = WithLossCell::new_dyn(SequentialCell::new(layers), MSELoss::new(Reduction::Mean));
    let types = [
        TensorType::new(&[64, 256], DType::F32),
        TensorType::new(&[64, 256], DType::F32),
    ];
    let g = spore_core::trace::trace("deep_mlp", &types, |x| net.call(x))?;
    println!("graph: {} operators", g.op_count());
    let cluster = Cluster::example(8);
    let mut modes = vec![SearchMode::RecursiveProgramming];
    if exact {
        modes.push(SearchMode::DynamicProgramming);
    }
    for mode in modes {
        let started = Instant::now();
        let found = search(&g, &cluster, mode, &Strategies::new(), 1.0)?;
        println!(
            "{}: {:.3} s to plan; predicted step {:.3} ms, {:.1} MB per device",
            mode.name(),
            started.elapsed().as_secs_f64(),
            found.cost.step_time() * 1e3,
            found.cost.memory() / 1e6
        );
    }
    Ok(())
}
