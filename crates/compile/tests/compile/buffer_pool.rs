//! A compiled graph's buffer pool stays bounded run after run, also with random draws and
//! sub-graphs (whose own pools hand buffers across), and fused ops run in place.

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

/// In-place execution: a fused op writes its result into the buffer of an argument that
/// dies there (here the matmul's and the reduction's results), and the outputs still
/// equal the reference interpreter's on the unoptimised graph, run after run (the second
/// and third runs read recycled, previously overwritten buffers).
#[test]
fn fused_ops_run_in_place_and_equal_the_interpreter() {
    use spore_compile::executor::Executable;
    use spore_compile::pass::{default_passes, run_passes};
    use spore_core::trace::trace;

    let x = Tensor::randn(&[64, 48], DType::F32, Some(3)).unwrap();
    let w = Tensor::randn(&[48, 32], DType::F32, Some(4)).unwrap();
    let types = [x.tensor_type().clone(), w.tensor_type().clone()];
    let graph = trace("in_place", &types, |a| {
        let h = a[0].matmul(&a[1])?;
        // Chain 1: reads h (dying here) once, and a broadcast bias.
        let y = h.mul_scalar(2.0)?.add_scalar(1.0)?.relu()?;
        let s = y.sum(&[1], true)?;
        // Chain 2: reads s (dying here) and y twice-broadcast; y stays alive for the output.
        let z = y.sub(&s.mul_scalar(0.001)?.exp()?.neg()?)?;
        Ok(vec![z, y])
    })
    .unwrap();
    let reference = graph.interpret(&[x.clone(), w.clone()]).unwrap();
    let mut optimised = graph.clone();
    run_passes(&mut optimised, &default_passes(), None).unwrap();
    let mut exe = Executable::new(optimised).unwrap();
    for run in 0..3 {
        let out = exe.run(&[x.clone(), w.clone()]).unwrap();
        for (k, (a, b)) in out.iter().zip(&reference.outputs).enumerate() {
            crate::assert_close(a, b, 1e-5, &format!("run {run}, output {k}"));
        }
    }
    assert!(
        exe.in_place_ops() >= 3,
        "expected the fused chain on the dying matmul result to run in place every run, got {}",
        exe.in_place_ops()
    );
}
