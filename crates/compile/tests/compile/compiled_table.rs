//! Every op-table row traced and compiled must equal the eager result; gradients computed
//! inside compiled graphs must equal eager gradients.

use spore_compile::jit;
use spore_core::{DType, Tensor, value_and_grad};

use super::table::{make_inputs, rows};
use super::{assert_close, bits};

#[test]
fn every_row_compiled_equals_eager() {
    for (k, row) in rows().into_iter().enumerate() {
        let (_, ts) = make_inputs(&row, 500 + k as u64, DType::F32);
        let eager = (row.run)(&ts).unwrap();
        let name = row.name;
        let run = row.run;
        let f = jit(name, move |x: &[Tensor]| Ok(vec![run(x)?]));
        let compiled = f.call(&ts).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_close(&compiled[0], &eager, 1e-6, name);
        // The second run takes its buffers from the pool the first run filled (recycled
        // vectors hold stale values): a kernel that relied on fresh zeros would differ.
        let again = f.call(&ts).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_close(&again[0], &eager, 1e-6, name);
    }
}

/// float16 and bfloat16 rows compiled round every op as eager mode does (a fused 16-bit
/// loop rounds each step), so the results are equal bit for bit.
#[test]
fn every_row_in_f16_and_bf16_compiled_equals_eager_exactly() {
    for (k, row) in rows().into_iter().enumerate() {
        let inputs: Vec<_> = [DType::F16, DType::BF16]
            .into_iter()
            .map(|float| (float, make_inputs(&row, 700 + k as u64, float).1))
            .collect();
        let run = std::sync::Arc::new(row.run);
        for (float, ts) in inputs {
            let eager = run(&ts).unwrap();
            let name = row.name;
            let run = run.clone();
            let f = jit(name, move |x: &[Tensor]| Ok(vec![run(x)?]));
            let compiled = f
                .call(&ts)
                .unwrap_or_else(|e| panic!("{name} ({float}): {e}"));
            assert_eq!(compiled[0].dtype(), eager.dtype(), "{name} ({float})");
            assert_eq!(bits(&compiled[0]), bits(&eager), "{name} ({float})");
        }
    }
}

#[test]
fn compiled_gradients_equal_eager_gradients() {
    for (k, row) in rows().into_iter().enumerate().filter(|(_, r)| r.grad) {
        let (_, ts) = make_inputs(&row, 600 + k as u64, DType::F64);
        let float_pos: Vec<usize> = (0..ts.len())
            .filter(|&i| ts[i].dtype().is_float())
            .collect();
        let run = std::sync::Arc::new(row.run);
        let loss = {
            let run = run.clone();
            move |x: &[Tensor]| run(x)?.square()?.sum(&[], false)
        };
        let eager = value_and_grad(loss.clone(), Some(&float_pos), &[], false)(&ts).unwrap();
        let pos = float_pos.clone();
        let f = jit(row.name, move |x: &[Tensor]| {
            let out = value_and_grad(loss.clone(), Some(&pos), &[], false)(x)?;
            Ok([vec![out.value], out.input_grads].concat())
        });
        for _run in 0..2 {
            // Twice: the second run reuses pooled buffers (see the test above).
            let compiled = f.call(&ts).unwrap_or_else(|e| panic!("{}: {e}", row.name));
            assert_close(&compiled[0], &eager.value, 1e-9, row.name);
            for (c, e) in compiled[1..].iter().zip(&eager.input_grads) {
                assert_close(c, e, 1e-9, row.name);
            }
        }
    }
}

/// A chain of 16-bit elementwise ops (broadcasting, a product read by a sum, a comparison
/// and a selection, an exponential) compiles into fused loops, which round each step
/// to 16 bits and so equals eager mode bit for bit.
#[test]
fn a_16_bit_elementwise_chain_fuses_and_equals_eager_exactly() {
    let chain = |x: &[Tensor]| -> spore_core::Result<Tensor> {
        let (a, b, c) = (&x[0], &x[1], &x[2]);
        let s = a.mul(b)?.add(c)?; // b broadcast along the rows
        let e = s.neg()?.exp()?.add(a)?;
        let positive = s.greater(&Tensor::zeros(&[], s.dtype())?)?;
        Tensor::select(&positive, &e, &s.mul(&s)?)?.sub(b)
    };
    for float in [DType::F16, DType::BF16] {
        let ts: Vec<Tensor> = [(vec![64, 48], 1), (vec![48], 2), (vec![64, 48], 3)]
            .iter()
            .map(|(shape, seed)| Tensor::randn(shape, float, Some(*seed)).unwrap())
            .collect();
        let eager = chain(&ts).unwrap();
        let f = jit("half_chain", move |x: &[Tensor]| Ok(vec![chain(x)?]));
        let compiled = f.call(&ts).unwrap();
        assert_eq!(compiled[0].dtype(), float);
        assert_eq!(bits(&compiled[0]), bits(&eager), "{float}");
        let types: Vec<_> = ts.iter().map(|t| t.tensor_type().clone()).collect();
        let ir = f.graph_for(&types).unwrap().to_ir();
        // Two loops: `s` is read by several ops, so it is computed once and stored.
        assert_eq!(ir.matches("FusedElementwise").count(), 2, "{float}: {ir}");
        assert_eq!(ir.matches(" ops").count(), 1, "{float}: {ir}");
        assert!(
            ir.contains("2 ops"),
            "{float}: every elementwise op fused: {ir}"
        );
    }
}

