//! Times max pooling and its gradient on LeNet5's 2x2 shapes (batch 32) and ResNet-50's
//! 3x3 stride-2 padded pool (batch 8 and 1), with outputs recycled through a buffer pool
//! as in a compiled graph.
//! Run: `cargo run --release -p spore-kernels --example pool_micro [-- threads]` (2 by default)
#[path = "micro/mod.rs"]
mod micro;

use spore_kernels::Buffer;
use spore_kernels::pool::{PoolGeometry, max_pool2d, max_pool2d_backward};

/// Best of 200 calls after 20 warm-up calls, in ms.
fn time(mut f: impl FnMut() -> Vec<f32>) -> f64 {
    micro::best_ms(20, 200, || Buffer::F32(f()))
}

fn main() {
    micro::start_threads();
    for (name, input, k, p) in [
        ("lenet pool1", [32, 6, 28, 28], 2, 0),
        ("lenet pool2", [32, 16, 10, 10], 2, 0),
        ("r50 pool b8", [8, 64, 112, 112], 3, 1),
        ("r50 pool b1", [1, 64, 112, 112], 3, 1),
    ] {
        let g = PoolGeometry::new(input, [k, k], [2, 2], [p; 4]);
        let len: usize = input.iter().product();
        // A ReLU's output: pseudo-random, half of it zero (ties and unpredictable
        // comparisons, as in a network).
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let x: Vec<f32> = (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5).max(0.0)
            })
            .collect();
        let dy = max_pool2d(&x, &g);
        let f = time(|| max_pool2d(&x, &g));
        let b = time(|| max_pool2d_backward(&x, &dy, &g));
        println!("{name:12} forward {f:7.4} ms  backward {b:7.4} ms");
    }
}
