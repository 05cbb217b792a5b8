//! Max pooling's windows against a naive loop: the first (row-major) strictly greatest
//! cell of each window clipped to the image, `-inf` for a window wholly in padding, and
//! each output gradient sent to that cell.

use spore_kernels::pool::{
    PoolGeometry, max_pool2d, max_pool2d_backward, max_pool2d_backward_of_relu,
};

use crate::values;

/// (output, input gradient) of the naive loop.
fn naive(x: &[f64], dy: &[f64], g: &PoolGeometry) -> (Vec<f64>, Vec<f64>) {
    let (hw, ohw) = (g.h * g.w, g.oh * g.ow);
    let mut y = vec![f64::NEG_INFINITY; g.n * g.c * ohw];
    let mut dx = vec![0.0; g.n * g.c * hw];
    for p in 0..g.n * g.c {
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                let mut best: Option<(usize, f64)> = None;
                for ky in 0..g.kernel[0] {
                    for kx in 0..g.kernel[1] {
                        let iy = (oy * g.stride[0] + ky) as isize - g.pads[0] as isize;
                        let ix = (ox * g.stride[1] + kx) as isize - g.pads[2] as isize;
                        if iy < 0 || ix < 0 || iy >= g.h as isize || ix >= g.w as isize {
                            continue;
                        }
                        let i = iy as usize * g.w + ix as usize;
                        let v = x[p * hw + i];
                        if best.is_none_or(|(_, b)| v > b) {
                            best = Some((i, v));
                        }
                    }
                }
                if let Some((i, v)) = best {
                    y[p * ohw + oy * g.ow + ox] = v;
                    dx[p * hw + i] += dy[p * ohw + oy * g.ow + ox];
                }
            }
        }
    }
    (y, dx)
}

/// Padded and unpadded windows of 2, 3 and 4 columns (ResNet's 3x3 stride-2 pool among
/// them), ceil mode, and windows wholly in padding, over values with many ties, NaN and
/// signed zeros, in f64 and f32 (whose 2x2 pools take the vector kernel).
#[test]
fn max_pools_match_the_naive_first_maximum_loop() {
    // (input, kernel, stride, pads, ceil mode)
    let cases = [
        ([2, 3, 13, 14], [3, 3], [2, 2], [1; 4], false),
        ([1, 2, 7, 7], [3, 3], [1, 1], [1; 4], false),
        ([2, 2, 9, 11], [2, 2], [2, 2], [0; 4], false),
        ([1, 3, 10, 9], [3, 3], [3, 3], [2, 0, 1, 2], true),
        ([1, 2, 9, 10], [4, 4], [2, 2], [1; 4], false),
        ([1, 1, 3, 3], [2, 2], [1, 1], [2; 4], false),
        ([2, 2, 8, 8], [3, 2], [2, 1], [0, 1, 1, 0], false),
    ];
    for (input, kernel, stride, pads, ceil) in cases {
        let g = PoolGeometry::with_ceil_mode(input, kernel, stride, pads, ceil);
        let len: usize = input.iter().product();
        let x: Vec<f64> = values(len, 21)
            .iter()
            .enumerate()
            .map(|(i, v)| match i % 29 {
                3 => f64::NAN,
                7 => -0.0,
                8 => 0.0,
                _ => (v * 2.0).round(),
            })
            .collect();
        let dy = values(g.n * g.c * g.oh * g.ow, 22);
        let (want_y, want_dx) = naive(&x, &dy, &g);
        let same = |a: f64, b: f64| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        let y = max_pool2d(&x, &g);
        assert!(
            y.iter().zip(&want_y).all(|(&a, &b)| same(a, b)) && y.len() == want_y.len(),
            "forward of {g:?}"
        );
        let dx = max_pool2d_backward(&x, &dy, &g);
        assert!(
            dx.iter().zip(&want_dx).all(|(&a, &b)| same(a, b)) && dx.len() == want_dx.len(),
            "backward of {g:?}"
        );
        let relu_dx = max_pool2d_backward_of_relu(&x, &dy, &g);
        for ((&got, &want), &xv) in relu_dx.iter().zip(&want_dx).zip(&x) {
            let want = if xv > 0.0 { want } else { 0.0 };
            assert!(same(got, want), "backward of ReLU of {g:?}");
        }
        let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
        let y32 = max_pool2d(&x32, &g);
        assert!(
            y32.iter().zip(&want_y).all(|(&a, &b)| same(a as f64, b)),
            "f32 forward of {g:?}"
        );
    }
}

