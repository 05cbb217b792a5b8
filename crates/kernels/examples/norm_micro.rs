//! Times LayerNorm's loops on the BERT encoder's rows (2048 tokens of 256 values): the
//! forward pass, the input gradient and the parameter gradients, with outputs recycled
//! through a buffer pool as in a compiled graph, and the bandwidth each reaches.
//! Run: `cargo run --release -p spore-kernels --example norm_micro [-- threads]` (2 by default)
#[path = "micro/mod.rs"]
mod micro;

use spore_kernels::Buffer;
use spore_kernels::arena;
use spore_kernels::norm::{row_norm, row_norm_input_grad, row_norm_param_grads};

fn main() {
    let threads = micro::start_threads();
    let (rows, d) = (2048, 256);
    let values = |salt: usize| -> Vec<f32> {
        (0..rows * d)
            .map(|i| ((i * 31 + salt) % 97) as f32 * 0.02 - 1.0)
            .collect()
    };
    let (x, dy) = (values(1), values(2));
    let gamma: Vec<f32> = (0..d).map(|j| 1.0 + j as f32 * 0.001).collect();
    let beta = vec![0.1f32; d];
    let bytes = (rows * d * 4) as f64;
    let report = |name: &str, ms: f64, streams: f64| {
        let gbps = streams * bytes / (ms * 1e-3) / 1e9;
        println!("{name:24} {ms:8.3} ms  {gbps:6.1} GB/s ({threads} threads)");
    };
    // Best of 100 calls after 10 warm-up calls.
    let ms = micro::best_ms(10, 100, || {
        let mut out = arena::for_overwrite::<f32>(x.len());
        row_norm(&x, &gamma, &beta, 1e-12, &mut out);
        Buffer::F32(out)
    });
    report("LayerNorm", ms, 2.0);
    let ms = micro::best_ms(10, 100, || {
        let mut dx = arena::for_overwrite::<f32>(x.len());
        row_norm_input_grad(&dy, &x, &gamma, 1e-12, &mut dx);
        Buffer::F32(dx)
    });
    report("LayerNorm input grad", ms, 3.0);
    let ms = micro::best_ms(10, 100, || {
        Buffer::F32(row_norm_param_grads(&dy, &x, d, 1e-12))
    });
    report("LayerNorm param grads", ms, 2.0);
}
