//! Where one LeNet5 inference and training step spend their time, op by op (Spore's own
//! profiler). Run: `cargo run --release --example profile_lenet`

use spore::prelude::*;
use spore_core::debug::profiler::Profiler;

fn main() -> Result<()> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build_global()
        .ok();
    let ws: Vec<Tensor> = [
        &[6usize, 1, 5, 5][..],
        &[16, 6, 5, 5],
        &[120, 400],
        &[120],
        &[84, 120],
        &[84],
        &[10, 84],
        &[10],
    ]
    .iter()
    .enumerate()
    .map(|(i, s)| {
        Tensor::truncated_normal(s, 0.05, DType::F32, Some(i as u64))
            .map(|t| t.with_requires_grad(true))
    })
    .collect::<Result<_>>()?;
    let x = Tensor::randn(&[32, 1, 32, 32], DType::F32, Some(3))?;
    let y = Tensor::from_vec((0..32i32).map(|i| i % 10).collect(), &[32])?;
    let forward = |p: &[Tensor], x: &Tensor| -> Result<Tensor> {
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
    };
    let step = || -> Result<()> {
        let loss = |a: &[Tensor]| {
            forward(&a[2..], &a[0])?
                .log_softmax(-1)?
                .mul(&a[1].one_hot(10, DType::F32)?)?
                .sum(&[-1], false)?
                .mean(&[], false)?
                .neg()
        };
        value_and_grad(loss, None, &ws, false)(&[vec![x.clone(), y.clone()], ws.clone()].concat())?;
        Ok(())
    };
    for _ in 0..20 {
        step()?;
    }
    let p = Profiler::new(std::env::temp_dir().join("spore-profile-lenet"));
    p.start();
    for _ in 0..20 {
        step()?;
        p.step_end(std::time::Duration::ZERO);
    }
    p.stop();
    p.analyse()?;
    Ok(())
}
