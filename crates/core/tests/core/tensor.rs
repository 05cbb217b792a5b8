//! Tensor basics: creation, views sharing storage, printing, seeded randomness.

use std::sync::Arc;

use spore_core::{DType, Tensor, rng};

#[test]
fn creation_functions() {
    assert_eq!(
        Tensor::zeros(&[2, 2], DType::I64)
            .unwrap()
            .to_vec::<i64>()
            .unwrap(),
        vec![0; 4]
    );
    assert_eq!(
        Tensor::ones(&[3], DType::U8)
            .unwrap()
            .to_vec::<u8>()
            .unwrap(),
        vec![1; 3]
    );
    assert_eq!(
        Tensor::full(&[2], 2.5, DType::F64)
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        vec![2.5, 2.5]
    );
    assert_eq!(
        Tensor::arange(1.0, 2.0, 0.25, DType::F32)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![1.0, 1.25, 1.5, 1.75]
    );
    assert_eq!(
        Tensor::eye(2, DType::Bool)
            .unwrap()
            .to_vec::<bool>()
            .unwrap(),
        vec![true, false, false, true]
    );
    assert_eq!(Tensor::scalar(3i32).shape(), &[] as &[usize]);
    assert_eq!(Tensor::scalar(3i32).item().unwrap(), 3.0);
}

#[test]
fn views_share_storage() {
    let x = Tensor::from_vec((0..24).map(|v| v as f32).collect(), &[2, 3, 4]).unwrap();
    for v in [
        x.reshape(&[6, 4]).unwrap(),
        x.permute(&[2, 0, 1]).unwrap(),
        x.narrow(1, 1, 2).unwrap(),
        x.strided_slice(&[0, 0, 3], &[2, 3, 0], &[1, 2, -1])
            .unwrap(),
        x.narrow(0, 0, 1).unwrap().broadcast_to(&[5, 3, 4]).unwrap(),
    ] {
        assert!(
            Arc::ptr_eq(&v.storage().unwrap().buffer, &x.storage().unwrap().buffer),
            "{v:?} copied its data"
        );
    }
    // A reshape of a non-contiguous view must copy (and still be right).
    let t = x.permute(&[2, 0, 1]).unwrap().reshape(&[4, 6]).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap()[..3], [0.0, 4.0, 8.0]);
}

#[test]
fn display_follows_mindspore() {
    let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    assert_eq!(
        t.to_string(),
        "Tensor(shape=[2, 3], dtype=Float32, value=\n[[ 1.0  2.0  3.0]\n [ 4.0  5.0  6.0]])"
    );
    assert_eq!(
        Tensor::scalar(7i64).to_string(),
        "Tensor(shape=[], dtype=Int64, value=7)"
    );
    let big = Tensor::zeros(&[2000], DType::Bool).unwrap().to_string();
    assert!(big.contains("...") && big.len() < 200, "{big}");
}

#[test]
fn seeded_randomness_is_reproducible_and_thread_count_independent() {
    let a = Tensor::randn(&[1000], DType::F32, Some(5))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let b = pool.install(|| {
        Tensor::randn(&[1000], DType::F32, Some(5))
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    });
    assert_eq!(a, b);
    let mean = a.iter().sum::<f32>() / 1000.0;
    let var = a.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / 1000.0;
    assert!(
        mean.abs() < 0.1 && (var - 1.0).abs() < 0.15,
        "mean {mean} var {var}"
    );
    let t = Tensor::truncated_normal_in(&[5000], 0.0, 0.02, -0.04, 0.04, DType::F64, Some(1))
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert!(t.iter().all(|v| v.abs() <= 0.04));
    let u = Tensor::rand(&[5000], DType::F32, Some(2))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert!(u.iter().all(|v| (0.0..1.0).contains(v)));
    rng::set_seed(9);
    let d1 = Tensor::ones(&[4000], DType::F32)
        .unwrap()
        .dropout(0.25, true)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    rng::set_seed(9);
    let d2 = Tensor::ones(&[4000], DType::F32)
        .unwrap()
        .dropout(0.25, true)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(d1, d2);
    let zeros = d1.iter().filter(|&&v| v == 0.0).count() as f64 / 4000.0;
    assert!((zeros - 0.25).abs() < 0.03, "dropped {zeros}");
    assert!(
        d1.iter()
            .all(|&v| v == 0.0 || (v - 1.0 / 0.75).abs() < 1e-6)
    );
    assert_eq!(
        Tensor::ones(&[3], DType::F32)
            .unwrap()
            .dropout(0.5, false)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![1.0; 3]
    );
}
