//! Throughput of the vectorised float32 functions against libm, one thread, on a slice
//! that stays in L2 (64 Ki values):
//! `cargo run --release -p spore-kernels --example vmath_micro`.

use std::time::Instant;

use spore_kernels::vmath;

/// A slice function under test.
type SliceFn<'a> = &'a dyn Fn(&[f32], &mut [f32]);

fn time_ns_per_value(n: usize, mut f: impl FnMut()) -> f64 {
    f();
    let rounds = 200;
    let t = Instant::now();
    for _ in 0..rounds {
        f();
    }
    t.elapsed().as_secs_f64() * 1e9 / (rounds * n) as f64
}

fn main() {
    let n = 1 << 16;
    let xs: Vec<f32> = (0..n).map(|i| (i as f32 / n as f32 - 0.5) * 12.0).collect();
    let mut out = vec![0.0f32; n];
    println!("CPU: {}", spore_kernels::peak::cpu_model());
    let rows: [(&str, SliceFn); 5] = [
        ("exp (vmath)", &|s, d| vmath::exp_slice(s, d)),
        ("exp (libm)", &|s, d| {
            d.iter_mut().zip(s).for_each(|(d, x)| *d = x.exp())
        }),
        ("erf (vmath)", &|s, d| vmath::erf_slice(s, d)),
        ("erf (libm)", &|s, d| {
            d.iter_mut().zip(s).for_each(|(d, &x)| *d = libm::erff(x))
        }),
        ("sigmoid (vmath)", &|s, d| vmath::sigmoid_slice(s, d)),
    ];
    for (name, f) in rows {
        let ns = time_ns_per_value(n, || f(&xs, &mut out));
        println!("{name:<16} {ns:>6.3} ns/value");
    }
}
