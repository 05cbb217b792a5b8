//! Runs every row of the op table four ways: f32 and f64 results against the naive
//! reference, inferred type against the actual result, and gradients against central
//! finite differences along a random direction.

use spore_core::op::{Family, OP_TABLE};
use spore_core::{DType, Tensor, value_and_grad};

use super::Lcg;
use super::table::{make_inputs, rows};

fn close(actual: &[f64], expected: &[f64], tol: f64) -> Result<(), String> {
    if actual.len() != expected.len() {
        return Err(format!("length {} vs {}", actual.len(), expected.len()));
    }
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        if (a - e).abs() > tol * (1.0 + e.abs()) {
            return Err(format!("element {i}: got {a}, expected {e}"));
        }
    }
    Ok(())
}

/// The op table itself is enumerated, so a primitive added there without a test row
/// fails here. Custom ops are the user's (`custom.rs` tests the mechanism).
#[test]
fn every_primitive_has_a_row() {
    let names: Vec<&str> = rows().iter().map(|r| r.name).collect();
    let missing: Vec<&str> = OP_TABLE
        .iter()
        .filter(|r| r.family != Family::Custom && !names.contains(&r.name))
        .map(|r| r.name)
        .collect();
    assert!(
        missing.is_empty(),
        "primitives without an op-table row: {missing:?}"
    );
}

#[test]
fn forward_matches_reference_in_f32_and_f64() {
    for (k, row) in rows().iter().enumerate() {
        for (float, tol) in [(DType::F32, 2e-5), (DType::F64, 1e-11)] {
            let (nds, ts) = make_inputs(row, 100 + k as u64, float);
            let out = (row.run)(&ts).unwrap_or_else(|e| panic!("{} ({float}): {e}", row.name));
            let expected = (row.reference)(&nds);
            assert_eq!(
                out.shape(),
                expected.shape.as_slice(),
                "{}: shape",
                row.name
            );
            close(&out.to_f64_vec().unwrap(), &expected.data, tol)
                .unwrap_or_else(|e| panic!("{} ({float}): {e}", row.name));
        }
    }
}

/// Every row in float16 and bfloat16: inputs rounded to the format, computed in float32,
/// each op's result rounded once. The tolerance is a few units in the last place of the
/// format (2^-11 and 2^-8 relative), for the roundings of the ops a row chains.
#[test]
fn forward_matches_reference_in_f16_and_bf16() {
    let mut failures = vec![];
    for (k, row) in rows().iter().enumerate() {
        for (float, tol) in [(DType::F16, 4e-3), (DType::BF16, 3e-2)] {
            let (nds, ts) = make_inputs(row, 100 + k as u64, float);
            let checked = (row.run)(&ts).map_err(|e| e.to_string()).and_then(|out| {
                let want = row.out_dtype.unwrap_or(float);
                if out.dtype() != want {
                    return Err(format!("dtype {} instead of {want}", out.dtype()));
                }
                let expected = (row.reference)(&nds);
                if out.shape() != expected.shape.as_slice() {
                    return Err(format!("shape {:?} vs {:?}", out.shape(), expected.shape));
                }
                close(
                    &out.to_f64_vec().map_err(|e| e.to_string())?,
                    &expected.data,
                    tol,
                )
            });
            if let Err(e) = checked {
                failures.push(format!("{} ({float}): {e}", row.name));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn inferred_type_matches_actual_result() {
    for (k, row) in rows().iter().enumerate() {
        let (_, ts) = make_inputs(row, 200 + k as u64, DType::F32);
        let out = (row.run)(&ts).unwrap();
        let want = row.out_dtype.unwrap_or_else(|| {
            ts.iter()
                .find(|t| t.dtype().is_float())
                .map(|t| t.dtype())
                .unwrap_or(DType::F32)
        });
        assert_eq!(out.dtype(), want, "{}: dtype", row.name);
        assert_eq!(
            out.storage().unwrap().buffer.dtype(),
            out.dtype(),
            "{}: buffer dtype",
            row.name
        );
        assert_eq!(
            out.layout().shape.as_slice(),
            out.shape(),
            "{}: layout shape",
            row.name
        );
        assert_eq!(
            out.to_f64_vec().unwrap().len(),
            out.numel(),
            "{}: element count",
            row.name
        );
    }
}

#[test]
fn gradients_match_finite_differences() {
    let eps = 1e-6;
    for (k, row) in rows().iter().enumerate().filter(|(_, r)| r.grad) {
        let (_, ts) = make_inputs(row, 300 + k as u64, DType::F64);
        let float_pos: Vec<usize> = (0..ts.len())
            .filter(|&i| ts[i].dtype().is_float())
            .collect();
        let mut rng = Lcg(400 + k as u64);
        let out_shape = (row.run)(&ts).unwrap().shape().to_vec();
        let cot = Tensor::from_f64(
            &(0..out_shape.iter().product())
                .map(|_| rng.uniform(-1.0, 1.0))
                .collect::<Vec<_>>(),
            &out_shape,
            DType::F64,
        )
        .unwrap();
        let dirs: Vec<Tensor> = float_pos
            .iter()
            .map(|&i| {
                let v: Vec<f64> = (0..ts[i].numel()).map(|_| rng.uniform(-1.0, 1.0)).collect();
                Tensor::from_f64(&v, ts[i].shape(), DType::F64).unwrap()
            })
            .collect();
        // F(x) = <f(x), cot>
        let f = |x: &[Tensor]| (row.run)(x)?.mul(&cot)?.sum(&[], false);
        let vg = value_and_grad(f, Some(&float_pos), &[], false);
        let grads = vg(&ts)
            .unwrap_or_else(|e| panic!("{}: {e}", row.name))
            .input_grads;
        let analytic: f64 = grads
            .iter()
            .zip(&dirs)
            .map(|(g, d)| g.mul(d).unwrap().sum(&[], false).unwrap().item().unwrap())
            .sum();
        let shifted = |sign: f64| {
            let mut xs = ts.clone();
            for (d, &i) in dirs.iter().zip(&float_pos) {
                xs[i] = ts[i].add(&d.mul_scalar(sign * eps).unwrap()).unwrap();
            }
            f(&xs).unwrap().item().unwrap()
        };
        let numeric = (shifted(1.0) - shifted(-1.0)) / (2.0 * eps);
        assert!(
            (analytic - numeric).abs() <= 1e-6 * (1.0 + numeric.abs()),
            "{}: analytic {analytic} vs numeric {numeric}",
            row.name
        );
    }
}
