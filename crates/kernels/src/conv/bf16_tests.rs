//! The bfloat16 convolutions against the naive f64 loops of [`super::sweep_tests`], on the
//! same random geometries: both paths (the native one where this CPU has AVX512_BF16;
//! it says so loudly where not), every pass, the fused ReLU, and the path choice.

use half::bf16;

use super::bf16::{best_path, filter_gradient, forward, input_gradient, reads_images_in_place};
use super::geometry::ConvGeometry;
use super::plan::{ConvPath, Pass, choose};
use super::sweep_tests::{Rng, draw, reference};
use crate::bf16_gemm::{Path, native_available};

/// Every path this CPU can run; says so loudly when the native one is missing.
fn paths() -> Vec<Path> {
    if native_available() {
        vec![Path::Native, Path::Widened]
    } else {
        eprintln!(
            "NOTE: this CPU has no AVX512_BF16; only the widened bfloat16 convolutions are tested"
        );
        vec![Path::Widened]
    }
}

/// `len` random values, each exactly a bfloat16 (so that the f64 loop sees the same).
fn bf16_values(rng: &mut Rng, len: usize) -> Vec<bf16> {
    rng.values(len).into_iter().map(bf16::from_f32).collect()
}

fn wide(v: &[bf16]) -> Vec<f32> {
    v.iter().map(|v| v.to_f32()).collect()
}

/// Each element within one rounding to bfloat16 of the f64 value (2^-8 of it, twice the
/// bound of a correct rounding) plus float32 accumulation (2e-5 of its terms' magnitude).
fn check(got: &[bf16], (want, scale): &(Vec<f64>, Vec<f64>), what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, ((a, &b), &s)) in got.iter().zip(want).zip(scale).enumerate() {
        let a = f64::from(a.to_f32());
        let err = (a - b).abs();
        assert!(
            err <= b.abs() / 256.0 + 2e-5 * s + 1e-6,
            "{what}: element {i}: {a} against {b} (terms' magnitude {s})"
        );
    }
}

/// Every pass on every path this CPU has against the f64 loops.
fn check_geometry(rng: &mut Rng, g: &ConvGeometry) {
    let x = bf16_values(rng, g.n * g.c * g.h * g.w);
    let w = bf16_values(rng, g.o * g.ckk());
    let dy = bf16_values(rng, g.n * g.o * g.ohw());
    let want = reference(g, &wide(&x), &wide(&w), &wide(&dy));
    for path in paths() {
        let what = |pass: &str| format!("{path:?} {pass} of {g:?}");
        check(&forward(path, &x, &w, g, false), &want.y, &what("forward"));
        check(
            &input_gradient(path, &dy, &w, g),
            &want.dx,
            &what("input gradient"),
        );
        check(
            &filter_gradient(path, &dy, &x, g),
            &want.dw,
            &what("filter gradient"),
        );
    }
}

#[test]
fn bf16_convolutions_match_naive_f64_on_random_geometries() {
    let mut rng = Rng(0xBF16_C0DE_2026_1127);
    let mut cases = 0;
    while cases < 80 {
        let Some(g) = draw(&mut rng) else { continue };
        cases += 1;
        check_geometry(&mut rng, &g);
    }
    // Images read in place (1x1, stride 1, unpadded, wide enough), with and without
    // groups, and the same layer on smaller images, which takes im2col.
    let fixed = [
        ConvGeometry::new([3, 8, 16, 17], [12, 8, 1, 1], [1, 1], [1, 1], [0; 4], 1),
        ConvGeometry::new([2, 8, 16, 16], [6, 4, 1, 1], [1, 1], [1, 1], [0; 4], 2),
        ConvGeometry::new([3, 8, 7, 7], [12, 8, 1, 1], [1, 1], [1, 1], [0; 4], 1),
    ];
    assert!(reads_images_in_place(&fixed[0]) && reads_images_in_place(&fixed[1]));
    assert!(!reads_images_in_place(&fixed[2]));
    for g in &fixed {
        check_geometry(&mut rng, g);
    }
}

#[test]
fn bf16_forward_with_relu_is_the_relu_of_the_forward_pass() {
    let g = ConvGeometry::new([3, 5, 9, 7], [6, 5, 3, 3], [2, 1], [1, 1], [1, 0, 2, 1], 1);
    let mut rng = Rng(7);
    let x = bf16_values(&mut rng, g.n * g.c * g.h * g.w);
    let w = bf16_values(&mut rng, g.o * g.ckk());
    for path in paths() {
        let plain = forward(path, &x, &w, &g, false);
        let fused = forward(path, &x, &w, &g, true);
        assert!(
            plain.iter().any(|v| v.to_f32() < 0.0),
            "no negative output to clip"
        );
        for (p, f) in plain.iter().zip(&fused) {
            assert_eq!(p.to_f32().max(0.0), f.to_f32(), "{path:?}");
        }
    }
}

#[test]
fn bf16_convolutions_leave_winograd_and_small_products_to_float32_and_take_the_rest_natively() {
    let resnet = ConvGeometry::new([4, 64, 16, 16], [64, 64, 3, 3], [1, 1], [1, 1], [1; 4], 1);
    let strided = ConvGeometry::new([4, 64, 16, 16], [128, 64, 3, 3], [2, 2], [1, 1], [1; 4], 1);
    // LeNet's first layer: 6 output channels (a product too small for the native
    // forward pass and weight gradient), 25 input taps (enough for the input gradient).
    let lenet = ConvGeometry::new([4, 1, 12, 12], [6, 1, 5, 5], [1, 1], [1, 1], [0; 4], 1);
    assert_eq!(best_path(&lenet, Pass::Forward), Path::Widened);
    assert_eq!(best_path(&lenet, Pass::FilterGradient), Path::Widened);
    assert_eq!(best_path(&lenet, Pass::InputGradient), Path::best());
    // Winograd layers on small images: ResNet-50's 7x7 ones go native in every pass,
    // ResNet-18's 4x4 ones in all but the weight gradient.
    let r50_l4 = ConvGeometry::new([4, 64, 7, 7], [64, 64, 3, 3], [1, 1], [1, 1], [1; 4], 1);
    let r18_l4 = ConvGeometry::new([16, 64, 4, 4], [64, 64, 3, 3], [1, 1], [1, 1], [1; 4], 1);
    if choose(&r50_l4, Pass::Forward, true) == ConvPath::Winograd {
        assert_eq!(
            choose(&r18_l4, Pass::FilterGradient, true),
            ConvPath::Winograd
        );
        assert_eq!(best_path(&r18_l4, Pass::FilterGradient), Path::Widened);
    }
    for pass in [Pass::Forward, Pass::InputGradient] {
        assert_eq!(best_path(&r18_l4, pass), Path::best(), "{pass:?}");
    }
    for pass in [Pass::Forward, Pass::InputGradient, Pass::FilterGradient] {
        assert_eq!(best_path(&r50_l4, pass), Path::best(), "{pass:?}");
        assert_eq!(best_path(&strided, pass), Path::best(), "{pass:?}");
        if choose(&resnet, Pass::Forward, true) == ConvPath::Winograd {
            assert_eq!(best_path(&resnet, pass), Path::Widened, "{pass:?}");
        }
    }
}
