//! GEMM checks: large threaded products, every f32 strategy against an f64 loop, and
//! epilogues against separate passes, and the addend written over in place.

use gemm::Parallelism;
use spore_kernels::matmul::{MatRef, gemm_into};
use spore_kernels::matmul_epilogue::{
    BufferEpilogue, Epilogue, adds_in_place, gemm_epilogue_into, matmul_add_in_place,
    matmul_with_epilogue,
};
use spore_kernels::{Buffer, DType, Layout};

use super::values;

#[test]
fn large_threaded_gemm_with_transposed_operands_matches_naive() {
    let (m, n, k) = (131, 97, 203);
    // a is stored transposed (k x m), b row-major (k x n).
    let a = values(m * k, 1);
    let b = values(k * n, 2);
    let mut c = vec![0.0f64; m * n];
    let threads = rayon::current_num_threads().max(2);
    gemm_into(
        &mut c,
        false,
        m,
        n,
        k,
        &a,
        MatRef {
            offset: 0,
            row_stride: 1,
            col_stride: m as isize,
        },
        &b,
        MatRef {
            offset: 0,
            row_stride: n as isize,
            col_stride: 1,
        },
        Parallelism::Rayon(threads),
    );
    for i in 0..m {
        for j in 0..n {
            let want: f64 = (0..k).map(|p| a[p * m + i] * b[p * n + j]).sum();
            assert!((c[i * n + j] - want).abs() < 1e-10, "({i}, {j})");
        }
    }
}

/// A weight gradient's product (`dYᵀ X`, A transposed, C twice as tall as wide or more)
/// splits its rows among threads, not its columns (`sgemm::blocked::rows_first`; this
/// shape reaches it on 2 and 3 threads): the same bits on 1, 2 and 3 threads, and the
/// values of an f64 loop. The column split gave the same bits too, so this guards the
/// row split's determinism and values, not its choice.
#[test]
fn large_weight_gradient_bits_do_not_depend_on_threads() {
    // A (312K values) too large to be packed once for all parts.
    let (m, n, k) = (600, 120, 520);
    let a: Vec<f32> = values(m * k, 3).iter().map(|&v| v as f32).collect();
    let b: Vec<f32> = values(k * n, 4).iter().map(|&v| v as f32).collect();
    let ma = MatRef {
        offset: 0,
        row_stride: 1,
        col_stride: m as isize,
    };
    let mb = MatRef {
        offset: 0,
        row_stride: n as isize,
        col_stride: 1,
    };
    let on = |threads: usize| {
        let mut c = vec![0.0f32; m * n];
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let par = if threads > 1 {
            Parallelism::Rayon(threads)
        } else {
            Parallelism::None
        };
        pool.install(|| gemm_into(&mut c, false, m, n, k, &a, ma, &b, mb, par));
        c
    };
    let one = on(1);
    assert_eq!(one, on(2), "two threads");
    assert_eq!(one, on(3), "three threads");
    for i in 0..m {
        for j in 0..n {
            let want: f64 = (0..k)
                .map(|p| f64::from(a[p * m + i]) * f64::from(b[p * n + j]))
                .sum();
            let got = f64::from(one[i * n + j]);
            assert!(
                (got - want).abs() < 1e-4 * (1.0 + want.abs()),
                "({i}, {j}): {got} vs {want}"
            );
        }
    }
}

/// A `rows x cols` operand stored row-major, or column-major when `transposed`.
fn matrix(transposed: bool, rows: usize, cols: usize) -> MatRef {
    let (row_stride, col_stride) = if transposed { (1, rows) } else { (cols, 1) };
    MatRef {
        offset: 0,
        row_stride: row_stride as isize,
        col_stride: col_stride as isize,
    }
}

