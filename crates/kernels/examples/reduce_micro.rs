//! Times ReduceSum on the shapes a BERT and a ResNet step reduce: a Dense layer's bias
//! gradient (the rows of `[2048, 1024]` and `[2048, 256]` summed) and BatchNorm's
//! per-channel sum (`[8, 256, 56, 56]` over N, H and W), with outputs recycled through a
//! buffer pool as in a compiled graph, and the bandwidth each reaches.
//! Run: `cargo run --release -p spore-kernels --example reduce_micro [-- threads]` (2 by default)
use std::time::Instant;

use spore_kernels::arena::{self, BufferPool};
use spore_kernels::reduce::reduce;
use spore_kernels::{Buffer, Layout, ReduceFn};

/// Best of 100 calls after 10 warm-up calls, in ms.
fn time(mut f: impl FnMut() -> Buffer) -> f64 {
    let mut pool = BufferPool::default();
    arena::with_pool(&mut pool, || {
        let mut f = || arena::recycle(f());
        for _ in 0..10 {
            f();
        }
        (0..100)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64() * 1e3
            })
            .fold(f64::INFINITY, f64::min)
    })
}

fn main() {
    // The main thread as worker 0, as Spore runs kernels (`spore_core::threads`).
    let threads = std::env::args()
        .nth(1)
        .and_then(|t| t.parse::<usize>().ok())
        .unwrap_or(2);
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .use_current_thread()
        .build_global()
        .ok();
    for (name, shape, axes) in [
        ("bias grad 2048x1024", &[2048usize, 1024][..], &[0usize][..]),
        ("bias grad 2048x256", &[2048, 256][..], &[0][..]),
        ("BN sum 8x256x56x56", &[8, 256, 56, 56][..], &[0, 2, 3][..]),
    ] {
        let len: usize = shape.iter().product();
        let x = Buffer::F32((0..len).map(|i| (i % 97) as f32 * 0.01).collect());
        let layout = Layout::contiguous(shape);
        let ms = time(|| reduce(ReduceFn::Sum, &x, &layout, axes).unwrap());
        let gbps = len as f64 * 4.0 / (ms * 1e-3) / 1e9;
        println!("{name:22} {ms:8.3} ms  {gbps:6.1} GB/s read ({threads} threads)");
    }
}
