//! A whole training step (forward, backward, Momentum update) compiled as one graph gives
//! the same losses as eager execution, step by step, for an MLP and a LeNet-sized
//! convolutional network, with every parameter update written over its parameter.

use spore_compile::jit;
use spore_core::Tensor;

use crate::train_steps::{
    Forward, LENET_INPUT, LENET_SHAPES, MLP_INPUT, MLP_SHAPES, batch, lenet, mlp, params,
    train_step, velocities,
};

fn compare(forward: Forward, shapes: &[&[usize]], x_shape: &[usize], steps: usize) {
    let batches: Vec<(Tensor, Tensor)> = (0..steps).map(|s| batch(x_shape, s)).collect();
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
    // Every weight and velocity took its new value in its own buffer, every step; below
    // AVX2 (`SPORE_MAX_ISA=baseline`) a Dense weight's velocity, a product added to the
    // old velocity, is computed beside it instead (the in-place product needs AVX2).
    let products_in_place = spore_kernels::isa::allows(spore_kernels::isa::Isa::Avx2);
    let dense_weights = shapes.iter().filter(|s| s.len() == 2).count();
    let copied = if products_in_place { 0 } else { dense_weights };
    let types: Vec<_> = [&batches[0].0, &batches[0].1]
        .iter()
        .map(|t| t.tensor_type().clone())
        .collect();
    assert_eq!(
        step.in_place_updates_for(&types),
        Some((2 * shapes.len() - copied) * steps),
        "updates written in place"
    );
    for (a, b) in pe.iter().zip(&pg) {
        super::assert_close(&b.stored(), &a.stored(), 1e-4, "final parameters");
    }
    // Steady state allocates no buffers: every kernel output, scratch area and parameter
    // update after the first step came from the graph's pool (the comparisons above show
    // that recycled buffers gave the right numbers).
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
    compare(mlp, MLP_SHAPES, MLP_INPUT, 50);
}

#[test]
fn lenet_sized_training_step_graph_equals_eager_over_50_steps() {
    compare(lenet, LENET_SHAPES, LENET_INPUT, 50);
}
