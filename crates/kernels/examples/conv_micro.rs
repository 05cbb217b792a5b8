//! Times the three convolution kernels on LeNet5's and ResNet-18's shapes (batch 32) and
//! on ResNet-50's (ImageNet form, batch 8), and sums each network's convolutions per step
//! (each shape times its count).
//! Run: `cargo run --release -p spore-kernels --example conv_micro [-- NAME_FILTER [fwd|dw|dx|relu]]`
//! (the second argument times one kernel only, e.g. to profile it with `perf record`;
//! `relu` compares the forward pass followed by a ReLU op with the fused `conv2d_relu`;
//! `bf16` times each pass in float32, and in bfloat16 widened and native, see
//! `spore_kernels::conv::bf16`).
use std::time::Instant;

use spore_kernels::UnaryFn;
use spore_kernels::arena::{self, BufferPool};
use spore_kernels::bf16_gemm::Path;
use spore_kernels::conv::bf16 as conv_bf16;
use spore_kernels::conv::{
    ConvGeometry, Pass, choose, conv2d, conv2d_backward_filter, conv2d_backward_input, conv2d_relu,
};
use spore_kernels::elementwise::unary;
use spore_kernels::layout::Layout;
use spore_kernels::{Buffer, Num, bf16};

/// Best of 60 calls after 5 warm-up calls. Outputs go back to a buffer pool, as in a
/// compiled graph, so that the figures exclude the system allocator.
fn time<T: Num>(mut f: impl FnMut() -> Vec<T>) -> f64 {
    let mut pool = BufferPool::default();
    arena::with_pool(&mut pool, || {
        let mut f = || arena::recycle(T::into_buffer(f()));
        for _ in 0..5 {
            f();
        }
        let mut v: Vec<f64> = (0..60)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        v.sort_by(|a, b| a.total_cmp(b));
        v[0]
    })
}

fn main() {
    // The main thread as worker 0, as Spore runs kernels (`spore_core::threads`).
    rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .use_current_thread()
        .build_global()
        .ok();
    let only = std::env::args().nth(1).unwrap_or_default();
    let kernel = std::env::args().nth(2).unwrap_or_default();
    // Per network: milliseconds of forward, filter-gradient and input-gradient passes.
    let mut totals: Vec<(&str, [f64; 3])> = Vec::new();
    // Per network with `bf16`: milliseconds of all passes in float32, in bfloat16 widened,
    // and in bfloat16 on the path `best_path` takes.
    let mut bf16_totals: Vec<(&str, [f64; 3])> = Vec::new();
    for (name, count, xs, ws, p, st) in CASES.into_iter().filter(|c| c.0.contains(&only)) {
        let g = ConvGeometry::new(xs, ws, [st, st], [1, 1], [p, p, p, p], 1);
        let x: Vec<f32> = (0..xs.iter().product::<usize>())
            .map(|i| (i % 7) as f32 * 0.1)
            .collect();
        let w: Vec<f32> = (0..ws.iter().product::<usize>())
            .map(|i| (i % 5) as f32 * 0.1)
            .collect();
        let dy = conv2d(&x, &w, &g);
        let flop = 2.0 * (g.n * g.o * g.oh * g.ow * g.c * g.kh * g.kw) as f64;
        rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap().install(|| {
            if kernel == "relu" {
                let layout = Layout::contiguous(&[g.n, g.o, g.oh, g.ow]);
                let separate = time(|| {
                    let y = Buffer::F32(conv2d(&x, &w, &g));
                    let out = unary(UnaryFn::Relu, &y, &layout).expect("relu of f32");
                    arena::recycle(y);
                    match out {
                        Buffer::F32(v) => v,
                        _ => unreachable!("relu keeps f32"),
                    }
                });
                let fused = time(|| conv2d_relu(&x, &w, &g));
                println!("{name:17} fwd + ReLU op {separate:8.3} ms  conv2d_relu {fused:8.3} ms");
                return;
            }
            if kernel == "bf16" {
                let sums = compare_bf16(name, &g, (&x, &w, &dy));
                add_to(&mut bf16_totals, name, count, sums);
                return;
            }
            let runs = |k: &str| kernel.is_empty() || kernel == k;
            let time_if = |k: &str, f: &mut dyn FnMut() -> Vec<f32>| {
                if runs(k) { time(f) } else { f64::NAN }
            };
            let f = time_if("fwd", &mut || conv2d(&x, &w, &g));
            let bf = time_if("dw", &mut || conv2d_backward_filter(&dy, &x, &g));
            let bi = time_if("dx", &mut || conv2d_backward_input(&dy, &w, &g));
            let path = |pass| format!("{:?}", choose(&g, pass, true));
            println!(
                "{name:17} x{count:<2} fwd {f:8.3} ms ({:5.1} GF/s)  dW {bf:8.3} ms ({:5.1})  dX {bi:8.3} ms ({:5.1})  [{} / {} / {}]",
                flop / f / 1e6,
                flop / bf / 1e6,
                flop / bi / 1e6,
                path(Pass::Forward),
                path(Pass::FilterGradient),
                path(Pass::InputGradient),
            );
            add_to(&mut totals, name, count, [f, bf, bi]);
        });
    }
    for (network, [f32_ms, widened, best]) in bf16_totals {
        println!(
            "{network:8} per step: float32 {f32_ms:8.2} ms  bfloat16 widened {widened:8.2} ms  bfloat16 best path {best:8.2} ms  (float32 / best {:.2}x)",
            f32_ms / best
        );
    }
    for (network, [f, bf, bi]) in totals {
        println!(
            "{network:8} per step: fwd {f:8.2} ms  dW {bf:8.2} ms  dX {bi:8.2} ms  total {:8.2} ms",
            f + bf + bi
        );
    }
}