/// A product's epilogue in the tiles (`+ beta * D`; `+ bias` per column then ReLU; a
/// mask) equals the product followed by separate passes bit for bit, under every
/// strategy (dot-product: 40 rows with `Bᵀ`; thin: 5-16 rows; blocked: 19 rows and
/// more), with edge tiles, one or several depth blocks (the epilogue joins only after the
/// last), and one or two threads. The bias holds a NaN and signed zeros, which ReLU maps
/// to 0; the mask holds NaN, -0 and +0 (none of them positive) besides its values.
#[test]
fn f32_gemm_epilogues_equal_separate_passes_bit_for_bit() {
    let shapes = [
        (5, 17, 3),
        (16, 25, 784),
        (19, 35, 300),
        (40, 30, 784),
        // Dot kernel split by rows (3 column blocks, 8 row tiles), ending in two 2-row
        // tiles.
        (22, 10, 64),
        (64, 50, 1100),
        (150, 110, 64),
        (300, 40, 700),
    ];
    for (case, &(m, n, k)) in shapes.iter().enumerate() {
        let f32s = |n: usize, seed: u64| -> Vec<f32> {
            values(n, seed).iter().map(|&v| v as f32).collect()
        };
        let (a, b, d) = (
            f32s(m * k, 40 + case as u64),
            f32s(k * n, 50 + case as u64),
            f32s(m * n, 60 + case as u64),
        );
        let mut bias = f32s(n, 70 + case as u64);
        bias[0] = f32::NAN;
        if n > 2 {
            bias[1] = -0.0;
            bias[2] = 0.0;
        }
        let mut mask = f32s(m * n, 80 + case as u64);
        mask[0] = f32::NAN;
        mask[1] = -0.0;
        mask[2] = 0.0;
        let moment = Epilogue {
            addend: Some((&d[..], 0.9)),
            bias: None,
            relu: false,
            mask: None,
        };
        let dense = Epilogue {
            addend: None,
            bias: Some(&bias[..]),
            relu: true,
            mask: None,
        };
        let relu_grad = Epilogue {
            addend: None,
            bias: None,
            relu: false,
            mask: Some(&mask[..]),
        };
        for (ta, tb, threads) in [(false, false, 1), (true, false, 2), (false, true, 2)] {
            let (ma, mb) = (matrix(ta, m, k), matrix(tb, k, n));
            let par = if threads > 1 {
                Parallelism::Rayon(threads)
            } else {
                Parallelism::None
            };
            let mut product = vec![f32::NAN; m * n];
            gemm_into(&mut product, false, m, n, k, &a, ma, &b, mb, par);
            let plus: Vec<f32> = product.iter().zip(&d).map(|(p, d)| p + 0.9 * d).collect();
            let relu = |x: f32| if x > 0.0 { x } else { 0.0 };
            let biased: Vec<f32> = (0..m * n).map(|i| relu(product[i] + bias[i % n])).collect();
            let masked: Vec<f32> = (0..m * n)
                .map(|i| if mask[i] > 0.0 { product[i] } else { 0.0 })
                .collect();
            for (epilogue, want, what) in [
                (&moment, &plus, "addend"),
                (&dense, &biased, "bias+relu"),
                (&relu_grad, &masked, "mask"),
            ] {
                let mut got = vec![f32::NAN; m * n];
                gemm_epilogue_into(&mut got, epilogue, m, n, k, &a, ma, &b, mb, par);
                for (i, (g, w)) in got.iter().zip(want).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        w.to_bits(),
                        "{what}: {m}x{n}x{k} ta={ta} tb={tb} threads={threads} at {i}: {g} vs {w}"
                    );
                }
            }
        }
    }
}

