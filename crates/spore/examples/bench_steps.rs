//! Training-step speed of LeNet5 (batch 32) and the seed 004 MLP (batch 64), PyNative vs
//! Graph (one compiled graph per step), plus compile time. Figures for BENCHMARKS.md; no
//! test asserts them.
//!
//! Run: `cargo run --release --example bench_steps`

use std::sync::Arc;
use std::time::Instant;

use spore::compile::jit;
use spore::prelude::*;
use spore_core::Parameter;

type Forward = fn(&[Tensor], &Tensor) -> Result<Tensor>;

fn lenet(p: &[Tensor], x: &Tensor) -> Result<Tensor> {
    let (conv, pool) = (Conv2dOptions::default(), Pool2dOptions::new(2, 2));
    let x = x.conv2d(&p[0], &conv)?.relu()?.max_pool2d(&pool)?;
    let x = x
        .conv2d(&p[1], &conv)?
        .relu()?
        .max_pool2d(&pool)?
        .flatten(1)?;
    let x = x.matmul(&p[2].transpose()?)?.add(&p[3])?.relu()?;
    let x = x.matmul(&p[4].transpose()?)?.add(&p[5])?.relu()?;
    x.matmul(&p[6].transpose()?)?.add(&p[7])
}

fn mlp(p: &[Tensor], x: &Tensor) -> Result<Tensor> {
    let x = x.flatten(1)?;
    let x = x.matmul(&p[0].transpose()?)?.add(&p[1])?.relu()?;
    let x = x.matmul(&p[2].transpose()?)?.add(&p[3])?.relu()?;
    x.matmul(&p[4].transpose()?)?.add(&p[5])
}

struct Net {
    forward: Forward,
    params: Vec<Parameter>,
    velocity: Vec<Parameter>,
}

impl Net {
    fn new(forward: Forward, shapes: &[&[usize]]) -> Net {
        let params: Vec<Parameter> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                Parameter::new(
                    Tensor::truncated_normal(s, 0.05, DType::F32, Some(i as u64)).unwrap(),
                    &format!("p{i}"),
                )
            })
            .collect();
        let velocity = params
            .iter()
            .map(|p| Parameter::with_requires_grad(p.stored().zeros_like(), "m", false))
            .collect();
        Net {
            forward,
            params,
            velocity,
        }
    }

    fn step(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        let w: Vec<Tensor> = self.params.iter().map(|p| p.value()).collect();
        let f = self.forward;
        let loss = move |a: &[Tensor]| -> Result<Tensor> {
            let logits = f(&a[2..], &a[0])?;
            logits
                .log_softmax(-1)?
                .mul(&a[1].one_hot(10, DType::F32)?)?
                .sum(&[-1], false)?
                .mean(&[], false)?
                .neg()
        };
        let out = value_and_grad(loss, None, &w, false)(
            &[vec![x.clone(), y.clone()], w.clone()].concat(),
        )?;
        for ((p, v), g) in self
            .params
            .iter()
            .zip(&self.velocity)
            .zip(&out.weight_grads)
        {
            let nv = v.value().mul_scalar(0.9)?.add(g)?;
            v.assign(&nv)?;
            p.assign(&p.value().sub(&nv.mul_scalar(0.01)?)?)?;
        }
        Ok(out.value)
    }

    fn infer(&self, x: &Tensor) -> Result<Tensor> {
        let w: Vec<Tensor> = self.params.iter().map(|p| p.value()).collect();
        (self.forward)(&w, x)
    }
}

fn median_ms(mut f: impl FnMut(), min_seconds: f64) -> f64 {
    for _ in 0..3 {
        f();
    }
    let t = Instant::now();
    f();
    let one = t.elapsed().as_secs_f64().max(1e-6);
    let n = ((min_seconds / 5.0) / one).ceil().max(1.0) as usize;
    let mut reps: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_secs_f64() * 1e3 / n as f64
        })
        .collect();
    reps.sort_by(|a, b| a.total_cmp(b));
    reps[2]
}

