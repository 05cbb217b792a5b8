//! The library call on a traced graph instead of a cell, and the fixed-point arithmetic
//! the int8 code relies on.

use spore_codegen::quant::{Multiplier, QParams};
use spore_codegen::{Options, Target, generate_graph};
use spore_core::trace::trace;
use spore_core::{DType, Tensor, TensorType};

use crate::build::{build, run_benchmark, write_inputs};
use crate::temp_dir;

#[test]
fn a_traced_graph_generates_like_a_cell() {
    let w = Tensor::randn(&[6, 4], DType::F32, Some(1)).unwrap();
    let b = Tensor::randn(&[4], DType::F32, Some(2)).unwrap();
    let f = |x: &[Tensor]| Ok(vec![x[0].matmul(&w)?.add(&b)?.tanh()?.softmax(-1)?]);
    let g = trace("mlp_head", &[TensorType::new(&[2, 6], DType::F32)], f).unwrap();
    let project = generate_graph(g, &Options::new("head", Target::X86)).unwrap();
    let kinds: Vec<&str> = project
        .report
        .kernels
        .iter()
        .map(|(_, k)| k.as_str())
        .collect();
    assert_eq!(kinds[0], "MatMul+BiasAdd");
    let dir = temp_dir("graph");
    project.write_to(&dir).unwrap();
    let bin = build(&dir);
    let x = Tensor::randn(&[2, 6], DType::F32, Some(3)).unwrap();
    write_inputs(&dir.join("x.bin"), &x.to_vec::<f32>().unwrap());
    let (rows, _) = run_benchmark(&bin, &dir.join("x.bin"), 1);
    let expected = f(&[x]).unwrap()[0].to_vec::<f32>().unwrap();
    for (a, e) in rows[0].iter().zip(&expected) {
        assert!((a - e).abs() <= 1e-6, "{a} vs {e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fixed_point_multipliers_match_the_real_product() {
    for real in [1e-6, 3.7e-4, 0.0123, 0.5, 0.999_999, 1.0, 7.25, 1234.5] {
        let m = Multiplier::new(real).unwrap();
        for acc in [-100_000i32, -977, -1, 0, 1, 5_000, 1 << 20] {
            let exact = acc as f64 * real;
            let got = m.apply(acc) as f64;
            // Rounded to the nearest integer, up to the multiplier's 31-bit precision.
            assert!(
                (got - exact).abs() <= 0.5 + exact.abs() * 1e-9 + 1e-9,
                "{acc} * {real}: {got} vs {exact}"
            );
        }
    }
    // A multiplier below 2^-31 rounds every sum to 0 (a pruned channel).
    assert_eq!(Multiplier::new(1e-12).unwrap().apply(1 << 30), 0);
    assert!(Multiplier::new(-1.0).is_err());
    assert!(Multiplier::new(f64::NAN).is_err());
    assert!(Multiplier::new(2f64.powi(31)).is_err());
}

#[test]
fn activation_ranges_keep_zero_exact() {
    for (lo, hi) in [
        (-1.0f32, 3.0f32),
        (0.0, 6.0),
        (-5.0, -1.0),
        (2.0, 9.0),
        (0.0, 0.0),
    ] {
        let q = QParams::from_range(lo, hi);
        let back = (q.quantize(0.0) as i32 - q.zero) as f32 * q.scale;
        assert_eq!(back, 0.0, "range [{lo}, {hi}]: {q:?}");
        // The ends of the range land inside int8 within one step.
        for v in [lo, hi] {
            let r = (q.quantize(v) as i32 - q.zero) as f32 * q.scale;
            assert!((r - v).abs() <= q.scale, "{v} comes back as {r} ({q:?})");
        }
    }
}
