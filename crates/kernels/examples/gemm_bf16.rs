//! Times the bfloat16 GEMM against the float32 one on the same products, in rounds that
//! alternate them (so host drift lands on both), and checks that they agree.
//! Run: `cargo run --release -p spore-kernels --example gemm_bf16 -- [NAME] [--threads 2] [--rounds 7]`
//! (NAME: only the products whose name contains it).
use std::time::Instant;

use gemm::Parallelism;
use spore_kernels::bf16;
use spore_kernels::bf16_gemm::{Path, gemm_bf16, native_available};
use spore_kernels::matmul::{MatRef, gemm_into};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == name);
    match at.and_then(|i| args.get(i + 1)) {
        Some(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name} wants a number, got {v}")),
        None => default,
    }
}

fn ms(f: &mut dyn FnMut()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let threads = arg("--threads", 2);
    let rounds = arg("--rounds", 7);
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .use_current_thread()
        .build_global()
        .ok();
    let cpu = spore_kernels::peak::cpu_model();
    println!(
        "{cpu}; AVX512_BF16 kernel: {}; {threads} threads",
        native_available()
    );
    // name, m, n, k, A transposed, B transposed
    let cases = [
        ("square 2048", 2048, 2048, 2048, false, false),
        ("resnet l4 fwd", 512, 1024, 4608, false, false),
        ("mlp x.Wt", 64, 512, 784, false, true),
        ("mlp dy.W", 64, 784, 512, false, false),
        ("mlp dyT.x", 512, 784, 64, true, false),
        ("mlp h.W2t", 64, 512, 512, false, true),
        ("mlp dyT.h", 512, 512, 64, true, false),
    ];
    let only = std::env::args()
        .nth(1)
        .filter(|a| !a.starts_with("--"))
        .unwrap_or_default();
    for (name, m, n, k, ta, tb) in cases.into_iter().filter(|c| c.0.contains(&only)) {
        time_case(name, (m, n, k), (ta, tb), threads, rounds);
    }
}

/// A `rows x cols` operand, row-major or (when `transposed`) column-major.
fn operand(transposed: bool, rows: usize, cols: usize) -> MatRef {
    let (row_stride, col_stride) = if transposed { (1, rows) } else { (cols, 1) };
    MatRef {
        offset: 0,
        row_stride: row_stride as isize,
        col_stride: col_stride as isize,
    }
}

/// Times one product in float32, bf16 native (where available) and bf16 widened, in
/// alternating rounds, checks that they agree, and prints the medians.
fn time_case(
    name: &str,
    (m, n, k): (usize, usize, usize),
    (ta, tb): (bool, bool),
    threads: usize,
    rounds: usize,
) {
    let a16: Vec<bf16> = (0..m * k)
        .map(|i| bf16::from_f32((i % 13) as f32 * 0.1 - 0.6))
        .collect();
    let b16: Vec<bf16> = (0..k * n)
        .map(|i| bf16::from_f32((i % 7) as f32 * 0.2 - 0.6))
        .collect();
    let (a32, b32): (Vec<f32>, Vec<f32>) = (
        a16.iter().map(|v| v.to_f32()).collect(),
        b16.iter().map(|v| v.to_f32()).collect(),
    );
    let (ma, mb) = (operand(ta, m, k), operand(tb, k, n));
    let par = if threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    let (mut c32, mut c16, mut cw) = (
        vec![0.0f32; m * n],
        vec![0.0f32; m * n],
        vec![0.0f32; m * n],
    );
    let mut f32_run = || gemm_into(&mut c32, false, m, n, k, &a32, ma, &b32, mb, par);
    let bf16_run =
        |path, c: &mut [f32]| gemm_bf16(path, c, false, (m, n, k), (&a16, ma), (&b16, mb), threads);
    let (mut t32, mut t16, mut tw) = (vec![], vec![], vec![]);
    let reps = (2e9 / (2.0 * (m * n * k) as f64)).ceil().max(1.0) as usize;
    for _ in 0..rounds {
        t32.push(ms(&mut || (0..reps).for_each(|_| f32_run())) / reps as f64);
        if native_available() {
            t16.push(
                ms(&mut || (0..reps).for_each(|_| bf16_run(Path::Native, &mut c16))) / reps as f64,
            );
        }
        tw.push(ms(&mut || (0..reps).for_each(|_| bf16_run(Path::Widened, &mut cw))) / reps as f64);
    }
    // Same inputs, both float32 accumulations: they may differ by rounding only.
    let worst = c32
        .iter()
        .zip(if native_available() { &c16 } else { &cw })
        .map(|(x, y)| ((x - y) / x.abs().max(1.0)).abs())
        .fold(0.0f32, f32::max);
    assert!(
        worst < 1e-3,
        "{name}: bf16 and f32 products differ by {worst} (relative)"
    );
    let gflops = |t: f64| 2.0 * (m * n * k) as f64 / t / 1e6;
    let f32_ms = median(t32);
    let widened_ms = median(tw);
    print!(
        "{name:>14}: f32 {f32_ms:8.3} ms {:6.1} GFLOP/s | bf16 widened {widened_ms:8.3} ms",
        gflops(f32_ms)
    );
    if !t16.is_empty() {
        let native_ms = median(t16);
        print!(
            " | bf16 native {native_ms:8.3} ms {:6.1} GFLOP/s = {:.2}x f32",
            gflops(native_ms),
            f32_ms / native_ms
        );
    }
    println!(" (median of {rounds} rounds, worst relative difference {worst:.1e})");
}