fn bench(name: &str, forward: Forward, shapes: &[&[usize]], x_shape: &[usize]) {
    let x = Tensor::randn(x_shape, DType::F32, Some(9)).unwrap();
    let y = Tensor::from_vec(
        (0..x_shape[0]).map(|i| (i % 10) as i32).collect(),
        &[x_shape[0]],
    )
    .unwrap();
    let eager = Net::new(forward, shapes);
    let pynative = median_ms(
        || {
            eager.step(&x, &y).unwrap();
        },
        2.0,
    );
    let graph_net = Arc::new(Net::new(forward, shapes));
    let g2 = graph_net.clone();
    let step = jit(name, move |a: &[Tensor]| Ok(vec![g2.step(&a[0], &a[1])?]));
    let t = Instant::now();
    step.call(&[x.clone(), y.clone()]).unwrap();
    let first = t.elapsed().as_secs_f64() * 1e3;
    let graph = median_ms(
        || {
            step.call(&[x.clone(), y.clone()]).unwrap();
        },
        2.0,
    );
    println!(
        "{name:<14} train  PyNative {pynative:8.3} ms   Graph {graph:8.3} ms   first call {first:7.1} ms (compile {:.1} ms)",
        step.compile_count() as f64 * step.last_compile_ms()
    );
    let infer_eager = median_ms(
        || {
            no_grad(|| eager.infer(&x)).unwrap();
        },
        1.0,
    );
    let gi = graph_net.clone();
    let infer = jit("infer", move |a: &[Tensor]| Ok(vec![gi.infer(&a[0])?]));
    let infer_graph = median_ms(
        || {
            no_grad(|| infer.call(std::slice::from_ref(&x))).unwrap();
        },
        1.0,
    );
    println!("{name:<14} infer  PyNative {infer_eager:8.3} ms   Graph {infer_graph:8.3} ms");
}

/// Graph-mode LeNet step with the profiler recording vs not: its overhead.
fn profiler_overhead() {
    let shapes: [&[usize]; 8] = [
        &[6, 1, 5, 5],
        &[16, 6, 5, 5],
        &[120, 400],
        &[120],
        &[84, 120],
        &[84],
        &[10, 84],
        &[10],
    ];
    let x = Tensor::randn(&[32, 1, 32, 32], DType::F32, Some(9)).unwrap();
    let y = Tensor::from_vec((0..32).map(|i| i % 10).collect::<Vec<i32>>(), &[32]).unwrap();
    let net = Arc::new(Net::new(lenet, &shapes));
    let n2 = net.clone();
    let step = jit("lenet_profiled", move |a: &[Tensor]| {
        Ok(vec![n2.step(&a[0], &a[1])?])
    });
    let (mut off, mut on) = (vec![], vec![]);
    let profiler = spore_core::debug::profiler::Profiler::new(
        std::env::temp_dir().join("spore-bench-profile"),
    );
    // Alternate so that both see the same machine conditions.
    for _ in 0..3 {
        off.push(median_ms(
            || {
                step.call(&[x.clone(), y.clone()]).unwrap();
            },
            1.0,
        ));
        profiler.start();
        on.push(median_ms(
            || {
                step.call(&[x.clone(), y.clone()]).unwrap();
            },
            1.0,
        ));
        profiler.stop();
    }
    off.sort_by(|a, b| a.total_cmp(b));
    on.sort_by(|a, b| a.total_cmp(b));
    println!(
        "lenet b32 Graph step: profiler off {:.3} ms, on {:.3} ms ({:+.1}%)",
        off[1],
        on[1],
        100.0 * (on[1] / off[1] - 1.0)
    );
}

fn main() {
    rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build_global()
        .ok();
    bench(
        "lenet b32",
        lenet,
        &[
            &[6, 1, 5, 5],
            &[16, 6, 5, 5],
            &[120, 400],
            &[120],
            &[84, 120],
            &[84],
            &[10, 84],
            &[10],
        ],
        &[32, 1, 32, 32],
    );
    bench(
        "mlp b64",
        mlp,
        &[&[512, 784], &[512], &[512, 512], &[512], &[10, 512], &[10]],
        &[64, 1, 28, 28],
    );
    profiler_overhead();
}
