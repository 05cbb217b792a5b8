//! The cost model's rates measured on the running job: products' FLOP/s, memory
//! bandwidth, and the communicator's latency and bandwidth. Every rank measures at once
//! (so a shared machine's contention is in the figures) and all take the slowest
//! rank's figures, so that every rank plans the same strategies.
//!
//! ```
//! use spore_parallel::sharding::Cluster;
//! spore_parallel::init().unwrap();
//! let c = Cluster::measure().unwrap(); // a collective: every rank calls it
//! assert!(c.flops > 0.0 && c.memory_bandwidth > 0.0);
//! assert_eq!(c.devices, spore_parallel::get_group_size(None).unwrap());
//! ```

use std::time::Instant;

use spore_core::{DType, Result, Tensor};

use super::cost::{Cluster, rounds};
use crate::backend::ReduceOp;
use crate::collective::{barrier, group_f64s};
use crate::management::{GroupInfo, group};

/// Mean seconds of `reps` runs of `f` after one warm-up. The mean, not the best: ranks
/// sharing cores run slower while all compute, and a plan is made for all computing.
fn mean_of(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let t = Instant::now();
    for _ in 0..reps {
        f()?;
    }
    Ok(t.elapsed().as_secs_f64() / reps as f64)
}

/// Bytes of memory this rank may use: what the machine has available, shared by the
/// ranks on it.
fn memory_per_rank() -> f64 {
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("MemAvailable:")?
                    .trim()
                    .strip_suffix("kB")?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
        })
        .map_or(8e9, |kib| kib * 1024.0);
    let local = std::env::var("OMPI_COMM_WORLD_LOCAL_SIZE")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(1.0)
        .max(1.0);
    available / local
}

impl Cluster {
    /// Measures this job's rates (see the module docs); a collective.
    pub fn measure() -> Result<Cluster> {
        Cluster::measure_on(&group(None)?)
    }

    /// The rates of the ranks of `mesh` (every member calls it).
    pub(crate) fn measure_on(mesh: &GroupInfo) -> Result<Cluster> {
        let devices = mesh.size();
        let slowest =
            |t: f64| Ok::<f64, spore_core::Error>(group_f64s(mesh, &[t], ReduceOp::Max)?[0]);
        barrier(Some(&mesh.name))?;
        // Products: a 256^3 MatMul, the size of a mid-sized layer's block.
        let n = 256;
        let a = Tensor::randn(&[n, n], DType::F32, Some(1))?;
        let b = Tensor::randn(&[n, n], DType::F32, Some(2))?;
        let t_mm = mean_of(40, || a.matmul(&b).map(|_| ()))?;
        // Memory: an add over 16 MB in, 8 MB out.
        let x = Tensor::ones(&[1 << 21], DType::F32)?;
        let t_add = mean_of(40, || x.add(&x).map(|_| ()))?;
        let t_mm = slowest(t_mm)?;
        let t_add = slowest(t_add)?;
        let flops = 2.0 * (n * n * n) as f64 / t_mm;
        let memory_bandwidth = (3 * 4 * (1 << 21)) as f64 / t_add;
        let memory = -slowest(-memory_per_rank())?;
        let (latency, bandwidth) = if devices > 1 {
            link_rates(mesh)?
        } else {
            // One rank sends nothing; any values keep the arithmetic finite.
            (1e-6, 1e10)
        };
        Ok(Cluster {
            devices,
            flops,
            memory_bandwidth,
            memory,
            latency,
            bandwidth,
        })
    }
}

/// Alpha and 1/beta of the mesh's AllReduce: a tiny one gives the latency, a 4 MB one
/// the bandwidth.
fn link_rates(mesh: &GroupInfo) -> Result<(f64, f64)> {
    let time = |elements: usize, reps: usize| -> Result<f64> {
        let data = std::sync::Arc::new(spore_kernels::Buffer::F32(vec![1.0; elements]));
        barrier(Some(&mesh.name))?;
        let t = mean_of(reps, || {
            crate::collective::all_reduce(mesh, data.clone(), &[elements], ReduceOp::Sum)
                .map(|_| ())
        })?;
        Ok(group_f64s(mesh, &[t], ReduceOp::Max)?[0])
    };
    let p = mesh.size() as f64;
    // The same algorithm shape the cost model assumes: 2 * rounds(p) latencies.
    let steps = 2.0 * rounds(p);
    let small = time(1, 50)?;
    let latency = (small / steps).max(1e-9);
    let bytes = 4.0 * (1 << 20) as f64;
    let large = time(1 << 20, 10)?;
    let moving = (large - steps * latency).max(large * 0.1);
    let bandwidth = 2.0 * (p - 1.0) / p * bytes / moving;
    Ok((latency, bandwidth))
}
