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
    if !enabled() {
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
    // SAFETY: `enabled` checked AVX2 and FMA.
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
/// leave a partial last vector, and have rows of tiles longer than a vector.
#[test]
fn forward_and_filter_gradient_match_naive_f64_across_blocks() {
    if !enabled() {
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
    ];
    for (n, c, o, h, w, block_bytes, per_block) in cases {
        let g = ConvGeometry::new([n, c, h, w], [o, c, 3, 3], [1, 1], [1, 1], [1; 4], 1);
        assert!(applies(&g), "{g:?}");
        assert_eq!(plan::images_per_block(&g, block_bytes), per_block, "{g:?}");
        let x = values(n * c * h * w, 1);
        let wt = values(o * c * 9, 2);
        let dy = values(n * o * h * w, 3);
        let (want_y, want_dw) = naive(&x, &wt, &dy, &g);
        let mut y = vec![f32::NAN; n * o * h * w];
        let mut dw = vec![f32::NAN; o * c * 9];
        plan::forward(&x, &wt, &g, &mut y, block_bytes);
        plan::filter_gradient(&dy, &x, &g, &mut dw, block_bytes);
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
