use std::arch::x86_64::*;

use super::*;

/// Input transform `Bᵀ` (applied to the rows, then the columns, of a 6x6 input tile).
const BT: [[f32; ALPHA]; ALPHA] = [
    [4.0, 0.0, -5.0, 0.0, 1.0, 0.0],
    [0.0, -4.0, -4.0, 1.0, 1.0, 0.0],
    [0.0, 4.0, -4.0, -1.0, 1.0, 0.0],
    [0.0, -2.0, -1.0, 2.0, 1.0, 0.0],
    [0.0, 2.0, -1.0, -2.0, 1.0, 0.0],
    [0.0, 4.0, 0.0, -5.0, 0.0, 1.0],
];

/// Output transform `Aᵀ` (6 positions to 4 outputs).
const AT: [[f32; ALPHA]; M] = [
    [1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
    [0.0, 1.0, -1.0, 2.0, -2.0, 0.0],
    [0.0, 1.0, 1.0, 4.0, 4.0, 0.0],
    [0.0, 1.0, -1.0, 8.0, -8.0, 1.0],
];

/// Whether Winograd runs on this machine; if not, says loudly that `test` checks nothing
/// here (no AVX2/FMA, or `SPORE_WINOGRAD=off`: convolutions then take the direct form).
fn runs_here(test: &str) -> bool {
    if !crate::conv::plan::winograd_enabled() {
        eprintln!(
            "SKIPPED {test}: Winograd is off on this machine (it needs AVX2 and FMA, and \
             SPORE_WINOGRAD unset); nothing to check"
        );
    }
    crate::conv::plan::winograd_enabled()
}

/// Pseudo-random values in [-1, 1), reproducible.
fn values(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn lanes(v: __m256) -> [f32; 8] {
    // SAFETY: `__m256` and `[f32; 8]` have the same size.
    unsafe { std::mem::transmute(v) }
}

/// The vector transforms equal their matrices: `bt` is `Bᵀ`, `at` is `Aᵀ`, and `a_t`
/// is `A` (the transpose of `Aᵀ`), lane by lane, against f64 products.
#[test]
fn vector_transforms_equal_the_matrices_of_lavin_and_gray() {
    if !runs_here("vector_transforms_equal_the_matrices_of_lavin_and_gray") {
        return;
    }
    let input: [__m256; ALPHA] =
        std::array::from_fn(|i| unsafe { _mm256_loadu_ps(values(8, i as u64).as_ptr()) });
    let check = |got: &[__m256], rows: usize, coef: &dyn Fn(usize, usize) -> f32, n: usize| {
        for (r, &v) in got.iter().enumerate().take(rows) {
            for l in 0..8 {
                let want: f64 = (0..n)
                    .map(|k| coef(r, k) as f64 * lanes(input[k])[l] as f64)
                    .sum();
                let got = lanes(v)[l] as f64;
                assert!(
                    (got - want).abs() < 1e-5,
                    "row {r} lane {l}: {got} vs {want}"
                );
            }
        }
    };
    // SAFETY: `winograd_enabled` checked AVX2 and FMA.
    let (b, a, adj) = unsafe {
        (
            simd::bt(input),
            simd::at(input),
            simd::a_t([input[0], input[1], input[2], input[3]]),
        )
    };
    check(&b, ALPHA, &|r, k| BT[r][k], ALPHA);
    check(&a, M, &|r, k| AT[r][k], ALPHA);
    check(&adj, ALPHA, &|r, k| AT[k][r], M);
}

/// Naive f64 forward pass and weight gradient of a "same" 3x3 convolution.
fn naive(x: &[f32], w: &[f32], dy: &[f32], g: &ConvGeometry) -> (Vec<f64>, Vec<f64>) {
    let (n, c, o, h, wd) = (g.n, g.c, g.o, g.h, g.w);
    let mut y = vec![0.0; n * o * h * wd];
    let mut dw = vec![0.0; o * c * 9];
    for (s, oc, i, j) in (0..n).flat_map(|s| {
        (0..o).flat_map(move |oc| (0..h).flat_map(move |i| (0..wd).map(move |j| (s, oc, i, j))))
    }) {
        let yi = ((s * o + oc) * h + i) * wd + j;
        for (ch, k, l) in
            (0..c).flat_map(|ch| (0..3).flat_map(move |k| (0..3).map(move |l| (ch, k, l))))
        {
            let (Some(r), Some(q)) = ((i + k).checked_sub(1), (j + l).checked_sub(1)) else {
                continue;
            };
            if r >= h || q >= wd {
                continue;
            }
            let xv = x[((s * c + ch) * h + r) * wd + q] as f64;
            let wi = (oc * c + ch) * 9 + k * 3 + l;
            y[yi] += xv * w[wi] as f64;
            dw[wi] += xv * dy[yi] as f64;
        }
    }
    (y, dw)
}

/// Both kernels equal the naive loops within f32 rounding, over shapes that split the
/// batch into blocks (the last one short), put tiles of several images in one vector,
/// leave a partial last vector, have rows of tiles longer than a vector, and sides that
/// end in partial tiles; no output is left unwritten and nothing past it is written.
#[test]
fn forward_and_filter_gradient_match_naive_f64_across_blocks() {
    if !runs_here("forward_and_filter_gradient_match_naive_f64_across_blocks") {
        return;
    }
    // (batch, channels in, out, height, width, bytes per block, images per block)
    let cases = [
        (3, 17, 19, 8, 12, 1, 1),       // 6 tiles per image
        (5, 16, 16, 4, 4, 1 << 20, 5),  // 5 tiles, 3 lanes of padding
        (4, 16, 20, 4, 36, 100_000, 2), // 9 tiles per row
        (7, 24, 16, 12, 8, 120_000, 3), // blocks of 3, 3 and 1 images
        // two depth blocks of packed filters (256 and 74 channels)
        (2, 330, 17, 4, 4, 1 << 20, 2),
        // partial tiles: ResNet-50's 7x7 and 14x14, sides of 1, 5, 9 and 38
        (3, 16, 18, 7, 7, 1 << 20, 3),
        (2, 16, 16, 14, 14, 1 << 20, 2),
        (4, 17, 16, 5, 9, 30_000, 1),
        (2, 16, 16, 1, 1, 1 << 20, 2),
        (2, 16, 20, 6, 38, 1 << 20, 2),
        (2, 16, 16, 2, 3, 1 << 20, 2),
        (3, 17, 16, 3, 2, 1 << 20, 3),
    ];
    for (n, c, o, h, w, block_bytes, per_block) in cases {
        let g = ConvGeometry::new([n, c, h, w], [o, c, 3, 3], [1, 1], [1, 1], [1; 4], 1);
        assert!(crate::conv::plan::winograd_applies(&g), "{g:?}");
        assert_eq!(plan::images_per_block(&g, block_bytes), per_block, "{g:?}");
        let x = values(n * c * h * w, 1);
        let wt = values(o * c * 9, 2);
        let dy = values(n * o * h * w, 3);
        let (want_y, want_dw) = naive(&x, &wt, &dy, &g);
        // A guard after the output: a partial tile must not write past its image.
        const GUARD: f32 = 12345.0;
        let mut y = vec![f32::NAN; n * o * h * w + 64];
        y[n * o * h * w..].fill(GUARD);
        let mut dw = vec![f32::NAN; o * c * 9];
        plan::forward(&x, &wt, &g, &mut y, block_bytes);
        plan::filter_gradient(&dy, &x, &g, &mut dw, block_bytes);
        assert!(
            y[n * o * h * w..].iter().all(|&v| v == GUARD),
            "{g:?}: written past the output"
        );
        // Rounding grows with the sum's length and the transforms' coefficients
        // (up to 8 and 1/24): bound it by the terms' count, not the result's size.
        for (name, got, want, terms) in [
            ("y", &y, &want_y, (9 * c) as f64),
            ("dw", &dw, &want_dw, (n * h * w) as f64),
        ] {
            for (i, (&a, &b)) in got.iter().zip(want.iter()).enumerate() {
                assert!(
                    (a as f64 - b).abs() <= 1e-6 * terms,
                    "{name}[{i}] of {g:?} in blocks of {block_bytes} bytes: {a} vs {b}"
                );
            }
        }
    }
}

/// `y` and `dw` of a "same" 3x3 convolution in f64, with each output's scale: the sum of
/// its terms' magnitudes (`Σ |x·w|` for `y`, `Σ |x·dy|` for `dw`). Loops ordered so that
/// the innermost runs along an image row.
fn reference_with_scales(
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    g: &ConvGeometry,
) -> [(Vec<f64>, Vec<f64>); 2] {
    let (n, c, o, h, wd) = (g.n, g.c, g.o, g.h, g.w);
    let x64: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let dy64: Vec<f64> = dy.iter().map(|&v| v as f64).collect();
    let (mut y, mut y_scale) = (vec![0.0; n * o * h * wd], vec![0.0; n * o * h * wd]);
    let (mut dw, mut dw_scale) = (vec![0.0; o * c * 9], vec![0.0; o * c * 9]);
    for s in 0..n {
        for oc in 0..o {
            for ch in 0..c {
                let plane = &x64[(s * c + ch) * h * wd..][..h * wd];
                let out = (s * o + oc) * h * wd;
                for (k, l) in (0..3).flat_map(|k| (0..3).map(move |l| (k, l))) {
                    let wi = (oc * c + ch) * 9 + k * 3 + l;
                    let wv = w[wi] as f64;
                    let (mut acc, mut acc_abs) = (0.0, 0.0);
                    for i in 0..h {
                        let Some(r) = (i + k).checked_sub(1).filter(|&r| r < h) else {
                            continue;
                        };
                        let (j0, j1) = (1usize.saturating_sub(l), (wd + 1 - l).min(wd));
                        for j in j0..j1 {
                            let xv = plane[r * wd + j + l - 1];
                            let yi = out + i * wd + j;
                            y[yi] += xv * wv;
                            y_scale[yi] += (xv * wv).abs();
                            acc += xv * dy64[yi];
                            acc_abs += (xv * dy64[yi]).abs();
                        }
                    }
                    dw[wi] += acc;
                    dw_scale[wi] += acc_abs;
                }
            }
        }
    }
    [(y, y_scale), (dw, dw_scale)]
}

/// Largest error of `got` against `want`, each relative to its output's scale.
fn worst_scaled_error(got: &[f32], (want, scale): &(Vec<f64>, Vec<f64>)) -> f64 {
    got.iter()
        .zip(want.iter().zip(scale))
        .map(|(&a, (&b, &s))| (a as f64 - b).abs() / s.max(f64::MIN_POSITIVE))
        .fold(0.0, f64::max)
}

/// Winograd's rounding error at ResNet-18's stride-1 3x3 layers (CIFAR form: 64 channels
/// at 32x32 down to 512 at 4x4), forward pass and weight gradient, against an f64 direct
/// convolution, beside the error of the direct f32 form that `SPORE_WINOGRAD=off` runs.
///
/// Each output's error is divided by the sum of its terms' magnitudes, the quantity that
/// bounds any summation's rounding (`|ŷ - y| <= γ · Σ|terms|`), so the bound does not
/// depend on how much the terms cancel. The direct form's error is that of a plain sum,
/// here below 1e-6. Winograd's is larger because its transforms mix values before the
/// products: the input transform `Bᵀ d B` combines up to 4 values per side with
/// coefficients up to 5, the output transform `Aᵀ m A` up to 6 per side with coefficients
/// up to 8, so intermediate values (and their rounding) reach several times the terms
/// they stand for; the published analyses of F(4x4, 3x3) (Barabasz et al., 2020) put its
/// fp32 error one to two orders of magnitude above the direct form's. The bound, 1e-5
/// (about 170 units of f32 rounding), is the direct form's 1e-6 times ten; the measured
/// error sits at a quarter of it (the test prints both). Users who need the direct
/// form's accuracy set `SPORE_WINOGRAD=off`.
#[test]
fn rounding_error_at_resnet18_sizes_is_within_its_stated_bound() {
    if !runs_here("rounding_error_at_resnet18_sizes") {
        return;
    }
    // (batch for y, batch for dw, channels, side): dw sums over batch x side², so its
    // batch is larger where the layer is small.
    for (n_y, n_dw, c, side) in [
        (2, 4, 64, 32),
        (2, 8, 128, 16),
        (2, 16, 256, 8),
        (2, 32, 512, 4),
    ] {
        let mut worst = [[0.0f64; 2]; 2];
        for (pass, n) in [(0, n_y), (1, n_dw)] {
            let g = ConvGeometry::new([n, c, side, side], [c, c, 3, 3], [1, 1], [1, 1], [1; 4], 1);
            assert!(
                crate::conv::plan::winograd_applies(&g) && crate::conv::plan::panels_applies(&g),
                "{g:?}"
            );
            let x = values(n * c * side * side, 11 + c as u64);
            let w: Vec<f32> = values(c * c * 9, 12).iter().map(|v| v * 0.05).collect();
            let dy = values(n * c * side * side, 13);
            let reference = reference_with_scales(&x, &w, &dy, &g);
            let (mut wino, mut direct) = (vec![f32::NAN; 0], vec![f32::NAN; 0]);
            if pass == 0 {
                wino.resize(n * c * side * side, f32::NAN);
                direct.resize(wino.len(), f32::NAN);
                forward(&x, &w, &g, &mut wino);
                crate::conv::panels::forward(&x, &w, &g, &mut direct);
            } else {
                wino.resize(c * c * 9, f32::NAN);
                direct.resize(wino.len(), f32::NAN);
                filter_gradient(&dy, &x, &g, &mut wino);
                crate::conv::panels::filter_gradient(&dy, &x, &g, &mut direct);
            }
            worst[pass] = [
                worst_scaled_error(&wino, &reference[pass]),
                worst_scaled_error(&direct, &reference[pass]),
            ];
        }
        eprintln!(
            "{c} channels at {side}x{side}: y error {:.2e} (direct {:.2e}), dw error {:.2e} (direct {:.2e})",
            worst[0][0], worst[0][1], worst[1][0], worst[1][1]
        );
        for (pass, [wino, direct]) in ["y", "dw"].iter().zip(worst) {
            assert!(
                wino <= 1e-5,
                "{pass} at {c}x{side}x{side}: Winograd error {wino:.2e} > 1e-5"
            );
            assert!(
                direct <= 1e-6,
                "{pass} at {c}x{side}x{side}: direct error {direct:.2e} > 1e-6"
            );
        }
    }
}
