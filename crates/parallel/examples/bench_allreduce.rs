//! AllReduce time and bandwidth through Spore's operator against a plain `MPI_Allreduce`
//! of the same size (BENCHMARKS.md, "Distributed training"). `--raw` times the plain call
//! (the `mpi` crate on the main thread, no Spore); without it, `spore_parallel::ops::
//! all_reduce` on a Float32 tensor (an eager op: the ranks' agreement on the shape, the
//! handoff to the communication thread, the same MPI call, the result as a tensor).
//! Each size: 3 warm-up calls, then `--reps` calls each started after a barrier; the
//! figure is the median of the slowest rank's times.
//!
//! ```sh
//! cargo build --release -p spore-parallel --features mpi --example bench_allreduce
//! mpirun -n 2 target/release/examples/bench_allreduce --raw
//! mpirun -n 2 target/release/examples/bench_allreduce
//! ```

use std::time::Instant;

use mpi::collective::SystemOperation;
use mpi::traits::*;
use spore_core::{DType, Tensor};
use spore_parallel::{ReduceOp, ops};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn parse() -> Result<(bool, Vec<f64>, usize), String> {
    let (mut raw, mut sizes, mut reps) = (false, vec![1.0, 16.0, 64.0], 20);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--raw" => raw = true,
            "--sizes" => {
                let v = it.next().ok_or("--sizes needs a value")?;
                sizes = v
                    .split(',')
                    .map(|s| {
                        s.parse()
                            .map_err(|_| format!("--sizes expects MB like 1,16,64, got {v:?}"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--reps" => {
                let v = it.next().ok_or("--reps needs a value")?;
                reps = v
                    .parse()
                    .map_err(|_| format!("--reps expects a count, got {v:?}"))?;
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?}; expected --raw, --sizes MB,..., --reps N"
                ));
            }
        }
    }
    Ok((raw, sizes, reps.max(1)))
}

fn report(rank: usize, size: usize, label: &str, mb: f64, seconds: f64) {
    if rank == 0 {
        let bytes = mb * 1024.0 * 1024.0;
        // Bus bandwidth (NCCL's convention): what each link carries in a ring AllReduce.
        let bus = bytes * 2.0 * (size as f64 - 1.0) / size as f64 / seconds / 1e9;
        println!(
            "{label} ranks={size} size_mb={mb} median_ms={:.3} busbw_gb_s={bus:.2}",
            seconds * 1e3
        );
    }
}

fn raw(sizes: &[f64], reps: usize) -> Result<(), String> {
    let universe = mpi::initialize().ok_or("MPI was initialised already")?;
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    for &mb in sizes {
        let n = (mb * 1024.0 * 1024.0 / 4.0) as usize;
        let send = vec![1.0f32; n];
        let mut recv = vec![0.0f32; n];
        let mut times = vec![];
        for i in 0..reps + 3 {
            world.barrier();
            let t = Instant::now();
            world.all_reduce_into(&send[..], &mut recv[..], SystemOperation::sum());
            let mine = t.elapsed().as_secs_f64();
            let mut slowest = 0.0f64;
            world.all_reduce_into(&mine, &mut slowest, SystemOperation::max());
            if i >= 3 {
                times.push(slowest);
            }
        }
        if recv[0] != size as f32 {
            return Err(format!("wrong sum {} (expected {size})", recv[0]));
        }
        report(rank, size, "mpi_allreduce", mb, median(times));
    }
    Ok(())
}

fn spore(sizes: &[f64], reps: usize) -> spore_core::Result<()> {
    spore_parallel::init()?;
    let (rank, size) = (
        spore_parallel::get_rank(None)?,
        spore_parallel::get_group_size(None)?,
    );
    for &mb in sizes {
        let n = (mb * 1024.0 * 1024.0 / 4.0) as usize;
        let x = Tensor::ones(&[n], DType::F32)?;
        let mut times = vec![];
        let mut last = None;
        for i in 0..reps + 3 {
            spore_parallel::barrier(None)?;
            let t = Instant::now();
            last = Some(ops::all_reduce(&x, ReduceOp::Sum, None)?);
            let slowest = spore_parallel::collective_max_f64(t.elapsed().as_secs_f64())?;
            if i >= 3 {
                times.push(slowest);
            }
        }
        if let Some(y) = last {
            let first = y.narrow(0, 0, 1)?.to_vec::<f32>()?;
            if first != [size as f32] {
                return Err(spore_core::Error::invalid(format!(
                    "wrong sum {first:?} (expected {size})"
                )));
            }
        }
        report(rank, size, "spore_all_reduce", mb, median(times));
    }
    Ok(())
}

fn main() {
    let outcome = parse().and_then(|(raw_mpi, sizes, reps)| {
        if raw_mpi {
            raw(&sizes, reps)
        } else {
            spore(&sizes, reps).map_err(|e| e.to_string())
        }
    });
    if let Err(e) = outcome {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
