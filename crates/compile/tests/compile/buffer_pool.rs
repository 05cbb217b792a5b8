//! A compiled graph's buffer pool stays bounded run after run, also when buffers reach it
//! from kernels that allocate their own outputs (random draws) or from sub-graphs.

use spore_compile::jit;
use spore_core::control::cond;
use spore_core::{DType, Tensor};

/// Runs `f` compiled `runs` times on `x` and returns the pool's held bytes after each run.
fn held_bytes_per_run(
    f: impl Fn(&[Tensor]) -> spore_core::Result<Vec<Tensor>> + Send + Sync + 'static,
    x: &Tensor,
    runs: usize,
) -> Vec<usize> {
    let j = jit("pooled", f);
    let types = vec![x.tensor_type().clone()];
    (0..runs)
        .map(|_| {
            j.call(std::slice::from_ref(x)).unwrap();
            j.pool_stats_for(&types).unwrap().held_bytes
        })
        .collect()
}

#[test]
fn pool_stays_bounded_with_random_draws() {
    let x = Tensor::randn(&[64, 256], DType::F32, Some(1)).unwrap();
    let held = held_bytes_per_run(
        |a| Ok(vec![a[0].dropout(0.5, true)?.relu()?.sum(&[], false)?]),
        &x,
        6,
    );
    assert!(
        held[1..].windows(2).all(|w| w[0] == w[1]),
        "held bytes grew: {held:?}"
    );
}

#[test]
fn pool_stays_bounded_with_sub_graphs() {
    let x = Tensor::randn(&[1024], DType::F32, Some(2)).unwrap();
    let held = held_bytes_per_run(
        |a| {
            let pred = a[0].sum(&[], false)?.greater(&Tensor::scalar(0.0f32))?;
            let y = cond(
                &pred,
                &[a[0].clone()],
                |v| Ok(vec![v[0].mul_scalar(2.0)?]),
                |v| Ok(vec![v[0].mul_scalar(3.0)?]),
            )?;
            Ok(vec![y[0].exp()?.sum(&[], false)?])
        },
        &x,
        6,
    );
    assert!(
        held[1..].windows(2).all(|w| w[0] == w[1]),
        "held bytes grew: {held:?}"
    );
}
