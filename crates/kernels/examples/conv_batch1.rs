//! Times batch-1 forward convolutions from prepared filters (ResNet-18's 3x3 layers, as an
//! inference run in evaluation mode computes them), with the filters in cache (one weight
//! called again and again) and from memory (eight weights in turn, as a network's layers
//! follow each other; 75 MB of filters for the 512-channel layer).
//! Run: `cargo run --release -p spore-kernels --example conv_batch1 [-- threads]` (2 by default)
#[path = "micro/mod.rs"]
mod micro;

use spore_kernels::Buffer;
use spore_kernels::conv::ConvGeometry;
use spore_kernels::conv::prepared::{conv2d_prepared, prepare_filters};

fn main() {
    let threads = micro::start_threads();
    // channels, height and width: ResNet-18's four stages (CIFAR form).
    for (c, hw) in [(64, 32), (128, 16), (256, 8), (512, 4)] {
        let g = ConvGeometry::new([1, c, hw, hw], [c, c, 3, 3], [1, 1], [1, 1], [1; 4], 1);
        let x: Vec<f32> = (0..c * hw * hw).map(|i| (i % 7) as f32 * 0.1).collect();
        let weights: Vec<_> = (0..8)
            .map(|s| {
                let w: Vec<f32> = (0..c * c * 9)
                    .map(|i| ((i + s) % 13) as f32 * 0.01)
                    .collect();
                prepare_filters(&w, &g)
            })
            .collect::<Option<_>>()
            .unwrap_or_default();
        if weights.is_empty() {
            println!("{c}x{hw}x{hw}: no prepared filters on this machine (no AVX2 GEMM)");
            continue;
        }
        let flop = 2.0 * (c * c * 9 * hw * hw) as f64;
        let hot = micro::best_ms(20, 200, || {
            Buffer::F32(conv2d_prepared(&x, &weights[0], &g, false))
        });
        let mut next = 0;
        let cold = micro::best_ms(16, 200, || {
            next = (next + 1) % weights.len();
            Buffer::F32(conv2d_prepared(&x, &weights[next], &g, false))
        });
        println!(
            "{c:3} channels {hw:2}x{hw:<2} {threads} threads: filters in cache {hot:6.3} ms \
             ({:5.1} GFLOP/s), from memory {cold:6.3} ms ({:5.1} GFLOP/s)",
            flop / hot / 1e6,
            flop / cold / 1e6
        );
    }
}