/// `C = A · B + beta · C` written over its addend equals the product with a separate
/// addend bit for bit: in the tiles where `adds_in_place` says so (thin and blocked
/// strategies, one depth block, which these shapes must reach), through a copy of the
/// addend elsewhere (dot kernel, several depth blocks, f64). Wrong sizes are errors that
/// leave the addend as it was. Below AVX2 (`SPORE_MAX_ISA=baseline`) every case copies.
#[test]
fn addend_written_over_in_place_equals_a_separate_addend() {
    let tiles_run = spore_kernels::isa::allows(spore_kernels::isa::Isa::Avx2);
    // (m, n, k, A transposed, expected in the tiles)
    let cases = [
        (5, 17, 3, true, true),      // thin, edge tiles
        (150, 110, 64, true, true),  // blocked, a weight gradient's shape
        (512, 300, 64, true, true),  // blocked, several row blocks
        (19, 35, 300, false, true),  // blocked, one merged depth block
        (40, 30, 784, false, false), // three depth blocks: copied
        (40, 30, 784, true, false),  // the same, A transposed
    ];
    for (case, &(m, n, k, ta, direct)) in cases.iter().enumerate() {
        let buffer = |len: usize, seed: u64| {
            Buffer::F32(values(len, seed).iter().map(|&v| v as f32).collect())
        };
        let (a, b, d) = (
            buffer(m * k, 90 + case as u64),
            buffer(k * n, 100 + case as u64),
            buffer(m * n, 110 + case as u64),
        );
        let la = if ta {
            Layout::contiguous(&[k, m]).permute(&[1, 0])
        } else {
            Layout::contiguous(&[m, k])
        };
        let lb = Layout::contiguous(&[k, n]);
        assert_eq!(
            adds_in_place(DType::F32, &la, &lb),
            direct && tiles_run,
            "{m}x{n}x{k} ta={ta}"
        );
        let separate = BufferEpilogue {
            addend: Some(((&d, 0), 0.9)),
            ..Default::default()
        };
        let want = matmul_with_epilogue(&a, &la, &b, &lb, &separate).unwrap();
        let mut got = d.clone();
        matmul_add_in_place(&mut got, &a, &la, &b, &lb, 0.9).unwrap();
        assert_eq!(got, want, "{m}x{n}x{k} ta={ta}");
    }
    // The dot kernel's shape (A row-major, B column-major) goes through a copy.
    let (m, n, k) = (16, 20, 64);
    let la = Layout::contiguous(&[m, k]);
    let lb = Layout::contiguous(&[n, k]).permute(&[1, 0]);
    assert!(!adds_in_place(DType::F32, &la, &lb));
    // f64: through a copy, with the same bits as a separate addend.
    let f64s = |len: usize, seed: u64| Buffer::F64(values(len, seed));
    let (a, b, d) = (f64s(m * k, 1), f64s(k * n, 2), f64s(m * n, 3));
    assert!(!adds_in_place(DType::F64, &la, &lb));
    let separate = BufferEpilogue {
        addend: Some(((&d, 0), 0.5)),
        ..Default::default()
    };
    let want = matmul_with_epilogue(&a, &la, &b, &lb, &separate).unwrap();
    let mut got = d.clone();
    matmul_add_in_place(&mut got, &a, &la, &b, &lb, 0.5).unwrap();
    assert_eq!(got, want);
    // An addend of the wrong size or dtype is refused and left unchanged.
    let mut short = f64s(m * n - 1, 4);
    let before = short.clone();
    let err = matmul_add_in_place(&mut short, &a, &la, &b, &lb, 0.5).unwrap_err();
    assert!(err.contains("16 x 20"), "{err}");
    assert_eq!(short, before);
    let mut single = Buffer::F32(vec![0.0; m * n]);
    let err = matmul_add_in_place(&mut single, &a, &la, &b, &lb, 0.5).unwrap_err();
    assert!(err.contains("Float64") && err.contains("Float32"), "{err}");
}

