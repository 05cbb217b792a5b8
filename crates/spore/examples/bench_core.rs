//! Core speed figures for the closing notes and BENCHMARKS.md (never asserted in tests):
//! fp32 GEMM 2048^3 in GFLOP/s, and eager dispatch overhead per small op.
//!
//! Run: `cargo run --release --example bench_core [-- --threads N]`

use std::time::Instant;

use spore::prelude::*;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median seconds per call of `f`, over `repeats` timed runs of `inner` calls each.
fn time_it(repeats: usize, inner: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..inner.min(3) {
        f();
    }
    median(
        (0..repeats)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..inner {
                    f();
                }
                t.elapsed().as_secs_f64() / inner as f64
            })
            .collect(),
    )
}

fn main() -> Result<()> {
    let mut threads = 2;
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--threads") {
        threads = args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(threads);
    }
    // The main thread is one of the kernel pool's workers (see `spore::core::threads`).
    spore::core::threads::join_kernel_pool(Some(threads))?;
    println!("threads: {threads}");

    let n = 2048;
    let a = Tensor::randn(&[n, n], DType::F32, Some(1))?;
    let b = Tensor::randn(&[n, n], DType::F32, Some(2))?;
    let secs = time_it(5, 1, || {
        a.matmul(&b).expect("matmul");
    });
    println!(
        "gemm f32 {n}x{n}x{n}: {:.1} ms, {:.1} GFLOP/s",
        secs * 1e3,
        2.0 * (n as f64).powi(3) / secs / 1e9
    );

    let x = Tensor::ones(&[4], DType::F32).unwrap();
    let y = Tensor::ones(&[4], DType::F32).unwrap();
    let per_op = time_it(7, 100_000, || {
        x.add(&y).expect("add");
    });
    println!(
        "eager dispatch, add of two [4] tensors: {:.2} us/op",
        per_op * 1e6
    );
    let w = y.with_requires_grad(true);
    let per_op = time_it(7, 100_000, || {
        x.mul(&w).expect("mul");
    });
    println!(
        "eager dispatch with autodiff recording, mul [4]: {:.2} us/op",
        per_op * 1e6
    );
    let s = Tensor::ones(&[64, 10], DType::F32).unwrap();
    let per_op = time_it(7, 20_000, || {
        s.log_softmax(-1).expect("log_softmax");
    });
    println!(
        "log_softmax [64, 10] (5 primitive ops): {:.2} us",
        per_op * 1e6
    );
    Ok(())
}
