//! Kernel-level checks the op table cannot reach with small shapes: published Philox
//! vectors, and large GEMM (`products.rs`) / convolution paths (threaded, strided) against
//! naive loops.

mod avx512_pairs;
mod bf16_products;
mod half;
mod max_pool;
mod norm_sums;
mod parallel_loops;
mod products;
mod vmath;

use spore_kernels::conv::{
    ConvGeometry, ConvPath, Pass, conv2d, conv2d_backward_filter, conv2d_backward_input,
};
use spore_kernels::random::philox;

/// Whether the convolution planner lists `path` for `pass` of `g` (f32).
fn takes(
    pass: spore_kernels::conv::Pass,
    path: spore_kernels::conv::ConvPath,
    g: &spore_kernels::conv::ConvGeometry,
) -> bool {
    spore_kernels::conv::applicable(g, pass, true).contains(&path)
}

#[test]
fn philox_matches_random123_known_answers() {
    assert_eq!(
        philox([0; 4], [0; 2]),
        [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
    );
    assert_eq!(
        philox([u32::MAX; 4], [u32::MAX; 2]),
        [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
    );
    assert_eq!(
        philox(
            [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
            [0xa4093822, 0x299f31d0]
        ),
        [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
    );
}

pub(crate) fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

#[test]
fn batched_convolution_and_gradients_match_naive_loops() {
    // Batch larger than the thread count exercises the per-thread partial sums of dW.
    let g = ConvGeometry::new([5, 3, 9, 8], [4, 3, 3, 3], [1, 2], [1, 1], [1, 1, 1, 0], 1);
    let x = values(5 * 3 * 9 * 8, 3);
    let w = values(4 * 3 * 3 * 3, 4);
    let y = conv2d(&x, &w, &g);
    let dy = values(y.len(), 5);
    let dx = conv2d_backward_input(&dy, &w, &g);
    let dw = conv2d_backward_filter(&dy, &x, &g);
    let (mut ry, mut rdx, mut rdw) = (vec![0.0; y.len()], vec![0.0; x.len()], vec![0.0; w.len()]);
    for n in 0..5 {
        for o in 0..4 {
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    let yi = ((n * 4 + o) * g.oh + oy) * g.ow + ox;
                    for c in 0..3 {
                        for i in 0..3 {
                            for j in 0..3 {
                                let iy = (oy + i) as isize - 1;
                                let ix = (ox * 2 + j) as isize - 1;
                                if iy < 0 || ix < 0 || iy >= 9 || ix >= 8 {
                                    continue;
                                }
                                let xi = ((n * 3 + c) * 9 + iy as usize) * 8 + ix as usize;
                                let wi = ((o * 3 + c) * 3 + i) * 3 + j;
                                ry[yi] += x[xi] * w[wi];
                                rdx[xi] += dy[yi] * w[wi];
                                rdw[wi] += dy[yi] * x[xi];
                            }
                        }
                    }
                }
            }
        }
    }
    for (got, want) in [(&y, &ry), (&dx, &rdx), (&dw, &rdw)] {
        for (a, b) in got.iter().zip(want.iter()) {
            assert!((a - b).abs() < 1e-10);
        }
    }
}

#[test]
fn convolution_without_input_channels_is_zero() {
    // C = 0: every output is an empty sum. More images than threads, small outputs: the
    // path that lowers several images into one GEMM.
    let g = ConvGeometry::new([4, 0, 3, 3], [2, 0, 2, 2], [1, 1], [1, 1], [0; 4], 1);
    let y = conv2d::<f32>(&[], &[], &g);
    assert_eq!(y, vec![0.0; 4 * 2 * 2 * 2]);
    let dw = conv2d_backward_filter::<f32>(&y, &[], &g);
    assert!(dw.is_empty());
    assert!(conv2d_backward_input::<f32>(&y, &[], &g).is_empty());
}

/// Naive f64 convolution (taps in the padding read zero) and both gradients: (y, dx, dw).
fn naive_conv(
    x: &[f64],
    w: &[f64],
    dy: &[f64],
    g: &ConvGeometry,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (cg, og) = (g.c / g.groups, g.o / g.groups);
    let (mut y, mut dx, mut dw) = (
        vec![0.0; g.n * g.o * g.oh * g.ow],
        vec![0.0; x.len()],
        vec![0.0; w.len()],
    );
    for n in 0..g.n {
        for o in 0..g.o {
            let group = o / og;
            for (oy, ox) in (0..g.oh).flat_map(|oy| (0..g.ow).map(move |ox| (oy, ox))) {
                let yi = ((n * g.o + o) * g.oh + oy) * g.ow + ox;
                for (cl, i, j) in (0..cg)
                    .flat_map(|cl| (0..g.kh).flat_map(move |i| (0..g.kw).map(move |j| (cl, i, j))))
                {
                    let iy = (oy * g.stride[0] + i * g.dilation[0]).checked_sub(g.pads[0]);
                    let ix = (ox * g.stride[1] + j * g.dilation[1]).checked_sub(g.pads[2]);
                    let (Some(iy), Some(ix)) = (iy, ix) else {
                        continue;
                    };
                    if iy >= g.h || ix >= g.w {
                        continue;
                    }
                    let xi = ((n * g.c + group * cg + cl) * g.h + iy) * g.w + ix;
                    let wi = ((o * cg + cl) * g.kh + i) * g.kw + j;
                    y[yi] += x[xi] * w[wi];
                    dx[xi] += dy[yi] * w[wi];
                    dw[wi] += dy[yi] * x[xi];
                }
            }
        }
    }
    (y, dx, dw)
}

/// The f32 forward pass and both gradients of `g` equal the naive f64 loops (fed the
/// same f32-rounded inputs, so only summation error remains).
fn assert_f32_conv_matches_naive(g: &ConvGeometry) {
    let x = values(g.n * g.c * g.h * g.w, 6);
    let w = values(g.o * (g.c / g.groups) * g.kh * g.kw, 7);
    let dy = values(g.n * g.o * g.oh * g.ow, 8);
    let f32s = |v: &[f64]| v.iter().map(|&a| a as f32).collect::<Vec<f32>>();
    let (xf, wf, dyf) = (f32s(&x), f32s(&w), f32s(&dy));
    let back = |v: &[f32]| v.iter().map(|&a| a as f64).collect::<Vec<f64>>();
    let (ry, rdx, rdw) = naive_conv(&back(&xf), &back(&wf), &back(&dyf), g);
    let y = conv2d(&xf, &wf, g);
    let dw = conv2d_backward_filter(&dyf, &xf, g);
    let dx = conv2d_backward_input(&dyf, &wf, g);
    for (name, got, want) in [("y", &y, &ry), ("dw", &dw, &rdw), ("dx", &dx, &rdx)] {
        assert_eq!(got.len(), want.len(), "{name} of {g:?}");
        let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        for (i, (a, b)) in got.iter().zip(want.iter()).enumerate() {
            assert!(
                (*a as f64 - b).abs() <= 1e-5 * scale,
                "{name}[{i}] of {g:?}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn panel_convolutions_match_naive_f64() {
    // More than 18 output channels per group: the forward pass and weight gradient read
    // their column-matrix panels from the (padded) images. ResNet's shapes in small:
    // padded 3x3 (one image per GEMM, and several side by side when positions are few),
    // stride 2 with a 1x1 shortcut, asymmetric pads, dilation, groups, a depth past one
    // block (ckk = 360 > 256), more than one row block of A (160 channels), positions
    // not a multiple of 16, and a batch that does not split evenly. The input gradient
    // multiplies by each group's Wᵀ packed once: with groups, and with more output
    // channels than one depth block (330). Panels of 16 positions in one output row
    // copy whole rows (`pack_whole_rows`): also with dilation (the 20-wide case) and at
    // stride 2 (the 34-wide case, 17 outputs per row). Padded
    // stride-1 input gradients with 6 to 18 channels per group add into a
    // zero-bordered image gradient (`implicit_conv`): also with dilation, asymmetric
    // pads and groups (the 12-channel case). With more input channels, a stride-1 input
    // gradient is the forward convolution of dY with the transposed, turned filter: a
    // "same" 3x3 layer (40 channels, depth 360 past one block), groups of 20 channels
    // with a dilation, asymmetric pads whose outputs number one less than the inputs,
    // and pads of a full reach on one side (none in the forward convolution).
    // The layers whose input gradient takes the forward form (asserted below).
    let forward_form = [
        ([3, 40, 9, 7], [24, 20, 3, 3], [1, 1], [2, 2], [2; 4], 2),
        (
            [3, 24, 16, 16],
            [32, 24, 3, 3],
            [1, 1],
            [1, 1],
            [0, 1, 1, 2],
            1,
        ),
        (
            [2, 20, 12, 12],
            [16, 20, 3, 3],
            [1, 1],
            [1, 1],
            [2, 0, 1, 1],
            1,
        ),
    ];
    let cases = [
        ([3, 8, 16, 16], [24, 8, 3, 3], [1, 1], [1, 1], [1; 4], 1),
        ([2, 3, 20, 20], [24, 3, 3, 3], [1, 1], [2, 2], [2; 4], 1),
        ([2, 4, 34, 34], [24, 4, 3, 3], [2, 2], [1, 1], [1; 4], 1),
        (
            [2, 12, 40, 40],
            [32, 6, 3, 3],
            [1, 1],
            [2, 2],
            [2, 1, 1, 2],
            2,
        ),
        ([5, 40, 4, 4], [40, 40, 3, 3], [1, 1], [1, 1], [1; 4], 1),
        ([4, 8, 9, 9], [32, 8, 3, 3], [2, 2], [1, 1], [1; 4], 1),
        ([4, 8, 9, 9], [32, 8, 1, 1], [2, 2], [1, 1], [0; 4], 1),
        (
            [2, 6, 7, 11],
            [20, 6, 3, 2],
            [1, 2],
            [2, 1],
            [2, 0, 1, 3],
            1,
        ),
        ([3, 12, 6, 6], [40, 6, 3, 3], [1, 1], [1, 1], [1; 4], 2),
        ([2, 3, 5, 7], [160, 3, 3, 3], [1, 1], [1, 1], [1; 4], 1),
        ([2, 4, 6, 6], [330, 4, 3, 3], [1, 1], [1, 1], [1; 4], 1),
        (
            [33, 4, 5, 5],
            [19, 4, 2, 2],
            [1, 1],
            [1, 1],
            [1, 0, 0, 1],
            1,
        ),
    ];
    for (xs, ws, stride, dilation, pads, groups) in cases.into_iter().chain(forward_form) {
        let g = ConvGeometry::new(xs, ws, stride, dilation, pads, groups);
        assert_f32_conv_matches_naive(&g);
        // Their weight gradients stay on the panels (fewer than 144 taps or 256 positions).
        assert!(
            !takes(Pass::FilterGradient, ConvPath::PaddedGathered, &g),
            "{g:?}"
        );
    }
    let resnet = ConvGeometry::new([32, 64, 32, 32], [64, 64, 3, 3], [1, 1], [1, 1], [1; 4], 1);
    let grouped = ConvGeometry::new(
        [2, 12, 40, 40],
        [32, 6, 3, 3],
        [1, 1],
        [2, 2],
        [2, 1, 1, 2],
        2,
    );
    if spore_kernels::matmul::own_f32_gemm() {
        assert!(takes(Pass::Forward, ConvPath::Panels, &resnet));
        assert!(spore_kernels::conv::input_gradient_runs_forward(&resnet));
        for (xs, ws, stride, dilation, pads, groups) in forward_form {
            let g = ConvGeometry::new(xs, ws, stride, dilation, pads, groups);
            assert!(
                spore_kernels::conv::input_gradient_runs_forward(&g),
                "{g:?}"
            );
        }
        // Not for the strided, or for the unpadded (computing on a zero border).
        let strided = ConvGeometry::new([2, 24, 9, 9], [32, 24, 3, 3], [2, 2], [1, 1], [1; 4], 1);
        let unpadded = ConvGeometry::new([2, 24, 9, 9], [32, 24, 3, 3], [1, 1], [1, 1], [0; 4], 1);
        assert!(!spore_kernels::conv::input_gradient_runs_forward(&strided));
        assert!(!spore_kernels::conv::input_gradient_runs_forward(&unpadded));
        assert!(takes(
            Pass::InputGradient,
            ConvPath::PaddedScatterAdd,
            &resnet
        ));
        assert!(takes(
            Pass::InputGradient,
            ConvPath::PaddedScatterAdd,
            &grouped
        ));
    }
}

/// Padded layers with at least 144 taps, 16 output channels per group and 256 output
/// positions take the gathered weight gradient over zero-bordered images (where the CPU
/// has AVX2/FMA): a "same" 3x3 layer, stride 2, a dilation with asymmetric pads and a
/// short last panel of output channels (20), groups, and a batch that does not split
/// evenly. A layer whose `dWᵀ` would not stay in L2 keeps the panel path.
#[test]
fn gathered_weight_gradient_of_padded_layers_matches_naive_f64() {
    let cases = [
        ([2, 16, 16, 16], [16, 16, 3, 3], [1, 1], [1, 1], [1; 4], 1),
        ([3, 16, 32, 32], [32, 16, 3, 3], [2, 2], [1, 1], [1; 4], 1),
        (
            [2, 16, 20, 18],
            [20, 16, 3, 3],
            [1, 1],
            [2, 2],
            [0, 1, 1, 2],
            1,
        ),
        ([3, 32, 16, 16], [32, 16, 3, 3], [1, 1], [1, 1], [1; 4], 2),
    ];
    for (xs, ws, stride, dilation, pads, groups) in cases {
        let g = ConvGeometry::new(xs, ws, stride, dilation, pads, groups);
        if spore_kernels::matmul::own_f32_gemm() {
            assert!(
                takes(Pass::FilterGradient, ConvPath::PaddedGathered, &g),
                "{g:?}"
            );
        }
        assert_f32_conv_matches_naive(&g);
    }
    let wide_gradient = ConvGeometry::new(
        [1, 128, 16, 16],
        [256, 128, 3, 3],
        [1, 1],
        [1, 1],
        [1; 4],
        1,
    );
    assert!(!takes(
        Pass::FilterGradient,
        ConvPath::PaddedGathered,
        &wide_gradient
    ));
}

#[test]
fn implicit_gemm_convolutions_match_naive_f64() {
    // Unpadded small images with at least 16 output channels per group take the implicit
    // GEMM (where the CPU has AVX2/FMA): LeNet's conv2, strides, dilations, groups, a
    // short last panel of output channels (20), an odd batch, positions not a multiple
    // of six, and a 1x1 output. Stride-1 ones with fewer channels run their forward pass
    // and weight gradient on wide positions: LeNet's conv1, dilations, groups of 5
    // channels, and 40x40 images whose 1,518 wide positions take two depth passes of the
    // dot kernel, in an odd batch. Stride-1 ones
    // with at least six input channels per group take the scattered input gradient:
    // LeNet's conv2, and groups of 7 channels with a dilation.
    let cases = [
        ([2, 14, 9, 12], [8, 7, 2, 3], [1, 1], [2, 1], 2),
        ([32, 6, 14, 14], [16, 6, 5, 5], [1, 1], [1, 1], 1),
        ([3, 4, 11, 9], [20, 4, 3, 2], [2, 1], [1, 2], 1),
        ([5, 6, 7, 7], [32, 3, 3, 3], [1, 1], [2, 1], 2),
        ([2, 3, 4, 4], [16, 3, 4, 4], [1, 1], [1, 1], 1),
        ([32, 1, 32, 32], [6, 1, 5, 5], [1, 1], [1, 1], 1),
        ([2, 3, 9, 30], [7, 3, 2, 3], [1, 1], [2, 2], 1),
        ([3, 4, 10, 20], [10, 2, 3, 3], [1, 1], [1, 1], 2),
        ([3, 2, 40, 40], [4, 2, 3, 3], [1, 1], [1, 1], 1),
    ];
    for (xs, ws, stride, dilation, groups) in cases {
        let g = ConvGeometry::new(xs, ws, stride, dilation, [0; 4], groups);
        assert_f32_conv_matches_naive(&g);
    }
    let lenet = ConvGeometry::new([32, 6, 14, 14], [16, 6, 5, 5], [1, 1], [1, 1], [0; 4], 1);
    let conv1 = ConvGeometry::new([32, 1, 32, 32], [6, 1, 5, 5], [1, 1], [1, 1], [0; 4], 1);
    if spore_kernels::matmul::own_f32_gemm() {
        assert!(takes(Pass::Forward, ConvPath::Implicit, &lenet));
        assert!(takes(Pass::InputGradient, ConvPath::ScatterAdd, &lenet));
        let grouped = ConvGeometry::new([2, 14, 9, 12], [8, 7, 2, 3], [1, 1], [2, 1], [0; 4], 2);
        assert!(takes(Pass::InputGradient, ConvPath::ScatterAdd, &grouped));
        assert!(takes(Pass::Forward, ConvPath::Wide, &conv1));
        let dilated = ConvGeometry::new([2, 3, 9, 30], [7, 3, 2, 3], [1, 1], [2, 2], [0; 4], 1);
        assert!(takes(Pass::Forward, ConvPath::Wide, &dilated));
        let deep = ConvGeometry::new([3, 2, 40, 40], [4, 2, 3, 3], [1, 1], [1, 1], [0; 4], 1);
        assert!(takes(Pass::Forward, ConvPath::Wide, &deep));
    }
}

/// Scratch taken from the buffer pool holds the last user's values: the weight gradient
/// on wide positions (which overwrites its per-thread partial sums on each block's first
/// image) computed twice in one pool, the second time on the first one's recycled
/// buffers, gives the same result both times.
#[test]
fn wide_weight_gradient_ignores_recycled_scratch() {
    let g = ConvGeometry::new([4, 1, 12, 12], [3, 1, 3, 3], [1, 1], [1, 1], [0; 4], 1);
    if spore_kernels::matmul::own_f32_gemm() {
        assert!(takes(Pass::Forward, ConvPath::Wide, &g));
    }
    let x: Vec<f32> = values(4 * 144, 11).iter().map(|&v| v as f32).collect();
    let dy: Vec<f32> = values(4 * 3 * 100, 12).iter().map(|&v| v as f32).collect();
    let mut pool = spore_kernels::arena::BufferPool::default();
    let (first, second) = spore_kernels::arena::with_pool(&mut pool, || {
        let first = conv2d_backward_filter(&dy, &x, &g);
        let second = conv2d_backward_filter(&dy, &x, &g);
        (first, second)
    });
    assert_eq!(first, second);
}

/// The scattered input gradient writes every value of its output and of its spread
/// output gradient, which come unset from the pool: computed once in a pool whose freed
/// buffers are then all set to NaN, and again on those, it equals the same gradient
/// computed without a pool. Unpadded (LeNet's `conv2`) and padded (a zero-bordered image
/// gradient) layers.
#[test]
fn scattered_input_gradient_ignores_recycled_buffers() {
    let cases = [
        (
            ConvGeometry::new([4, 6, 14, 14], [16, 6, 5, 5], [1, 1], [1, 1], [0; 4], 1),
            true,
        ),
        (
            ConvGeometry::new([3, 8, 16, 16], [16, 8, 3, 3], [1, 1], [1, 1], [1; 4], 1),
            false,
        ),
    ];
    for (g, unpadded) in cases {
        if spore_kernels::matmul::own_f32_gemm() {
            let applies = if unpadded {
                takes(Pass::InputGradient, ConvPath::ScatterAdd, &g)
            } else {
                takes(Pass::InputGradient, ConvPath::PaddedScatterAdd, &g)
            };
            assert!(applies, "{g:?}");
        }
        let f32s = |v: Vec<f64>| v.iter().map(|&a| a as f32).collect::<Vec<f32>>();
        let w = f32s(values(g.o * g.c * g.kh * g.kw, 21));
        let dy = f32s(values(g.n * g.o * g.oh * g.ow, 22));
        let fresh = conv2d_backward_input(&dy, &w, &g);
        let mut pool = spore_kernels::arena::BufferPool::default();
        let run = || {
            let dx = conv2d_backward_input(&dy, &w, &g);
            let copy = dx.clone();
            spore_kernels::arena::recycle(spore_kernels::Buffer::F32(dx));
            copy
        };
        spore_kernels::arena::with_pool(&mut pool, run);
        pool.poison_f32(f32::NAN);
        let reused = spore_kernels::arena::with_pool(&mut pool, run);
        assert!(
            pool.stats().hits > 0,
            "the second run took recycled buffers"
        );
        assert_eq!(fresh, reused, "{g:?}");
    }
}

/// `conv2d_relu` equals a ReLU applied to `conv2d`'s output, bit for bit, on each path:
/// wide positions (LeNet's conv1, where the ReLU runs in the copy out), the implicit GEMM,
/// a padded layer (panels), and f64 (im2col). Inputs hold a NaN and mixed signs.
#[test]
fn convolution_with_relu_equals_relu_of_the_convolution() {
    use spore_kernels::conv::conv2d_relu;
    let cases = [
        ([4, 1, 32, 32], [6, 1, 5, 5], 0),
        ([4, 6, 14, 14], [16, 6, 5, 5], 0),
        ([2, 8, 10, 10], [24, 8, 3, 3], 1),
    ];
    for (xs, ws, p) in cases {
        let g = ConvGeometry::new(xs, ws, [1, 1], [1, 1], [p; 4], 1);
        let mut x = values(xs.iter().product(), 13);
        x[7] = f64::NAN;
        let w = values(ws.iter().product(), 14);
        let relu64 = |v: f64| if v > 0.0 { v } else { 0.0 };
        let want64: Vec<f64> = conv2d(&x, &w, &g).into_iter().map(relu64).collect();
        assert_eq!(conv2d_relu(&x, &w, &g).len(), want64.len());
        for (a, b) in conv2d_relu(&x, &w, &g).iter().zip(&want64) {
            assert_eq!(a.to_bits(), b.to_bits(), "f64 {g:?}");
        }
        let (xf, wf): (Vec<f32>, Vec<f32>) = (
            x.iter().map(|&v| v as f32).collect(),
            w.iter().map(|&v| v as f32).collect(),
        );
        let relu32 = |v: f32| if v > 0.0 { v } else { 0.0 };
        let want: Vec<f32> = conv2d(&xf, &wf, &g).into_iter().map(relu32).collect();
        let got = conv2d_relu(&xf, &wf, &g);
        assert!(want.contains(&0.0) && want.iter().any(|&v| v > 0.0));
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "f32 {g:?} at {i}");
        }
    }
}

#[test]
fn vectorised_2x2_max_pool_matches_the_scalar_rule_with_ties_nan_and_signed_zero() {
    use spore_kernels::pool::{PoolGeometry, max_pool2d, max_pool2d_backward};
    // f32 takes the vector kernel (AVX2), f64 the scalar one; both must pick the same
    // (first strictly greatest) corner. Few distinct values make ties common; NaN and
    // -0.0 test the comparison rule. Widths 16 (whole blocks), 28 (an overlapping last
    // block, LeNet's pool1) and 10 (scalar only); odd sizes leave a row and column over.
    for input in [[2, 3, 4, 16], [3, 2, 6, 28], [1, 2, 4, 10], [2, 1, 5, 19]] {
        let g = PoolGeometry::new(input, [2, 2], [2, 2], [0; 4]);
        let len: usize = input.iter().product();
        let x64: Vec<f64> = values(len, 9)
            .iter()
            .enumerate()
            .map(|(i, v)| match i % 37 {
                5 => f64::NAN,
                11 => -0.0,
                12 => 0.0,
                _ => (v * 3.0).round(),
            })
            .collect();
        let x32: Vec<f32> = x64.iter().map(|&v| v as f32).collect();
        let dy64 = values(g.n * g.c * g.oh * g.ow, 10);
        let dy32: Vec<f32> = dy64.iter().map(|&v| v as f32).collect();
        let same =
            |a: f32, b: f64| a.to_bits() == (b as f32).to_bits() || (a.is_nan() && b.is_nan());
        let (y32, y64) = (max_pool2d(&x32, &g), max_pool2d(&x64, &g));
        assert!(
            y32.iter().zip(&y64).all(|(&a, &b)| same(a, b)),
            "forward of {input:?}"
        );
        let (d32, d64) = (
            max_pool2d_backward(&x32, &dy32, &g),
            max_pool2d_backward(&x64, &dy64, &g),
        );
        assert!(
            d32.iter().zip(&d64).all(|(&a, &b)| same(a, b)),
            "backward of {input:?}"
        );
    }
}

/// A batch smaller than the thread count splits each image's product among the threads
/// (by columns, and by rows where an image has fewer column panels than threads): the
/// result equals the naive loops and, bit for bit, the same convolution on one thread
/// (each output's sum runs in the same order however the product is cut).
#[test]
fn small_batches_split_each_product_among_the_threads() {
    let cases = [
        // ResNet-18's 8x8 and 4x4 layers at batch 1 (4 and 1 column panels).
        ConvGeometry::new([1, 32, 8, 8], [96, 32, 3, 3], [1, 1], [1, 1], [1; 4], 1),
        ConvGeometry::new([1, 64, 4, 4], [64, 64, 3, 3], [1, 1], [1, 1], [1; 4], 1),
        // Two images on three threads, strided and grouped; and one too small to split.
        ConvGeometry::new(
            [2, 16, 21, 19],
            [96, 8, 3, 3],
            [2, 1],
            [1, 1],
            [1, 0, 1, 1],
            2,
        ),
        ConvGeometry::new([1, 4, 5, 5], [20, 4, 3, 3], [1, 1], [1, 1], [1; 4], 1),
    ];
    let pool = |threads| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a thread pool")
    };
    if spore_kernels::matmul::own_f32_gemm() {
        assert!(
            cases
                .iter()
                .all(|g| takes(Pass::Forward, ConvPath::Panels, g)),
            "the cases no longer take the panel path that splits products"
        );
    }
    for g in cases {
        pool(3).install(|| assert_f32_conv_matches_naive(&g));
        let x: Vec<f32> = values(g.n * g.c * g.h * g.w, 9)
            .iter()
            .map(|&v| v as f32)
            .collect();
        let w: Vec<f32> = values(g.o * (g.c / g.groups) * g.kh * g.kw, 10)
            .iter()
            .map(|&v| v as f32)
            .collect();
        let one = pool(1).install(|| conv2d(&x, &w, &g));
        for threads in [2, 3, 4] {
            let split = pool(threads).install(|| conv2d(&x, &w, &g));
            assert_eq!(split, one, "{g:?} on {threads} threads");
        }
    }
}