/// Casts from 16 bits to float32 read only by float32 loops (amp O2's unscale, and a
/// sum over a widened gradient) disappear into the loops, which widen their 16-bit inputs as they load
/// them: the results equal eager mode's bit for bit.
#[test]
fn widening_casts_are_read_inside_loops_and_equal_eager_exactly() {
    let step = |x: &[Tensor]| -> spore_core::Result<Vec<Tensor>> {
        let (g, scale) = (&x[0], &x[1]);
        let unscaled = g.cast(DType::F32)?.div(scale)?;
        let overflow = g.cast(DType::F32)?.mul_scalar(0.0)?.sum(&[], false)?;
        let chain = g.cast(DType::F32)?.exp()?.add(&unscaled)?;
        Ok(vec![unscaled, overflow, chain])
    };
    for float in [DType::F16, DType::BF16] {
        let g = Tensor::randn(&[37, 129], DType::F32, Some(4))
            .unwrap()
            .cast(float)
            .unwrap();
        let ts = vec![g, Tensor::scalar(1024.0f32)];
        let eager = step(&ts).unwrap();
        let f = jit("widening", move |x: &[Tensor]| step(x));
        let compiled = f.call(&ts).unwrap();
        for (c, e) in compiled.iter().zip(&eager) {
            assert_eq!(bits(c), bits(e), "{float}");
        }
        let types: Vec<_> = ts.iter().map(|t| t.tensor_type().clone()).collect();
        let ir = f.graph_for(&types).unwrap().to_ir();
        assert!(!ir.contains("= Cast("), "{float}: {ir}");
    }
}

/// Casts from float32 to 16 bits of values only they read (amp O2's BatchNorm outputs)
/// become the loops that compute those values, rounding each chunk as they store it: the
/// results equal eager mode's bit for bit, NaN, infinities and values beyond the 16-bit
/// range included; a value that another op reads as well keeps its cast.
#[test]
fn narrowing_casts_are_stored_by_loops_and_equal_eager_exactly() {
    let step = |x: &[Tensor], half: DType| -> spore_core::Result<Vec<Tensor>> {
        let (a, b) = (&x[0], &x[1]);
        let loop_out = a.exp()?.mul(b)?.add_scalar(1.0)?.cast(half)?;
        let single = a.mul(b)?.cast(half)?;
        let shared = a.sub(b)?;
        let kept = shared.cast(half)?;
        Ok(vec![loop_out, single, kept, shared.sum(&[], false)?])
    };
    let mut a = Tensor::randn(&[37, 129], DType::F32, Some(5))
        .unwrap()
        .mul_scalar(8.0)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    a[..6].copy_from_slice(&[
        f32::NAN,
        f32::INFINITY,
        -f32::INFINITY,
        1e30,
        -1e-30,
        70000.0,
    ]);
    let a = Tensor::from_vec(a, &[37, 129]).unwrap();
    let b = Tensor::randn(&[129], DType::F32, Some(6)).unwrap();
    for half in [DType::F16, DType::BF16] {
        let ts = vec![a.clone(), b.clone()];
        let eager = step(&ts, half).unwrap();
        let f = jit("narrowing", move |x: &[Tensor]| step(x, half));
        let compiled = f.call(&ts).unwrap();
        for (k, (c, e)) in compiled.iter().zip(&eager).enumerate() {
            assert_eq!(c.dtype(), e.dtype(), "{half} output {k}");
            assert_eq!(bits(c), bits(e), "{half} output {k}");
        }
        let types: Vec<_> = ts.iter().map(|t| t.tensor_type().clone()).collect();
        let ir = f.graph_for(&types).unwrap().to_ir();
        assert_eq!(
            ir.matches("= Cast(").count(),
            1,
            "{half}: only the shared value's cast stays: {ir}"
        );
    }
}

/// A sum of a 16-bit value widened to float32 (amp O2's BatchNorm mean) reads the 16-bit
/// value itself, with no float32 copy: over adjacent axes it becomes a fused sum, equal to
/// eager mode's sum within float32 rounding (the fused sum adds in its own order).
#[test]
fn sums_of_widening_casts_read_the_16_bit_values() {
    let step = |x: &[Tensor]| -> spore_core::Result<Vec<Tensor>> {
        let wide = x[0].cast(DType::F32)?;
        Ok(vec![wide.sum(&[0, 2, 3], true)?, wide.sum(&[], false)?])
    };
    for float in [DType::F16, DType::BF16] {
        let x = Tensor::randn(&[6, 5, 17, 19], DType::F32, Some(8))
            .unwrap()
            .cast(float)
            .unwrap();
        let ts = vec![x];
        let eager = step(&ts).unwrap();
        let f = jit("widened_sum", move |x: &[Tensor]| step(x));
        let compiled = f.call(&ts).unwrap();
        for (c, e) in compiled.iter().zip(&eager) {
            assert_eq!((c.dtype(), c.shape()), (e.dtype(), e.shape()), "{float}");
            let (c, e) = (c.to_vec::<f32>().unwrap(), e.to_vec::<f32>().unwrap());
            for (c, e) in c.iter().zip(&e) {
                assert!(
                    (c - e).abs() <= 1e-5 * (1.0 + e.abs()),
                    "{float}: {c} against {e}"
                );
            }
        }
        let types: Vec<_> = ts.iter().map(|t| t.tensor_type().clone()).collect();
        let ir = f.graph_for(&types).unwrap().to_ir();
        assert!(
            !ir.contains("= Cast(") && ir.contains("FusedReduceSum"),
            "{float}: {ir}"
        );
    }
}
