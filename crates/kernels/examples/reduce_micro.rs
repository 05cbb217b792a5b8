//! Times ReduceSum on the shapes a BERT and a ResNet step reduce: a Dense layer's bias
//! gradient (the rows of `[2048, 1024]` and `[2048, 256]` summed) and BatchNorm's
//! per-channel sum (`[8, 256, 56, 56]` over N, H and W), with outputs recycled through a
//! buffer pool as in a compiled graph, and the bandwidth each reaches.
//! Run: `cargo run --release -p spore-kernels --example reduce_micro [-- threads]` (2 by default)
#[path = "micro/mod.rs"]
mod micro;

use spore_kernels::reduce::reduce;
use spore_kernels::{Buffer, Layout, ReduceFn};

fn main() {
    let threads = micro::start_threads();
    for (name, shape, axes) in [
        ("bias grad 2048x1024", &[2048usize, 1024][..], &[0usize][..]),
        ("bias grad 2048x256", &[2048, 256][..], &[0][..]),
        ("BN sum 8x256x56x56", &[8, 256, 56, 56][..], &[0, 2, 3][..]),
    ] {
        let len: usize = shape.iter().product();
        let x = Buffer::F32((0..len).map(|i| (i % 97) as f32 * 0.01).collect());
        let layout = Layout::contiguous(shape);
        // Best of 100 calls after 10 warm-up calls.
        let ms = micro::best_ms(10, 100, || {
            reduce(ReduceFn::Sum, &x, &layout, axes).unwrap()
        });
        let gbps = len as f64 * 4.0 / (ms * 1e-3) / 1e9;
        println!("{name:22} {ms:8.3} ms  {gbps:6.1} GB/s read ({threads} threads)");
    }
}
