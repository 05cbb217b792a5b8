//! Op-table rows for the operator options the ONNX importer needed and a MindSpore user
//! reaches for too: pooling's `ceil_mode`, NumPy's 1-d `matmul`, `transpose_a`/`b`,
//! `reshape` with -1, `pad` modes and cropping, `one_hot` with `on_value`/`off_value`/
//! `axis`, StridedSlice's masks and the transposed convolution. Each reference maps
//! output positions to input positions with plain loops.

use spore_core::ops::{
    self, ConvTranspose2dOptions, PadMode, PaddingMode, Pool2dOptions, StridedSliceMasks,
};
use spore_core::{DType, Tensor};

use super::reference::{self as r, Nd};
use super::table::{In, Row, row};

pub fn api_rows() -> Vec<Row> {
    [
        ceil_mode_rows(),
        product_rows(),
        padding_rows(),
        slicing_rows(),
        conv_transpose_rows(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The output built by reading, for each output position, the input position `src`
/// gives (`None`: the constant `fill`).
fn gather_ref(
    x: &Nd,
    shape: &[usize],
    fill: f64,
    src: impl Fn(&[usize]) -> Option<Vec<usize>>,
) -> Nd {
    let n: usize = shape.iter().product();
    let data = (0..n)
        .map(|i| src(&r::unravel(i, shape)).map_or(fill, |s| x.at(&s)))
        .collect();
    Nd::new(shape, data)
}

/// Pooling windows in ceil mode, enumerated directly: window `o` starts at `o * stride` in
/// padded coordinates; windows are taken while some cell of the padded input is not yet
/// covered, and one starting in the trailing padding or beyond is dropped.
fn ceil_windows(
    size: usize,
    k: usize,
    s: usize,
    before: usize,
    after: usize,
) -> Vec<(isize, isize, usize)> {
    let padded = size + before + after;
    let mut out = vec![];
    let mut o = 0;
    loop {
        let start = o * s;
        let covered = if o == 0 { 0 } else { (o - 1) * s + k };
        if o > 0 && covered >= padded {
            break;
        }
        if start >= size + before {
            break;
        }
        // (first input cell, one past the last, cells inside the padded input)
        let first = start as isize - before as isize;
        let inside = (start + k).min(padded) - start;
        out.push((first, first + k as isize, inside));
        o += 1;
    }
    out
}

fn pool_ceil_ref(x: &Nd, k: [usize; 2], s: [usize; 2], pads: [usize; 4], how: &str) -> Nd {
    let (h, w) = (x.shape[2], x.shape[3]);
    let rows = ceil_windows(h, k[0], s[0], pads[0], pads[1]);
    let cols = ceil_windows(w, k[1], s[1], pads[2], pads[3]);
    let mut data = vec![];
    for p in 0..x.shape[0] * x.shape[1] {
        for &(y0, y1, ny) in &rows {
            for &(x0, x1, nx) in &cols {
                let mut cells = vec![];
                for yy in y0.max(0)..y1.min(h as isize) {
                    for xx in x0.max(0)..x1.min(w as isize) {
                        cells.push(x.data[p * h * w + yy as usize * w + xx as usize]);
                    }
                }
                data.push(match how {
                    "max" => cells.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                    "avg" => cells.iter().sum::<f64>() / cells.len() as f64,
                    _ => cells.iter().sum::<f64>() / (ny * nx) as f64,
                });
            }
        }
    }
    Nd::new(&[x.shape[0], x.shape[1], rows.len(), cols.len()], data)
}

fn ceil_mode_rows() -> Vec<Row> {
    let opts = |k, s, pads: Option<[usize; 4]>| {
        let o = Pool2dOptions::new(k, s).ceil_mode(true);
        match pads {
            Some(p) => o.pad_mode(PadMode::Pad(p)),
            None => o,
        }
    };
    vec![
        row(
            "MaxPool",
            vec![In::F(&[1, 2, 7, 7], -1.0, 1.0)],
            move |x| x[0].max_pool2d(&opts(2, 2, None)),
            |x| pool_ceil_ref(&x[0], [2, 2], [2, 2], [0; 4], "max"),
        ),
        row(
            "MaxPool",
            vec![In::F(&[1, 2, 6, 8], -1.0, 1.0)],
            move |x| x[0].max_pool2d(&opts(3, 2, Some([1, 1, 0, 1]))),
            |x| pool_ceil_ref(&x[0], [3, 3], [2, 2], [1, 1, 0, 1], "max"),
        ),
        row(
            // Explicit padding counts in the divisor; ceil mode's overhang does not.
            "AvgPool",
            vec![In::F(&[2, 1, 7, 6], -1.0, 1.0)],
            move |x| x[0].avg_pool2d(&opts(3, 2, Some([1, 0, 1, 0]))),
            |x| pool_ceil_ref(&x[0], [3, 3], [2, 2], [1, 0, 1, 0], "include_pad"),
        ),
        row(
            "AvgPool",
            vec![In::F(&[1, 2, 5, 5], -1.0, 1.0)],
            move |x| x[0].avg_pool2d(&opts(2, 2, None)),
            |x| pool_ceil_ref(&x[0], [2, 2], [2, 2], [0; 4], "avg"),
        ),
    ]
}

fn product_rows() -> Vec<Row> {
    let as_matrix = |x: &Nd, rows: usize| Nd::new(&[rows, x.numel() / rows], x.data.clone());
    vec![
        row(
            "MatMul",
            vec![In::F(&[4], -1.0, 1.0), In::F(&[2, 4, 3], -1.0, 1.0)],
            |x| x[0].matmul(&x[1]),
            move |x| {
                let y = r::matmul(&as_matrix(&x[0], 1), &x[1]);
                Nd::new(&[2, 3], y.data)
            },
        ),
        row(
            "MatMul",
            vec![In::F(&[2, 3, 4], -1.0, 1.0), In::F(&[4], -1.0, 1.0)],
            |x| x[0].matmul(&x[1]),
            move |x| {
                let y = r::matmul(&x[0], &as_matrix(&x[1], 4));
                Nd::new(&[2, 3], y.data)
            },
        ),
        row(
            "MatMul",
            vec![In::F(&[5], -1.0, 1.0), In::F(&[5], -1.0, 1.0)],
            |x| ops::matmul(&x[0], &x[1]),
            |x| {
                Nd::new(
                    &[],
                    vec![x[0].data.iter().zip(&x[1].data).map(|(a, b)| a * b).sum()],
                )
            },
        ),
        row(
            "MatMul",
            vec![In::F(&[5, 4], -1.0, 1.0), In::F(&[3, 5], -1.0, 1.0)],
            |x| ops::mat_mul(&x[0], &x[1], true, true),
            |x| r::matmul(&r::permute(&x[0], &[1, 0]), &r::permute(&x[1], &[1, 0])),
        ),
        row(
            "MatMul",
            vec![In::F(&[2, 3, 4], -1.0, 1.0), In::F(&[1, 5, 4], -1.0, 1.0)],
            |x| ops::batch_matmul(&x[0], &x[1], false, true),
            |x| r::matmul(&x[0], &r::permute(&x[1], &[0, 2, 1])),
        ),
        row(
            "Reshape",
            vec![In::F(&[2, 3, 4], -1.0, 1.0)],
            |x| ops::reshape(&x[0], &[4, -1, 2]),
            |x| Nd::new(&[4, 3, 2], x[0].data.clone()),
        ),
    ]
}

/// Source index on one axis of length `n` for output position `o` after `before` cells
/// of padding in `mode` (`None`: a constant cell).
fn padded_source(o: usize, before: usize, n: usize, mode: &str) -> Option<usize> {
    let i = o as isize - before as isize;
    let n = n as isize;
    let j = match mode {
        _ if (0..n).contains(&i) => i,
        "reflect" if i < 0 => -i,
        "reflect" => 2 * (n - 1) - i,
        "replicate" => i.clamp(0, n - 1),
        "circular" => i.rem_euclid(n),
        _ => return None,
    };
    Some(j as usize)
}

/// `pad_with` reference: crop (negative amounts), then pad by `mode`.
fn pad_ref(x: &Nd, pads: &[(isize, isize)], mode: &str, value: f64) -> Nd {
    let crop: Vec<(usize, usize)> = pads
        .iter()
        .map(|&(b, a)| ((-b).max(0) as usize, (-a).max(0) as usize))
        .collect();
    let kept: Vec<usize> = x
        .shape
        .iter()
        .zip(&crop)
        .map(|(n, (f, b))| n - f - b)
        .collect();
    let shape: Vec<usize> = kept
        .iter()
        .zip(pads)
        .map(|(n, &(b, a))| n + b.max(0) as usize + a.max(0) as usize)
        .collect();
    gather_ref(x, &shape, value, |o| {
        (0..o.len())
            .map(|d| {
                padded_source(o[d], pads[d].0.max(0) as usize, kept[d], mode).map(|j| j + crop[d].0)
            })
            .collect()
    })
}

fn padding_rows() -> Vec<Row> {
    let case = |mode: PaddingMode, name: &'static str, pads: &'static [(isize, isize)]| {
        let value = if let PaddingMode::Constant(v) = mode {
            v
        } else {
            0.0
        };
        row(
            name,
            vec![In::F(&[3, 4], -1.0, 1.0)],
            move |x| ops::pad(&x[0], pads, mode),
            move |x| pad_ref(&x[0], pads, &name[4..], value),
        )
    };
    vec![
        case(PaddingMode::Reflect, "pad_reflect", &[(2, 1), (1, 3)]),
        case(PaddingMode::Reflect, "pad_reflect", &[(-1, 1), (2, -1)]),
        case(PaddingMode::Replicate, "pad_replicate", &[(1, 2), (3, 0)]),
        case(PaddingMode::Circular, "pad_circular", &[(1, 3), (4, 2)]),
        case(
            PaddingMode::Constant(0.5),
            "pad_constant",
            &[(-1, 2), (1, -2)],
        ),
    ]
}

fn one_hot_ref(idx: &Nd, depth: usize, on: f64, off: f64, axis: usize) -> Nd {
    let mut shape = idx.shape.clone();
    shape.insert(axis, depth);
    let n: usize = shape.iter().product();
    let data = (0..n)
        .map(|i| {
            let mut o = r::unravel(i, &shape);
            let d = o.remove(axis);
            if idx.at(&o) == d as f64 { on } else { off }
        })
        .collect();
    Nd::new(&shape, data)
}

fn masks(begin: u64, end: u64, ellipsis: u64, new_axis: u64, shrink: u64) -> StridedSliceMasks {
    StridedSliceMasks {
        begin_mask: begin,
        end_mask: end,
        ellipsis_mask: ellipsis,
        new_axis_mask: new_axis,
        shrink_axis_mask: shrink,
    }
}

fn slicing_rows() -> Vec<Row> {
    let hot = |axis: isize, at: usize| {
        row(
            "one_hot_with",
            vec![
                In::I(&[2, 3], -1, 4),
                In::F(&[], 0.5, 2.0),
                In::F(&[], -2.0, 0.0),
            ],
            move |x| ops::one_hot(&x[0], 4, &x[1], &x[2], axis),
            move |x| one_hot_ref(&x[0], 4, x[1].data[0], x[2].data[0], at),
        )
    };
    vec![
        hot(-1, 2),
        hot(0, 0),
        hot(1, 1),
        row(
            "one_hot_with",
            vec![In::I(&[5], 0, 2)],
            |x| x[0].one_hot_with(3, &Tensor::scalar(1i32), &Tensor::scalar(-1i32), -1),
            |x| one_hot_ref(&x[0], 3, 1.0, -1.0, 1),
        )
        .no_grad()
        .dtype(DType::I32),
        row(
            // x[:2, 0:2, ::-1]: begin masked on axis 0, end masked on the reversed axis 2.
            "strided_slice_masked",
            vec![In::F(&[3, 3, 4, 2], -1.0, 1.0)],
            |x| {
                ops::strided_slice(
                    &x[0],
                    &[1, 0, 3],
                    &[2, 2, 0],
                    &[1, 1, -1],
                    &masks(0b001, 0b100, 0, 0, 0),
                )
            },
            |x| {
                gather_ref(&x[0], &[2, 2, 4, 2], 0.0, |o| {
                    Some(vec![o[0], o[1], 3 - o[2], o[3]])
                })
            },
        ),
        row(
            // x[1, ..., None]
            "strided_slice_masked",
            vec![In::F(&[2, 3, 4], -1.0, 1.0)],
            |x| {
                x[0].strided_slice_masked(
                    &[1, 0, 0],
                    &[2, 0, 0],
                    &[1, 1, 1],
                    &masks(0, 0, 0b010, 0b100, 0b001),
                )
            },
            |x| gather_ref(&x[0], &[3, 4, 1], 0.0, |o| Some(vec![1, o[0], o[1]])),
        ),
        row(
            // x[None, 0:3:2, -1] (the last axis taken whole)
            "strided_slice_masked",
            vec![In::F(&[4, 3, 2], -1.0, 1.0)],
            |x| {
                x[0].strided_slice_masked(
                    &[0, 0, -1],
                    &[0, 3, 0],
                    &[1, 2, 1],
                    &masks(0, 0, 0, 0b001, 0b100),
                )
            },
            |x| gather_ref(&x[0], &[1, 2, 2], 0.0, |o| Some(vec![2 * o[1], 2, o[2]])),
        ),
    ]
}

/// Transposed convolution by scattering every input cell through the kernel.
fn conv_transpose_ref(x: &Nd, w: &Nd, o: &ConvTranspose2dOptions, pads: [usize; 4]) -> Nd {
    let [n, cin, h, wd] = [x.shape[0], x.shape[1], x.shape[2], x.shape[3]];
    let [_, cog, kh, kw] = [w.shape[0], w.shape[1], w.shape[2], w.shape[3]];
    let g = o.groups;
    let cig = cin / g;
    let full = |d: usize, size: usize, k: usize| {
        (size - 1) * o.stride[d] + o.dilation[d] * (k - 1) + 1 + o.output_padding[d]
    };
    let oh = full(0, h, kh) - pads[0] - pads[1];
    let ow = full(1, wd, kw) - pads[2] - pads[3];
    let mut y = Nd::zeros(&[n, cog * g, oh, ow]);
    for b in 0..n {
        for ci in 0..cin {
            let grp = ci / cig;
            for iy in 0..h {
                for ix in 0..wd {
                    for co in 0..cog {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let yy = (iy * o.stride[0] + ky * o.dilation[0]) as isize
                                    - pads[0] as isize;
                                let xx = (ix * o.stride[1] + kx * o.dilation[1]) as isize
                                    - pads[2] as isize;
                                if yy < 0 || xx < 0 || yy >= oh as isize || xx >= ow as isize {
                                    continue;
                                }
                                let at = r::ravel(
                                    &[b, grp * cog + co, yy as usize, xx as usize],
                                    &y.shape,
                                );
                                y.data[at] += x.at(&[b, ci, iy, ix]) * w.at(&[ci, co, ky, kx]);
                            }
                        }
                    }
                }
            }
        }
    }
    y
}

fn conv_transpose_rows() -> Vec<Row> {
    let general = ConvTranspose2dOptions {
        stride: [2, 1],
        dilation: [1, 2],
        pad_mode: PadMode::Pad([1, 0, 0, 1]),
        output_padding: [1, 0],
        groups: 2,
    };
    let same = ConvTranspose2dOptions {
        stride: [2, 2],
        pad_mode: PadMode::Same,
        ..Default::default()
    };
    // Output padding beyond the stride (below the dilation, as PyTorch allows): one row
    // the end padding gives back, then zeros.
    let beyond = ConvTranspose2dOptions {
        dilation: [2, 2],
        pad_mode: PadMode::Pad([0, 1, 1, 0]),
        output_padding: [1, 1],
        ..Default::default()
    };
    vec![
        row(
            "conv_transpose2d",
            vec![
                In::F(&[1, 2, 3, 3], -1.0, 1.0),
                In::F(&[2, 3, 2, 2], -1.0, 1.0),
            ],
            move |x| x[0].conv_transpose2d(&x[1], &beyond),
            move |x| conv_transpose_ref(&x[0], &x[1], &beyond, [0, 1, 1, 0]),
        ),
        row(
            "conv_transpose2d",
            vec![
                In::F(&[2, 4, 3, 4], -1.0, 1.0),
                In::F(&[4, 3, 3, 2], -1.0, 1.0),
            ],
            move |x| ops::conv_transpose2d(&x[0], &x[1], &general),
            move |x| conv_transpose_ref(&x[0], &x[1], &general, [1, 0, 0, 1]),
        ),
        row(
            // `same`: output = input * stride; the 3 - 2 = 1 extra cell is cut at the end.
            "conv_transpose2d",
            vec![
                In::F(&[1, 2, 3, 3], -1.0, 1.0),
                In::F(&[2, 2, 3, 3], -1.0, 1.0),
            ],
            move |x| x[0].conv_transpose2d(&x[1], &same),
            move |x| conv_transpose_ref(&x[0], &x[1], &same, [0, 1, 0, 1]),
        ),
    ]
}

#[test]
fn ceil_windows_follow_the_ceil_formula() {
    // 7 cells, kernel 2, stride 2: floor gives 3 windows, ceil 4 (the last covers cell 6).
    assert_eq!(ceil_windows(7, 2, 2, 0, 0).len(), 4);
    // 6 cells with padding 1/1, kernel 3, stride 2: ceil((8 - 3) / 2) + 1 = 4, but the
    // fourth would start at padded cell 6, inside the image: kept.
    assert_eq!(ceil_windows(6, 3, 2, 1, 1).len(), 4);
    // 4 cells, kernel 3, stride 2, padding 0/2: ceil((6 - 3) / 2) + 1 = 3, but the third
    // window would start at cell 4, in the trailing padding: dropped.
    assert_eq!(ceil_windows(4, 3, 2, 0, 2).len(), 2);
}
