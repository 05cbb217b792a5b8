//! A whole training step (forward, backward, Momentum update) compiled as one graph gives
//! the same losses as eager execution, step by step, for an MLP and a LeNet-sized
//! convolutional network.

use spore_compile::jit;
use spore_core::ops::{Conv2dOptions, Pool2dOptions};
use spore_core::{DType, Parameter, Result, Tensor, value_and_grad};

type Forward = fn(&[Tensor], &Tensor) -> Result<Tensor>;

fn mlp(p: &[Tensor], x: &Tensor) -> Result<Tensor> {
    let h = x.matmul(&p[0].transpose()?)?.add(&p[1])?.relu()?;
    h.matmul(&p[2].transpose()?)?.add(&p[3])
}

fn lenet(p: &[Tensor], x: &Tensor) -> Result<Tensor> {
    let (conv, pool) = (Conv2dOptions::default(), Pool2dOptions::new(2, 2));
    let x = x.conv2d(&p[0], &conv)?.relu()?.max_pool2d(&pool)?;
    let x = x
        .conv2d(&p[1], &conv)?
        .relu()?
        .max_pool2d(&pool)?
        .flatten(1)?;
    let x = x.matmul(&p[2].transpose()?)?.add(&p[3])?.relu()?;
    x.matmul(&p[4].transpose()?)?.add(&p[5])
}

fn params(shapes: &[&[usize]], seed: u64) -> Vec<Parameter> {
    shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Parameter::new(
                Tensor::randn(s, DType::F32, Some(seed + i as u64))
                    .unwrap()
                    .mul_scalar(0.1)
                    .unwrap(),
                &format!("p{i}"),
            )
        })
        .collect()
}

/// One Momentum(0.01, 0.9) step on sparse softmax cross-entropy; returns the loss.
fn train_step(
    forward: Forward,
    ps: &[Parameter],
    vs: &[Parameter],
    x: &Tensor,
    y: &Tensor,
) -> Result<Tensor> {
    let weights: Vec<Tensor> = ps.iter().map(|p| p.value()).collect();
    let loss = move |inp: &[Tensor]| -> Result<Tensor> {
        let w: Vec<Tensor> = inp[2..].to_vec();
        let logits = forward(&w, &inp[0])?;
        logits
            .log_softmax(-1)?
            .mul(&inp[1].one_hot(10, DType::F32)?)?
            .sum(&[-1], false)?
            .mean(&[], false)?
            .neg()
    };
    let args: Vec<Tensor> = [vec![x.clone(), y.clone()], weights.clone()].concat();
    let out = value_and_grad(loss, None, &weights, false)(&args)?;
    for ((p, v), g) in ps.iter().zip(vs).zip(&out.weight_grads) {
        let nv = v.value().mul_scalar(0.9)?.add(g)?;
        v.assign(&nv)?;
        p.assign(&p.value().sub(&nv.mul_scalar(0.01)?)?)?;
    }
    Ok(out.value)
}

fn compare(forward: Forward, shapes: &[&[usize]], x_shape: &[usize], steps: usize) {
    let batches: Vec<(Tensor, Tensor)> = (0..steps)
        .map(|s| {
            let x = Tensor::randn(x_shape, DType::F32, Some(1000 + s as u64)).unwrap();
            let labels: Vec<i32> = (0..x_shape[0])
                .map(|i| ((i * 7 + s * 3) % 10) as i32)
                .collect();
            (x, Tensor::from_vec(labels, &[x_shape[0]]).unwrap())
        })
        .collect();
    let velocities = |ps: &[Parameter]| -> Vec<Parameter> {
        ps.iter()
            .map(|p| Parameter::with_requires_grad(p.stored().zeros_like(), "v", false))
            .collect()
    };
    let (pe, pg) = (params(shapes, 7), params(shapes, 7));
    let (ve, vg) = (velocities(&pe), velocities(&pg));
    let (pgc, vgc) = (pg.clone(), vg.clone());
    let step = jit("train_step", move |a: &[Tensor]| {
        Ok(vec![train_step(forward, &pgc, &vgc, &a[0], &a[1])?])
    });
    for (s, (x, y)) in batches.iter().enumerate() {
        let eager = train_step(forward, &pe, &ve, x, y).unwrap().item().unwrap();
        let graph = step.call(&[x.clone(), y.clone()]).unwrap()[0]
            .item()
            .unwrap();
        assert!(
            (eager - graph).abs() <= 1e-5 * (1.0 + eager.abs()),
            "step {s}: eager {eager} vs graph {graph}"
        );
    }
    assert_eq!(step.compile_count(), 1, "new weights must not recompile");
    for (a, b) in pe.iter().zip(&pg) {
        super::assert_close(&b.stored(), &a.stored(), 1e-4, "final parameters");
    }
    // Steady state allocates no buffers: every kernel output, scratch area and parameter
    // update after the first step came from the graph's pool (the comparisons above show
    // that recycled buffers gave the right numbers).
    let types: Vec<_> = [&batches[0].0, &batches[0].1]
        .iter()
        .map(|t| t.tensor_type().clone())
        .collect();
    let after_all = step.pool_stats_for(&types).expect("compiled");
    let (x, y) = &batches[0];
    step.call(&[x.clone(), y.clone()]).unwrap();
    let after_one_more = step.pool_stats_for(&types).unwrap();
    assert_eq!(
        after_one_more.misses, after_all.misses,
        "a steady-state step allocated: {after_all:?} -> {after_one_more:?}"
    );
    assert!(after_one_more.hits > after_all.hits);
    assert_eq!(
        after_one_more.held_bytes, after_all.held_bytes,
        "the pool grew in steady state"
    );
}

#[test]
fn mlp_training_step_graph_equals_eager_over_50_steps() {
    compare(mlp, &[&[32, 20], &[32], &[10, 32], &[10]], &[16, 20], 50);
}

#[test]
fn lenet_sized_training_step_graph_equals_eager_over_50_steps() {
    compare(
        lenet,
        &[
            &[6, 1, 5, 5],
            &[16, 6, 5, 5],
            &[32, 400],
            &[32],
            &[10, 32],
            &[10],
        ],
        &[8, 1, 32, 32],
        50,
    );
}
