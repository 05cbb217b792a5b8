//! A small eager training loop written with the primitive ops and `value_and_grad`.

use spore_core::{DType, Result, Tensor, value_and_grad};

#[test]
fn eager_mlp_training_lowers_the_loss() {
    // Two Gaussian blobs in 4-d; labels 0/1.
    let n = 64;
    let x = Tensor::randn(&[n, 4], DType::F32, Some(11)).unwrap();
    let labels: Vec<i32> = (0..n).map(|i| (i % 2) as i32).collect();
    let shift: Vec<f32> = labels
        .iter()
        .flat_map(|&l| vec![if l == 1 { 1.5 } else { -1.5 }; 4])
        .collect();
    let x = x.add(&Tensor::from_vec(shift, &[n, 4]).unwrap()).unwrap();
    let y = Tensor::from_vec(labels, &[n]).unwrap();

    let mut w1 = Tensor::randn(&[4, 16], DType::F32, Some(1))
        .unwrap()
        .mul_scalar(0.3)
        .unwrap()
        .with_requires_grad(true);
    let mut b1 = Tensor::zeros(&[16], DType::F32)
        .unwrap()
        .with_requires_grad(true);
    let mut w2 = Tensor::randn(&[16, 2], DType::F32, Some(2))
        .unwrap()
        .mul_scalar(0.3)
        .unwrap()
        .with_requires_grad(true);

    let mut losses = vec![];
    for _ in 0..30 {
        let (w1c, b1c, w2c) = (w1.clone(), b1.clone(), w2.clone());
        let loss_fn = move |inp: &[Tensor]| -> Result<Tensor> {
            let h = inp[0].matmul(&w1c)?.add(&b1c)?.relu()?;
            let logits = h.matmul(&w2c)?;
            let onehot = inp[1].one_hot(2, DType::F32)?;
            logits
                .log_softmax(-1)?
                .mul(&onehot)?
                .sum(&[-1], false)?
                .mean(&[], false)?
                .neg()
        };
        let vg = value_and_grad(loss_fn, None, &[w1.clone(), b1.clone(), w2.clone()], false);
        let out = vg(&[x.clone(), y.clone()]).unwrap();
        losses.push(out.value.item().unwrap());
        let step = |p: &Tensor, g: &Tensor| {
            p.sub(&g.mul_scalar(0.5).unwrap())
                .unwrap()
                .detach()
                .with_requires_grad(true)
        };
        w1 = step(&w1, &out.weight_grads[0]);
        b1 = step(&b1, &out.weight_grads[1]);
        w2 = step(&w2, &out.weight_grads[2]);
    }
    assert!(
        losses[29] < 0.5 * losses[0],
        "loss did not fall enough: {losses:?}"
    );
    assert!(losses[29] < 0.1, "final loss {}", losses[29]);
}