/// Spore's f32 GEMM (dot-product, thin and blocked strategies, packed and in-place
/// operands, edge tiles, depth and column blocks, threads) against an f64 loop, for
/// every combination of transposed operands and with accumulation.
#[test]
fn f32_gemm_strategies_match_naive_for_edge_shapes_and_strides() {
    let shapes = [
        (1, 1, 1),
        (5, 17, 3),
        (6, 16, 256),
        (7, 33, 257),
        (13, 50, 40),
        (16, 25, 784),
        (16, 5, 1100),
        (19, 35, 300),
        (20, 48, 37),
        // Dot kernel beyond 16 rows (with `Bᵀ`), and a depth whose short tail joins the
        // last block (784 = 256 + 256 + 272).
        (40, 30, 784),
        // Dot kernel split by rows (3 column blocks, 8 row tiles), ending in two 2-row
        // tiles.
        (22, 10, 64),
        // Rows 4 KiB apart (with `Bᵀ`): the packed path, not the dot kernel.
        (33, 20, 1024),
        (150, 1100, 20),
        (300, 40, 30),
        // With A transposed on two threads, too large (360K values) to be packed once
        // for all parts: the rows split among the threads, over several depth blocks.
        (600, 48, 600),
        // Enough work for more parts than threads: the dot kernel's columns in 10 parts
        // (with `Bᵀ`), the blocked kernel's in 7, over one A packed up front.
        (64, 100, 784),
    ];
    for (case, &(m, n, k)) in shapes.iter().enumerate() {
        let a64 = values(m * k, 10 + case as u64);
        let b64 = values(k * n, 20 + case as u64);
        let c64 = values(m * n, 30 + case as u64);
        let a: Vec<f32> = a64.iter().map(|&v| v as f32).collect();
        let b: Vec<f32> = b64.iter().map(|&v| v as f32).collect();
        for (ta, tb, accumulate, threads) in [
            (false, false, false, 1),
            (false, true, true, 2),
            (true, false, false, 2),
            (true, true, true, 1),
            (false, true, false, 1),
            (false, false, true, 2),
        ] {
            // Transposed operands are stored column-major; a row-major B is read from
            // the end with a negative row stride, to cover reversed views too.
            let ma = if ta {
                MatRef {
                    offset: 0,
                    row_stride: 1,
                    col_stride: m as isize,
                }
            } else {
                MatRef {
                    offset: 0,
                    row_stride: k as isize,
                    col_stride: 1,
                }
            };
            let mb = if tb {
                MatRef {
                    offset: 0,
                    row_stride: 1,
                    col_stride: k as isize,
                }
            } else if accumulate {
                MatRef {
                    offset: (k - 1) * n,
                    row_stride: -(n as isize),
                    col_stride: 1,
                }
            } else {
                MatRef {
                    offset: 0,
                    row_stride: n as isize,
                    col_stride: 1,
                }
            };
            let at = |i: usize, p: usize| {
                a64[(ma.offset as isize + i as isize * ma.row_stride + p as isize * ma.col_stride)
                    as usize]
            };
            let bt = |p: usize, j: usize| {
                b64[(mb.offset as isize + p as isize * mb.row_stride + j as isize * mb.col_stride)
                    as usize]
            };
            let mut c: Vec<f32> = c64.iter().map(|&v| v as f32).collect();
            let par = if threads > 1 {
                Parallelism::Rayon(threads)
            } else {
                Parallelism::None
            };
            gemm_into(&mut c, accumulate, m, n, k, &a, ma, &b, mb, par);
            let tol = 1e-5 * (k as f64).sqrt() * 4.0;
            for i in 0..m {
                for j in 0..n {
                    let base = if accumulate {
                        c64[i * n + j] as f32 as f64
                    } else {
                        0.0
                    };
                    let want = base + (0..k).map(|p| at(i, p) * bt(p, j)).sum::<f64>();
                    let got = c[i * n + j] as f64;
                    assert!(
                        (got - want).abs() <= tol * (1.0 + want.abs()),
                        "{m}x{n}x{k} ta={ta} tb={tb} acc={accumulate} threads={threads} at ({i}, {j}): {got} vs {want}"
                    );
                }
            }
        }
    }
}
