//! The 12x16 AVX-512 kernel (two row tiles per call) gives the 6x16 kernel's products bit
//! for bit, epilogues included: both sum each element's depth in the same order with
//! fused multiply-adds. The products are computed before and after forcing it (it is off
//! unless `SPORE_AVX512_GEMM=on`), and both against f64 loops.

use gemm::Parallelism;
use spore_kernels::matmul::{MatRef, force_avx512_gemm_pairs, gemm_into};
use spore_kernels::matmul_epilogue::{Epilogue, gemm_epilogue_into};

use super::values;

/// A row-major operand of `cols` columns.
fn row_major(cols: usize) -> MatRef {
    MatRef {
        offset: 0,
        row_stride: cols as isize,
        col_stride: 1,
    }
}

/// Each shape's product and its bias+ReLU epilogue, on one and two threads.
fn products(shapes: &[(usize, usize, usize)]) -> Vec<Vec<f32>> {
    let mut out = Vec::new();
    for (case, &(m, n, k)) in shapes.iter().enumerate() {
        let f32s = |len: usize, seed: u64| -> Vec<f32> {
            values(len, seed).iter().map(|&v| v as f32).collect()
        };
        let (a, b, bias) = (f32s(m * k, 1 + case as u64), f32s(k * n, 9), f32s(n, 3));
        for par in [Parallelism::None, Parallelism::Rayon(2)] {
            let mut c = vec![f32::NAN; m * n];
            gemm_into(
                &mut c,
                false,
                m,
                n,
                k,
                &a,
                row_major(k),
                &b,
                row_major(n),
                par,
            );
            // Against float64, so that a wrong kernel cannot pass by being consistently wrong.
            for i in (0..m).step_by(7) {
                for j in 0..n {
                    let want: f64 = (0..k)
                        .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                        .sum();
                    let got = c[i * n + j] as f64;
                    assert!(
                        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "{m}x{n}x{k} at ({i}, {j}): {got} against {want}"
                    );
                }
            }
            out.push(c);
            let dense = Epilogue {
                addend: None,
                bias: Some(&bias[..]),
                relu: true,
                mask: None,
            };
            let mut e = vec![f32::NAN; m * n];
            gemm_epilogue_into(
                &mut e,
                &dense,
                m,
                n,
                k,
                &a,
                row_major(k),
                &b,
                row_major(n),
                par,
            );
            out.push(e);
        }
    }
    out
}

#[test]
fn twelve_row_kernel_equals_the_six_row_kernel_bit_for_bit() {
    // Pairs and a lone tile (30 rows), edge columns (40), three depth blocks (600); a
    // tall product split among threads; a product with rows past a whole pair (150); two
    // pairs exactly (24 rows, past the thin path's 18).
    let shapes = [(30, 40, 600), (300, 48, 700), (150, 110, 64), (24, 32, 40)];
    if std::env::var("SPORE_AVX512_GEMM").as_deref() == Ok("on") {
        eprintln!(
            "NOTE: SPORE_AVX512_GEMM=on: both runs take the 12x16 kernel; only f64 checks it"
        );
    }
    let before = products(&shapes);
    if !force_avx512_gemm_pairs() {
        eprintln!(
            "NOTE: this CPU has no AVX-512: the 12x16 kernel cannot run here and was not checked"
        );
        return;
    }
    let after = products(&shapes);
    for (i, (x, y)) in before.iter().zip(&after).enumerate() {
        for (j, (p, q)) in x.iter().zip(y).enumerate() {
            assert_eq!(
                p.to_bits(),
                q.to_bits(),
                "product {i}, element {j}: {p} against {q}"
            );
        }
    }
}
