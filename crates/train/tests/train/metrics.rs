//! Metrics against hand-computed values.

use spore_core::Tensor;
use spore_train::metrics::{
    Accuracy, ConfusionMatrix, Loss, Metric, TopKAccuracy, f1, precision, recall,
};

fn batch() -> (Tensor, Tensor) {
    // Predictions (argmax): 0, 1, 1, 2, 2, 0; labels: 0, 1, 2, 2, 1, 1.
    let p = Tensor::from_vec(
        vec![
            0.9f32, 0.05, 0.05, //
            0.1, 0.8, 0.1, //
            0.2, 0.5, 0.3, //
            0.1, 0.2, 0.7, //
            0.1, 0.4, 0.5, //
            0.6, 0.3, 0.1,
        ],
        &[6, 3],
    )
    .unwrap();
    (
        p,
        Tensor::from_vec(vec![0i32, 1, 2, 2, 1, 1], &[6]).unwrap(),
    )
}

#[test]
fn metrics_match_hand_computed_values() {
    let (p, y) = batch();
    let mut acc = Accuracy::new();
    acc.update(&p, &y, None).unwrap();
    assert!((acc.eval() - 3.0 / 6.0).abs() < 1e-12);
    let mut top2 = TopKAccuracy::new(2);
    top2.update(&p, &y, None).unwrap();
    assert!((top2.eval() - 6.0 / 6.0).abs() < 1e-12, "{}", top2.eval());
    let mut cm = ConfusionMatrix::new(3);
    cm.update(&p, &y, None).unwrap();
    assert_eq!(
        cm.matrix(),
        vec![vec![1, 0, 0], vec![1, 1, 1], vec![0, 1, 1]]
    );
    // Per class: precision 1/2, 1/2, 1/2; recall 1, 1/3, 1/2.
    let mut pr = precision(3);
    pr.update(&p, &y, None).unwrap();
    assert!((pr.eval() - 0.5).abs() < 1e-12);
    let mut rc = recall(3);
    rc.update(&p, &y, None).unwrap();
    assert!((rc.eval() - (1.0 + 1.0 / 3.0 + 0.5) / 3.0).abs() < 1e-12);
    let mut f = f1(3);
    f.update(&p, &y, None).unwrap();
    let f1s = [2.0 * 0.5 / 1.5, 2.0 * (0.5 / 3.0) / (0.5 + 1.0 / 3.0), 0.5];
    assert!((f.eval() - f1s.iter().sum::<f64>() / 3.0).abs() < 1e-12);
    let mut loss = Loss::new();
    loss.update(&p, &y, Some(2.0)).unwrap();
    loss.update(
        &Tensor::ones(&[2, 3], spore_core::DType::F32).unwrap(),
        &Tensor::from_vec(vec![0i32, 0], &[2]).unwrap(),
        Some(1.0),
    )
    .unwrap();
    assert!((loss.eval() - (12.0 + 2.0) / 8.0).abs() < 1e-12);
    acc.clear();
    assert_eq!(acc.eval(), 0.0);
    assert!(
        acc.update(
            &p,
            &Tensor::from_vec(vec![0i32, 5, 0, 0, 0, 0], &[6]).unwrap(),
            None
        )
        .unwrap_err()
        .to_string()
        .contains("label 5")
    );
    assert!(
        acc.update(&p, &Tensor::from_vec(vec![0i32], &[1]).unwrap(), None)
            .is_err()
    );
}
