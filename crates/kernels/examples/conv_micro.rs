//! Times the three convolution kernels on LeNet5's and ResNet-18's shapes (batch 32).
//! Run: `cargo run --release -p spore-kernels --example conv_micro [-- NAME_FILTER [fwd|dw|dx|relu]]`
//! (the second argument times one kernel only, e.g. to profile it with `perf record`;
//! `relu` compares the forward pass followed by a ReLU op with the fused `conv2d_relu`).
use std::time::Instant;

use spore_kernels::Buffer;
use spore_kernels::UnaryFn;
use spore_kernels::arena::{self, BufferPool};
use spore_kernels::conv::{
    ConvGeometry, conv2d, conv2d_backward_filter, conv2d_backward_input, conv2d_relu,
};
use spore_kernels::elementwise::unary;
use spore_kernels::layout::Layout;

/// Best of 60 calls after 5 warm-up calls. Outputs go back to a buffer pool, as in a
/// compiled graph, so that the figures exclude the system allocator.
fn time(mut f: impl FnMut() -> Vec<f32>) -> f64 {
    let mut pool = BufferPool::default();
    arena::with_pool(&mut pool, || {
        let mut f = || arena::recycle(Buffer::F32(f()));
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
    let cases = [
        // (name, input, filter, padding, stride)
        ("lenet conv1", [32, 1, 32, 32], [6, 1, 5, 5], 0, 1),
        ("lenet conv2", [32, 6, 14, 14], [16, 6, 5, 5], 0, 1),
        // ResNet-18 (CIFAR form): every distinct convolution, with its count per step.
        ("resnet conv1 x1", [32, 3, 32, 32], [64, 3, 3, 3], 1, 1),
        ("resnet l1 3x3 x4", [32, 64, 32, 32], [64, 64, 3, 3], 1, 1),
        ("resnet l2 s2 x1", [32, 64, 32, 32], [128, 64, 3, 3], 1, 2),
        ("resnet l2 1x1 x1", [32, 64, 32, 32], [128, 64, 1, 1], 0, 2),
        (
            "resnet l2 3x3 x3",
            [32, 128, 16, 16],
            [128, 128, 3, 3],
            1,
            1,
        ),
        ("resnet l3 s2 x1", [32, 128, 16, 16], [256, 128, 3, 3], 1, 2),
        (
            "resnet l3 1x1 x1",
            [32, 128, 16, 16],
            [256, 128, 1, 1],
            0,
            2,
        ),
        ("resnet l3 3x3 x3", [32, 256, 8, 8], [256, 256, 3, 3], 1, 1),
        ("resnet l4 s2 x1", [32, 256, 8, 8], [512, 256, 3, 3], 1, 2),
        ("resnet l4 1x1 x1", [32, 256, 8, 8], [512, 256, 1, 1], 0, 2),
        ("resnet l4 3x3 x3", [32, 512, 4, 4], [512, 512, 3, 3], 1, 1),
    ];
    let only = std::env::args().nth(1).unwrap_or_default();
    let kernel = std::env::args().nth(2).unwrap_or_default();
    for (name, xs, ws, p, st) in cases.into_iter().filter(|c| c.0.contains(&only)) {
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
            let runs = |k: &str| kernel.is_empty() || kernel == k;
            let time_if = |k: &str, f: &mut dyn FnMut() -> Vec<f32>| {
                if runs(k) { time(f) } else { f64::NAN }
            };
            let f = time_if("fwd", &mut || conv2d(&x, &w, &g));
            let bf = time_if("dw", &mut || conv2d_backward_filter(&dy, &x, &g));
            let bi = time_if("dx", &mut || conv2d_backward_input(&dy, &w, &g));
            println!(
                "{name:17} fwd {f:8.3} ms ({:5.1} GF/s)  dW {bf:8.3} ms ({:5.1})  dX {bi:8.3} ms ({:5.1})",
                flop / f / 1e6, flop / bf / 1e6, flop / bi / 1e6
            );
        });
    }
}