/// The gradient at ResNet-50's pool shape (enough planes to split among threads) into a
/// recycled buffer poisoned with NaN: each plane is cleared by the thread that scatters
/// into it, so no old value may survive, with or without the ReLU mask.
#[test]
fn max_pool_gradient_clears_recycled_buffers_on_every_thread() {
    let g = PoolGeometry::new([2, 32, 28, 28], [3, 3], [2, 2], [1; 4]);
    let len = g.n * g.c * g.h * g.w;
    let x: Vec<f32> = values(len, 31)
        .iter()
        .map(|&v| (v as f32).max(0.0))
        .collect();
    let dy: Vec<f32> = values(g.n * g.c * g.oh * g.ow, 32)
        .iter()
        .map(|&v| v as f32)
        .collect();
    let x64: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let dy64: Vec<f64> = dy.iter().map(|&v| v as f64).collect();
    let (_, want) = naive(&x64, &dy64, &g);
    let mut pool = spore_kernels::arena::BufferPool::default();
    for relu in [false, true] {
        let run = || {
            let dx = if relu {
                max_pool2d_backward_of_relu(&x, &dy, &g)
            } else {
                max_pool2d_backward(&x, &dy, &g)
            };
            let copy = dx.clone();
            spore_kernels::arena::recycle(spore_kernels::Buffer::F32(dx));
            copy
        };
        spore_kernels::arena::with_pool(&mut pool, run);
        pool.poison_f32(f32::NAN);
        let dx = spore_kernels::arena::with_pool(&mut pool, run);
        assert!(
            pool.stats().hits > 0,
            "the second run took a recycled buffer"
        );
        for (i, ((&got, &w), &xv)) in dx.iter().zip(&want).zip(&x).enumerate() {
            let w = if relu && xv <= 0.0 { 0.0 } else { w as f32 };
            assert!(
                (got - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "relu {relu}, cell {i}: {got} vs {w}"
            );
        }
    }
}

/// float16 and bfloat16 pooling against the naive loop on the same (16-bit) values, in
/// 2x2 planes wide enough for the vector kernels (whole, and with a row and column left
/// over) and narrower, in padded, overlapping (whose gradients sum) and ceil-mode
/// windows, windows wholly in padding, and tensors of many planes (several conversion
/// batches on each of several threads): the forward pass, the gradient and the gradient
/// of ReLU. NaN, signed zeros and ties included; the bits must match.
#[test]
fn sixteen_bit_max_pools_select_the_naive_loops_values() {
    use spore_kernels::{bf16, f16};
    // (input, kernel, stride, pads, ceil mode)
    let cases = [
        ([2, 3, 28, 28], [2, 2], [2, 2], [0; 4], false),
        ([3, 2, 10, 16], [2, 2], [2, 2], [0; 4], false),
        ([1, 2, 11, 19], [2, 2], [2, 2], [0; 4], false),
        ([2, 2, 6, 6], [2, 2], [2, 2], [0; 4], false),
        ([2, 3, 13, 14], [3, 3], [2, 2], [1; 4], false),
        ([1, 2, 9, 9], [3, 3], [3, 3], [0; 4], false),
        ([1, 3, 10, 9], [3, 3], [3, 3], [2, 0, 1, 2], true),
        ([1, 1, 3, 3], [2, 2], [1, 1], [2; 4], false),
        // No cells at all: every window is padding.
        ([1, 1, 0, 4], [2, 2], [1, 1], [1, 1, 0, 0], false),
        // Several batches of planes per thread, on several threads.
        ([8, 32, 28, 28], [2, 2], [2, 2], [0; 4], false),
        ([8, 16, 17, 17], [3, 3], [2, 2], [1; 4], false),
    ];
    fn check<T: spore_kernels::Num>(
        to: impl Fn(f64) -> T,
        input: [usize; 4],
        kernel: [usize; 2],
        stride: [usize; 2],
        pads: [usize; 4],
        ceil: bool,
    ) {
        let g = PoolGeometry::with_ceil_mode(input, kernel, stride, pads, ceil);
        let len: usize = input.iter().product();
        let x: Vec<T> = values(len, 23)
            .iter()
            .enumerate()
            .map(|(i, v)| match i % 31 {
                3 => to(f64::NAN),
                7 => to(-0.0),
                8 => to(0.0),
                _ => to((v * 4.0).round() / 4.0 + 1.0 / 512.0),
            })
            .collect();
        let dy: Vec<T> = values(g.n * g.c * g.oh * g.ow, 24)
            .iter()
            .map(|&v| to(v))
            .collect();
        let wide = |v: &[T]| v.iter().map(|e| e.to_f64()).collect::<Vec<f64>>();
        let (want_y, want_dx) = naive(&wide(&x), &wide(&dy), &g);
        let same = |a: f64, b: f64| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        let y = wide(&max_pool2d(&x, &g));
        assert_eq!(y.len(), want_y.len());
        assert!(
            y.iter().zip(&want_y).all(|(&a, &b)| same(a, b)),
            "{:?} forward of {g:?}",
            T::DTYPE
        );
        // Overlapping windows sum gradients: exactly here (few values of 16 bits in
        // float32), then rounded once.
        let want_dx: Vec<f64> = want_dx.iter().map(|&v| to(v).to_f64()).collect();
        let dx = wide(&max_pool2d_backward(&x, &dy, &g));
        assert!(
            dx.iter().zip(&want_dx).all(|(&a, &b)| same(a, b)),
            "{:?} backward of {g:?}",
            T::DTYPE
        );
        let relu_dx = wide(&max_pool2d_backward_of_relu(&x, &dy, &g));
        for ((&got, &want), xv) in relu_dx.iter().zip(&want_dx).zip(&x) {
            let want = if xv.to_f64() > 0.0 { want } else { 0.0 };
            assert!(same(got, want), "{:?} backward of ReLU of {g:?}", T::DTYPE);
        }
    }
    for (input, kernel, stride, pads, ceil) in cases {
        check(bf16::from_f64, input, kernel, stride, pads, ceil);
        check(f16::from_f64, input, kernel, stride, pads, ceil);
    }
}
