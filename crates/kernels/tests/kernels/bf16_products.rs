//! The bfloat16 GEMM against an f64 loop over the same bfloat16 values: both paths (the
//! AVX512_BF16 kernel where this CPU has it, the widened float32 path everywhere), every
//! operand layout, depths that end in odd pairs and merged blocks, thread counts that must
//! not change a single bit, and accumulation into C.

use spore_kernels::bf16;
use spore_kernels::bf16_gemm::{Path, gemm_bf16, native_available};
use spore_kernels::matmul::MatRef;

/// Deterministic bfloat16 values in [-2, 2), every one exactly representable.
fn values(len: usize, seed: u64) -> Vec<bf16> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            bf16::from_f32((s >> 40) as f32 / (1u64 << 22) as f32 - 2.0)
        })
        .collect()
}

/// A `rows x cols` operand at `offset`, stored row-major or (when `transposed`) column-major.
fn matrix(offset: usize, transposed: bool, rows: usize, cols: usize) -> MatRef {
    let (row_stride, col_stride) = if transposed { (1, rows) } else { (cols, 1) };
    MatRef {
        offset,
        row_stride: row_stride as isize,
        col_stride: col_stride as isize,
    }
}

fn at(src: &[bf16], m: MatRef, i: usize, j: usize) -> f64 {
    let idx = m.offset as isize + i as isize * m.row_stride + j as isize * m.col_stride;
    f64::from(src[idx as usize].to_f32())
}

/// Every path this CPU can run; says so loudly when the native one is missing.
fn paths() -> Vec<Path> {
    if native_available() {
        vec![Path::Native, Path::Widened]
    } else {
        eprintln!("NOTE: this CPU has no AVX512_BF16; only the widened float32 path is tested");
        vec![Path::Widened]
    }
}

/// Runs one product on `path` and checks every element against the f64 sum (float32
/// accumulation: error bounded by the depth times float32's epsilon times the sum of the
/// absolute products).
fn check(path: Path, (m, n, k): (usize, usize, usize), ta: bool, tb: bool, threads: usize) {
    let (offset_a, offset_b) = (3, 5);
    let a = values(offset_a + m * k, (m * 31 + k) as u64);
    let b = values(offset_b + k * n, (n * 17 + k) as u64);
    let (ma, mb) = (matrix(offset_a, ta, m, k), matrix(offset_b, tb, k, n));
    let mut c = vec![f32::NAN; m * n];
    gemm_bf16(path, &mut c, false, (m, n, k), (&a, ma), (&b, mb), threads);
    for i in 0..m {
        for j in 0..n {
            let terms = (0..k).map(|p| at(&a, ma, i, p) * at(&b, mb, p, j));
            let (want, size) = terms.fold((0.0, 0.0), |(s, z), t| (s + t, z + t.abs()));
            let tol = (k as f64 + 2.0) * f64::from(f32::EPSILON) * size + 1e-30;
            let got = f64::from(c[i * n + j]);
            assert!(
                (got - want).abs() <= tol,
                "{path:?} {m}x{n}x{k} (ta {ta}, tb {tb}, {threads} threads) at ({i}, {j}): {got} vs {want}"
            );
        }
    }
}

#[test]
fn bf16_products_match_f64_on_every_layout_and_path() {
    let shapes = [
        (1, 1, 1),
        (8, 32, 2),
        (13, 45, 7),     // edge tiles in both directions, an odd depth
        (37, 70, 1601),  // 768 + 833: the short tail joins the last block
        (130, 100, 900), // 768 + 132: two blocks; more rows than one packed A block
        (20, 2100, 33),  // more columns than one packed B block
        (200, 20, 64),   // fewer column panels than threads: rows are split
    ];
    for path in paths() {
        for &shape in &shapes {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                check(path, shape, ta, tb, 2);
            }
        }
    }
}

#[test]
fn bf16_products_are_bitwise_the_same_on_any_thread_count() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(4)
        .build()
        .expect("a rayon pool");
    // A large B (split by column panels) and a small one (by rows, each thread widening
    // B itself on the widened path).
    for (m, n, k) in [(77, 300, 1000), (77, 120, 400)] {
        let (a, b) = (values(m * k, 1), values(k * n, 2));
        let run = |path, threads| {
            let mut c = vec![0.0f32; m * n];
            pool.install(|| {
                gemm_bf16(
                    path,
                    &mut c,
                    false,
                    (m, n, k),
                    (&a, matrix(0, false, m, k)),
                    (&b, matrix(0, true, k, n)),
                    threads,
                )
            });
            c
        };
        for path in paths() {
            let one = run(path, 1);
            for threads in [2, 3, 4] {
                let many = run(path, threads);
                let same = one
                    .iter()
                    .zip(&many)
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(
                    same,
                    "{path:?} {m}x{n}x{k}: {threads} threads differ from one"
                );
            }
        }
    }
}

#[test]
fn bf16_products_accumulate_into_c() {
    let (m, n, k) = (19, 40, 50);
    let (a, b) = (values(m * k, 3), values(k * n, 4));
    let (ma, mb) = (matrix(0, false, m, k), matrix(0, false, k, n));
    for path in paths() {
        let mut product = vec![0.0f32; m * n];
        gemm_bf16(path, &mut product, false, (m, n, k), (&a, ma), (&b, mb), 2);
        let start: Vec<f32> = (0..m * n).map(|i| i as f32 * 0.25).collect();
        let mut c = start.clone();
        gemm_bf16(path, &mut c, true, (m, n, k), (&a, ma), (&b, mb), 2);
        for i in 0..m * n {
            assert_eq!(c[i], start[i] + product[i], "{path:?} at {i}");
        }
    }
}

#[test]
fn bf16_native_products_treat_subnormal_inputs_as_zero() {
    if !native_available() {
        eprintln!(
            "NOTE: this CPU has no AVX512_BF16; the native path's subnormal rule is untested"
        );
        return;
    }
    // The smallest positive bfloat16 subnormal times 2^100: the widened path keeps it,
    // the dot-product instruction reads the subnormal as zero (documented in BENCHMARKS.md
    // and the kernel's docs).
    let tiny = bf16::from_bits(1);
    let big = bf16::from_f32(2f32.powi(100));
    let row = MatRef {
        offset: 0,
        row_stride: 1,
        col_stride: 1,
    };
    let mut native = [1.0f32];
    gemm_bf16(
        Path::Native,
        &mut native,
        false,
        (1, 1, 1),
        (&[tiny], row),
        (&[big], row),
        1,
    );
    let mut widened = [1.0f32];
    gemm_bf16(
        Path::Widened,
        &mut widened,
        false,
        (1, 1, 1),
        (&[tiny], row),
        (&[big], row),
        1,
    );
    assert_eq!(native[0], 0.0);
    assert_eq!(widened[0], tiny.to_f32() * big.to_f32());
}
