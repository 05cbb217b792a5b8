//! Times `gemm_into` on the products Spore's benchmark networks run, in GFLOP/s.
//! Run: `cargo run --release -p spore-kernels --example gemm_micro [-- FILTER [THREADS]]`
//! (the cases whose names contain FILTER, all on THREADS threads where given; set
//! `SPORE_GEMM=crate` to time the `gemm` crate instead of Spore's own f32 kernels).
use std::time::Instant;

use gemm::Parallelism;
use spore_kernels::matmul::{MatRef, gemm_into};

fn best_ms(mut f: impl FnMut()) -> f64 {
    f();
    (0..20)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .fold(f64::MAX, f64::min)
}

fn main() {
    // The main thread as worker 0, as Spore runs kernels (`spore_core::threads`).
    rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .use_current_thread()
        .build_global()
        .ok();
    let only = std::env::args().nth(1).unwrap_or_default();
    // An optional second argument runs every case on that many threads (1 or 2, the
    // global pool's size).
    let forced: Option<usize> = match std::env::args().nth(2) {
        None => None,
        Some(t) => match t.parse::<usize>() {
            Ok(n @ 1..=2) => Some(n),
            _ => {
                eprintln!("gemm_micro: THREADS must be 1 or 2, got {t:?}");
                std::process::exit(2);
            }
        },
    };
    // name, m, n, k, A transposed (column-major), B transposed, threads
    let cases = [
        ("square 2048", 2048, 2048, 2048, false, false, 2),
        ("resnet l4 fwd", 512, 1024, 4608, false, false, 1),
        ("resnet l1 fwd", 64, 1024, 576, false, false, 1),
        ("resnet l1 dW", 64, 576, 1024, false, true, 1),
        ("mlp x.Wt", 64, 512, 784, false, true, 2),
        ("mlp 1t x.Wt", 64, 512, 784, false, true, 1),
        ("mlp dy.W", 64, 784, 512, false, false, 2),
        ("mlp dyT.x", 512, 784, 64, true, false, 2),
        ("mlp h.W2t", 64, 512, 512, false, true, 2),
        ("mlp dy.W2", 64, 512, 512, false, false, 2),
        ("mlp dy.W3", 64, 512, 10, false, false, 2),
        ("mlp h.W3t", 64, 10, 512, false, true, 2),
        ("mlp dyT.h", 512, 512, 64, true, false, 2),
        ("lenet conv2 fwd", 16, 1000, 150, false, false, 1),
        ("lenet conv1 fwd", 6, 784, 25, false, false, 1),
        ("lenet conv1 dW", 6, 25, 784, false, true, 1),
        ("lenet conv2 dW", 16, 150, 1000, false, true, 1),
        ("lenet conv2 dX", 150, 1000, 16, true, false, 1),
        // A 2048-wide Dense layer on a batch of 128, and on one of 4 micro-batches of 32
        // (pipeline_speed): forward x.Wt, input gradient dy.W, weight gradient dyT.x.
        ("pipe b128 x.Wt", 128, 2048, 2048, false, true, 1),
        ("pipe b32 x.Wt", 32, 2048, 2048, false, true, 1),
        ("pipe b128 dy.W", 128, 2048, 2048, false, false, 1),
        ("pipe b32 dy.W", 32, 2048, 2048, false, false, 1),
        ("pipe b128 dyT.x", 2048, 2048, 128, true, false, 1),
        ("pipe b32 dyT.x", 2048, 2048, 32, true, false, 1),
        // ResNet-50's 1x1 convolutions at 56x56, one image per thread: forward W.x.
        ("r50 1x1 256-64 fwd", 64, 3136, 256, false, false, 1),
        ("r50 1x1 64-64 fwd", 64, 3136, 64, false, false, 1),
        ("r50 1x1 64-256 fwd", 256, 3136, 64, false, false, 1),
        // The BERT encoder's products (2048 tokens, hidden 256, feed-forward 1024):
        // projections x.Wt, input gradients dy.W, weight gradients dyT.x.
        ("bert qkv x.Wt", 2048, 256, 256, false, true, 2),
        ("bert ffn1 x.Wt", 2048, 1024, 256, false, true, 2),
        ("bert ffn2 x.Wt", 2048, 256, 1024, false, true, 2),
        ("bert qkv dy.W", 2048, 256, 256, false, false, 2),
        ("bert ffn2 dy.W", 2048, 1024, 256, false, false, 2),
        ("bert qkv dyT.x", 256, 256, 2048, true, false, 2),
        ("bert ffn1 dyT.x", 1024, 256, 2048, true, false, 2),
        ("bert ffn2 dyT.x", 256, 1024, 2048, true, false, 2),
    ];
    for (name, m, n, k, ta, tb, threads) in cases.into_iter().filter(|c| c.0.contains(&only)) {
        let threads = forced.unwrap_or(threads);
        let a: Vec<f32> = (0..m * k).map(|i| (i % 13) as f32 * 0.1).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 * 0.1).collect();
        let mut c = vec![0.0f32; m * n];
        let mat = |t: bool, rows: usize, cols: usize| MatRef {
            offset: 0,
            row_stride: if t { 1 } else { cols as isize },
            col_stride: if t { rows as isize } else { 1 },
        };
        let (ma, mb) = (mat(ta, m, k), mat(tb, k, n));
        let par = if threads > 1 {
            Parallelism::Rayon(threads)
        } else {
            Parallelism::None
        };
        let ms = best_ms(|| gemm_into(&mut c, false, m, n, k, &a, ma, &b, mb, par));
        let gf = 2.0 * (m * n * k) as f64 / ms / 1e6;
        println!("{name:16} {m:5}x{n:5}x{k:5} threads {threads}: {ms:8.3} ms {gf:6.1} GFLOP/s");
    }
}
