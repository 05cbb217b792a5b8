//! Every op-table row traced and compiled must equal the eager result; gradients computed
//! inside compiled graphs must equal eager gradients.

use spore_compile::jit;
use spore_core::{DType, Tensor, value_and_grad};

use super::assert_close;
use super::table::{make_inputs, rows};

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

/// float16 and bfloat16 rows compiled round every op as eager mode does (the compiler
/// fuses no 16-bit ops), so the results are equal bit for bit.
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
            let bits = |t: &Tensor| {
                t.to_f64_vec()
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>()
            };
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