/// Adds `count` times `ms` to the sums of the network `name` starts with.
fn add_to(
    totals: &mut Vec<(&'static str, [f64; 3])>,
    name: &'static str,
    count: usize,
    ms: [f64; 3],
) {
    let network = name.split(' ').next().unwrap_or(name);
    let at = match totals.iter().position(|t| t.0 == network) {
        Some(at) => at,
        None => {
            totals.push((network, [0.0; 3]));
            totals.len() - 1
        }
    };
    for (sum, ms) in totals[at].1.iter_mut().zip(ms) {
        *sum += count as f64 * ms;
    }
}

/// Each pass of `g` in float32 (what O0 runs) and on bfloat16 values widened to float32
/// and native (AVX512_BF16 dot products), with the path `conv_bf16::best_path` takes;
/// returns the three passes' milliseconds summed: float32, widened, on the best path.
fn compare_bf16(name: &str, g: &ConvGeometry, (x, w, dy): (&[f32], &[f32], &[f32])) -> [f64; 3] {
    let mut sums = [0.0; 3];
    let half = |v: &[f32]| v.iter().map(|&v| bf16::from_f32(v)).collect::<Vec<_>>();
    let (xh, wh, dyh) = (half(x), half(w), half(dy));
    let native = spore_kernels::bf16_gemm::native_available();
    for pass in [Pass::Forward, Pass::FilterGradient, Pass::InputGradient] {
        let f32_ms = match pass {
            Pass::Forward => time(|| conv2d(x, w, g)),
            Pass::FilterGradient => time(|| conv2d_backward_filter(dy, x, g)),
            Pass::InputGradient => time(|| conv2d_backward_input(dy, w, g)),
        };
        let run = |path: Path| match pass {
            Pass::Forward => time(|| conv_bf16::forward(path, &xh, &wh, g, false)),
            Pass::FilterGradient => time(|| conv_bf16::filter_gradient(path, &dyh, &xh, g)),
            Pass::InputGradient => time(|| conv_bf16::input_gradient(path, &dyh, &wh, g)),
        };
        let widened = run(Path::Widened);
        let native_ms = if native { run(Path::Native) } else { f64::NAN };
        let best = match conv_bf16::best_path(g, pass) {
            Path::Native => native_ms,
            Path::Widened => widened,
        };
        for (sum, ms) in sums.iter_mut().zip([f32_ms, widened, best]) {
            *sum += ms;
        }
        println!(
            "{name:19} {:>14} f32 {f32_ms:8.3}  bf16 widened {widened:8.3}  native {native_ms:8.3} ms  f32/native {:5.2}x  best: {:?}",
            format!("{pass:?}"),
            f32_ms / native_ms,
            conv_bf16::best_path(g, pass),
        );
    }
    sums
}

/// (name: network first, count per step, input, filter, padding, stride).
type Case = (&'static str, usize, [usize; 4], [usize; 4], usize, usize);

const CASES: [Case; 36] = [
    ("lenet conv1", 1, [32, 1, 32, 32], [6, 1, 5, 5], 0, 1),
    ("lenet conv2", 1, [32, 6, 14, 14], [16, 6, 5, 5], 0, 1),
    // ResNet-18 (CIFAR form): every distinct convolution.
    ("resnet conv1", 1, [32, 3, 32, 32], [64, 3, 3, 3], 1, 1),
    ("resnet l1 3x3", 4, [32, 64, 32, 32], [64, 64, 3, 3], 1, 1),
    ("resnet l2 s2", 1, [32, 64, 32, 32], [128, 64, 3, 3], 1, 2),
    ("resnet l2 1x1", 1, [32, 64, 32, 32], [128, 64, 1, 1], 0, 2),
    (
        "resnet l2 3x3",
        3,
        [32, 128, 16, 16],
        [128, 128, 3, 3],
        1,
        1,
    ),
    ("resnet l3 s2", 1, [32, 128, 16, 16], [256, 128, 3, 3], 1, 2),
    (
        "resnet l3 1x1",
        1,
        [32, 128, 16, 16],
        [256, 128, 1, 1],
        0,
        2,
    ),
    ("resnet l3 3x3", 3, [32, 256, 8, 8], [256, 256, 3, 3], 1, 1),
    ("resnet l4 s2", 1, [32, 256, 8, 8], [512, 256, 3, 3], 1, 2),
    ("resnet l4 1x1", 1, [32, 256, 8, 8], [512, 256, 1, 1], 0, 2),
    ("resnet l4 3x3", 3, [32, 512, 4, 4], [512, 512, 3, 3], 1, 1),
    // ResNet-50 (ImageNet form, batch 8): every distinct convolution; the stride of a
    // stage sits on its first block's 3x3 and on the projection.
    ("r50 stem 7x7", 1, [8, 3, 224, 224], [64, 3, 7, 7], 3, 2),
    ("r50 l1 1x1 64-64", 1, [8, 64, 56, 56], [64, 64, 1, 1], 0, 1),
    ("r50 l1 3x3", 3, [8, 64, 56, 56], [64, 64, 3, 3], 1, 1),
    (
        "r50 l1 1x1 64-256",
        4,
        [8, 64, 56, 56],
        [256, 64, 1, 1],
        0,
        1,
    ),
    (
        "r50 l1 1x1 256-64",
        2,
        [8, 256, 56, 56],
        [64, 256, 1, 1],
        0,
        1,
    ),
    (
        "r50 l2 1x1 256-128",
        1,
        [8, 256, 56, 56],
        [128, 256, 1, 1],
        0,
        1,
    ),
    ("r50 l2 3x3 s2", 1, [8, 128, 56, 56], [128, 128, 3, 3], 1, 2),
    (
        "r50 l2 proj s2",
        1,
        [8, 256, 56, 56],
        [512, 256, 1, 1],
        0,
        2,
    ),
    (
        "r50 l2 1x1 128-512",
        4,
        [8, 128, 28, 28],
        [512, 128, 1, 1],
        0,
        1,
    ),
    (
        "r50 l2 1x1 512-128",
        3,
        [8, 512, 28, 28],
        [128, 512, 1, 1],
        0,
        1,
    ),
    ("r50 l2 3x3", 3, [8, 128, 28, 28], [128, 128, 3, 3], 1, 1),
    (
        "r50 l3 1x1 512-256",
        1,
        [8, 512, 28, 28],
        [256, 512, 1, 1],
        0,
        1,
    ),
    ("r50 l3 3x3 s2", 1, [8, 256, 28, 28], [256, 256, 3, 3], 1, 2),
    (
        "r50 l3 proj s2",
        1,
        [8, 512, 28, 28],
        [1024, 512, 1, 1],
        0,
        2,
    ),
    (
        "r50 l3 1x1 256-1024",
        6,
        [8, 256, 14, 14],
        [1024, 256, 1, 1],
        0,
        1,
    ),
    (
        "r50 l3 1x1 1024-256",
        5,
        [8, 1024, 14, 14],
        [256, 1024, 1, 1],
        0,
        1,
    ),
    ("r50 l3 3x3", 5, [8, 256, 14, 14], [256, 256, 3, 3], 1, 1),
    (
        "r50 l4 1x1 1024-512",
        1,
        [8, 1024, 14, 14],
        [512, 1024, 1, 1],
        0,
        1,
    ),
    ("r50 l4 3x3 s2", 1, [8, 512, 14, 14], [512, 512, 3, 3], 1, 2),
    (
        "r50 l4 proj s2",
        1,
        [8, 1024, 14, 14],
        [2048, 1024, 1, 1],
        0,
        2,
    ),
    (
        "r50 l4 1x1 512-2048",
        3,
        [8, 512, 7, 7],
        [2048, 512, 1, 1],
        0,
        1,
    ),
    (
        "r50 l4 1x1 2048-512",
        2,
        [8, 2048, 7, 7],
        [512, 2048, 1, 1],
        0,
        1,
    ),
    ("r50 l4 3x3", 2, [8, 512, 7, 7], [512, 512, 3, 3], 1, 1),
];
