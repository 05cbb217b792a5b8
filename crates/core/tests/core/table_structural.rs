//! The op table's structural rows: movement, convolution, pooling, indexing, random,
//! fused and composite ops, with the references they need (matrix products are in
//! `table_products.rs`).

use spore_core::op::{ConvAttrs, Op, PoolAttrs};
use spore_core::ops::{Conv2dOptions, PadMode, Pool2dOptions};
use spore_core::{DType, Tensor};

use super::reference::{self as r, Nd};
use super::table::{In, Row, bool_of, row};

fn conv_ref(x: &Nd, w: &Nd, s: &r::ConvSpec) -> Nd {
    let (oh, ow) = r::conv_out(x.shape[2], x.shape[3], w.shape[2], w.shape[3], s);
    let mut y = Nd::zeros(&[x.shape[0], w.shape[0], oh, ow]);
    r::conv_terms(&x.shape, &w.shape, s, |xi, wi, yi| {
        y.data[yi] += x.data[xi] * w.data[wi]
    });
    y
}

const CONV: r::ConvSpec = r::ConvSpec {
    stride: [2, 1],
    dilation: [1, 2],
    pads: [1, 0, 2, 1],
    groups: 2,
};
const CONV_ATTRS: ConvAttrs = ConvAttrs {
    stride: [2, 1],
    dilation: [1, 2],
    pads: [1, 0, 2, 1],
    groups: 2,
};
// x [2, 4, 7, 6], w [6, 2, 3, 2] -> y [2, 6, 3, 7]
const X_SHAPE: [usize; 4] = [2, 4, 7, 6];
const W_SHAPE: [usize; 4] = [6, 2, 3, 2];

fn max_pool_ref(x: &Nd, k: [usize; 2], s: [usize; 2], pads: [usize; 4]) -> Nd {
    let mut out = vec![];
    let (oh, ow) = r::pool_windows(&x.shape, k, s, pads, |_, _, cells| {
        out.push(
            cells
                .iter()
                .map(|&c| x.data[c])
                .fold(f64::NEG_INFINITY, f64::max),
        )
    });
    Nd::new(&[x.shape[0], x.shape[1], oh, ow], out)
}

/// 2x2 windows, stride 2, no padding: the max-pool gradient rows' geometry.
pub const POOL_2X2: PoolAttrs = PoolAttrs {
    kernel: [2, 2],
    stride: [2, 2],
    pads: [0; 4],
    count_include_pad: false,
    ceil_mode: false,
};

/// Applies a max-pool gradient op to (x, dy).
pub fn apply_2x2_pool_grad(op: Op, x: &[Tensor]) -> spore_core::Result<Tensor> {
    spore_core::apply::apply(op, &[&x[0], &x[1]], std::panic::Location::caller())
}

/// Each output gradient of 2x2 / stride-2 max pooling sent to its window's first maximum.
pub fn max_pool_2x2_grad_ref(x: &Nd, dy: &Nd) -> Nd {
    let mut dx = Nd::zeros(&x.shape);
    r::pool_windows(&x.shape, [2, 2], [2, 2], [0; 4], |p, o, cells| {
        let best = cells
            .iter()
            .cloned()
            .fold(cells[0], |b, c| if x.data[c] > x.data[b] { c } else { b });
        dx.data[best] += dy.data[p * 4 + o];
    });
    dx
}

fn avg_pool_ref(x: &Nd, k: [usize; 2], s: [usize; 2], pads: [usize; 4], include_pad: bool) -> Nd {
    let mut out = vec![];
    let (oh, ow) = r::pool_windows(&x.shape, k, s, pads, |_, _, cells| {
        let d = if include_pad {
            (k[0] * k[1]) as f64
        } else {
            cells.len() as f64
        };
        out.push(cells.iter().map(|&c| x.data[c]).sum::<f64>() / d)
    });
    Nd::new(&[x.shape[0], x.shape[1], oh, ow], out)
}

/// Philox-based uniform reference (the generator itself is checked against the published
/// known-answer vectors in the kernels' tests).
fn uniform_ref(key: u64, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let b = spore_kernels::random::philox(
                [(i / 4) as u32, ((i / 4) >> 32) as u32, 0, 0],
                [key as u32, (key >> 32) as u32],
            );
            (b[i % 4] >> 8) as f64 / (1u64 << 24) as f64
        })
        .collect()
}

pub fn structural_rows() -> Vec<Row> {
    [
        movement_rows(),
        conv_rows(),
        conv_gradient_rows(),
        pool_rows(),
        index_and_random_rows(),
        composite_rows(),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<Row>>()
}

fn movement_rows() -> Vec<Row> {
    vec![
        row(
            "Reshape",
            vec![In::F(&[2, 3, 4], -1.0, 1.0)],
            |x| x[0].reshape(&[4, 6]),
            |x| Nd::new(&[4, 6], x[0].data.clone()),
        ),
        row(
            "Reshape",
            vec![In::F(&[3, 4], -1.0, 1.0)],
            |x| x[0].transpose()?.reshape(&[2, 6]),
            |x| Nd::new(&[2, 6], r::permute(&x[0], &[1, 0]).data),
        ),
        row(
            "Transpose",
            vec![In::F(&[2, 3, 4], -1.0, 1.0)],
            |x| x[0].permute(&[2, 0, 1]),
            |x| r::permute(&x[0], &[2, 0, 1]),
        ),
        row(
            "BroadcastTo",
            vec![In::F(&[3, 1], -1.0, 1.0)],
            |x| x[0].broadcast_to(&[2, 3, 4]),
            |x| r::zip(&x[0], &Nd::zeros(&[2, 3, 4]), |a, _| a),
        ),
        row(
            "StridedSlice",
            vec![In::F(&[5, 6], -1.0, 1.0)],
            |x| x[0].strided_slice(&[1, -1], &[5, 0], &[2, -2]),
            |x| {
                let mut v = vec![];
                for i in [1, 3] {
                    for j in [5, 3, 1] {
                        v.push(x[0].at(&[i, j]));
                    }
                }
                Nd::new(&[2, 3], v)
            },
        ),
        row(
            "StridedSliceGrad",
            vec![In::F(&[2, 3], -1.0, 1.0)],
            |x| {
                spore_core::apply::apply(
                    Op::StridedSliceGrad {
                        input_shape: vec![5, 6],
                        begin: vec![1, 5],
                        step: vec![2, -2],
                    },
                    &[&x[0]],
                    std::panic::Location::caller(),
                )
            },
            |x| {
                let mut out = Nd::zeros(&[5, 6]);
                for (a, i) in [1, 3].iter().enumerate() {
                    for (b, j) in [5, 3, 1].iter().enumerate() {
                        out.data[i * 6 + j] = x[0].at(&[a, b]);
                    }
                }
                out
            },
        ),
        row(
            "Pad",
            vec![In::F(&[2, 3], -1.0, 1.0)],
            |x| x[0].pad(&[(1, 0), (2, 1)], 0.5),
            |x| {
                let mut out = Nd::new(&[3, 6], vec![0.5; 18]);
                for i in 0..2 {
                    for j in 0..3 {
                        out.data[(i + 1) * 6 + j + 2] = x[0].at(&[i, j]);
                    }
                }
                out
            },
        ),
        row(
            "Concat",
            vec![
                In::F(&[2, 1, 2], -1.0, 1.0),
                In::F(&[2, 3, 2], -1.0, 1.0),
                In::F(&[2, 2, 2], -1.0, 1.0),
            ],
            |x| Tensor::concat(&[&x[0], &x[1], &x[2]], 1),
            |x| {
                let mut v = vec![];
                for b in 0..2 {
                    for t in x {
                        for i in 0..t.shape[1] {
                            for j in 0..2 {
                                v.push(t.at(&[b, i, j]));
                            }
                        }
                    }
                }
                Nd::new(&[2, 6, 2], v)
            },
        ),
    ]
}

fn conv_rows() -> Vec<Row> {
    vec![
        row(
            "Conv2D",
            vec![In::F(&X_SHAPE, -1.0, 1.0), In::F(&W_SHAPE, -1.0, 1.0)],
            |x| {
                x[0].conv2d(
                    &x[1],
                    &Conv2dOptions {
                        stride: [2, 1],
                        dilation: [1, 2],
                        pad_mode: PadMode::Pad([1, 0, 2, 1]),
                        groups: 2,
                    },
                )
            },
            |x| conv_ref(&x[0], &x[1], &CONV),
        ),
        row(
            "Conv2D",
            vec![
                In::F(&[2, 3, 6, 5], -1.0, 1.0),
                In::F(&[4, 3, 3, 3], -1.0, 1.0),
            ],
            |x| {
                x[0].conv2d(
                    &x[1],
                    &Conv2dOptions::default().stride(2).pad_mode(PadMode::Same),
                )
            },
            |x| {
                // same: out = ceil(6/2)=3, ceil(5/2)=3; total pad = (3-1)*2+3-6 = 1 -> (0, 1); (3-1)*2+3-5 = 2 -> (1, 1)
                conv_ref(
                    &x[0],
                    &x[1],
                    &r::ConvSpec {
                        stride: [2, 2],
                        dilation: [1, 1],
                        pads: [0, 1, 1, 1],
                        groups: 1,
                    },
                )
            },
        ),
        row(
            // Unit strides, no padding (LeNet's convolutions): the plain im2col path.
            "Conv2D",
            vec![
                In::F(&[3, 2, 6, 7], -1.0, 1.0),
                In::F(&[4, 2, 3, 2], -1.0, 1.0),
            ],
            |x| x[0].conv2d(&x[1], &Conv2dOptions::default()),
            |x| {
                conv_ref(
                    &x[0],
                    &x[1],
                    &r::ConvSpec {
                        stride: [1, 1],
                        dilation: [1, 1],
                        pads: [0; 4],
                        groups: 1,
                    },
                )
            },
        ),
        row(
            // Seven small images: the kernels lower several images into one GEMM (and a
            // shorter last group), with groups, strides, dilation and padding; the
            // gradient check covers both backward kernels on the same path.
            "Conv2D",
            vec![
                In::F(&[7, 4, 5, 6], -1.0, 1.0),
                In::F(&[6, 2, 3, 2], -1.0, 1.0),
            ],
            |x| {
                x[0].conv2d(
                    &x[1],
                    &Conv2dOptions {
                        stride: [2, 1],
                        dilation: [1, 2],
                        pad_mode: PadMode::Pad([1, 0, 2, 1]),
                        groups: 2,
                    },
                )
            },
            |x| conv_ref(&x[0], &x[1], &CONV),
        ),
    ]
}

fn conv_gradient_rows() -> Vec<Row> {
    vec![
        row(
            "Conv2DBackpropInput",
            vec![In::F(&[2, 6, 3, 7], -1.0, 1.0), In::F(&W_SHAPE, -1.0, 1.0)],
            |x| {
                spore_core::apply::apply(
                    Op::Conv2dBackpropInput {
                        attrs: CONV_ATTRS,
                        input_shape: X_SHAPE,
                    },
                    &[&x[0], &x[1]],
                    std::panic::Location::caller(),
                )
            },
            |x| {
                let mut dx = Nd::zeros(&X_SHAPE);
                r::conv_terms(&X_SHAPE, &W_SHAPE, &CONV, |xi, wi, yi| {
                    dx.data[xi] += x[0].data[yi] * x[1].data[wi]
                });
                dx
            },
        ),
        row(
            "Conv2DBackpropFilter",
            vec![In::F(&[2, 6, 3, 7], -1.0, 1.0), In::F(&X_SHAPE, -1.0, 1.0)],
            |x| {
                spore_core::apply::apply(
                    Op::Conv2dBackpropFilter {
                        attrs: CONV_ATTRS,
                        weight_shape: W_SHAPE,
                    },
                    &[&x[0], &x[1]],
                    std::panic::Location::caller(),
                )
            },
            |x| {
                let mut dw = Nd::zeros(&W_SHAPE);
                r::conv_terms(&X_SHAPE, &W_SHAPE, &CONV, |xi, wi, yi| {
                    dw.data[wi] += x[0].data[yi] * x[1].data[xi]
                });
                dw
            },
        ),
    ]
}

fn pool_rows() -> Vec<Row> {
    vec![
        row(
            "MaxPool",
            vec![In::F(&[2, 3, 5, 5], -1.0, 1.0)],
            |x| x[0].max_pool2d(&Pool2dOptions::new(2, 2)),
            |x| max_pool_ref(&x[0], [2, 2], [2, 2], [0; 4]),
        ),
        row(
            // Overlapping 3x3 windows, stride 1, no padding: the general unpadded path.
            "MaxPool",
            vec![In::F(&[2, 2, 5, 6], -1.0, 1.0)],
            |x| x[0].max_pool2d(&Pool2dOptions::new(3, 1)),
            |x| max_pool_ref(&x[0], [3, 3], [1, 1], [0; 4]),
        ),
        row(
            "MaxPool",
            vec![In::F(&[1, 2, 5, 4], -1.0, 1.0)],
            |x| x[0].max_pool2d(&Pool2dOptions::new(3, 2).pad_mode(PadMode::Same)),
            |x| max_pool_ref(&x[0], [3, 3], [2, 2], [1, 1, 0, 1]),
        ),
        row(
            "MaxPoolGrad",
            vec![
                In::F(&[1, 2, 4, 4], -1.0, 1.0),
                In::F(&[1, 2, 2, 2], -1.0, 1.0),
            ],
            |x| apply_2x2_pool_grad(Op::MaxPool2dGrad(POOL_2X2), x),
            |x| max_pool_2x2_grad_ref(&x[0], &x[1]),
        )
        .no_grad(),
        row(
            "AvgPool",
            vec![In::F(&[2, 2, 5, 5], -1.0, 1.0)],
            |x| x[0].avg_pool2d(&Pool2dOptions::new(3, 2).pad_mode(PadMode::Same)),
            |x| avg_pool_ref(&x[0], [3, 3], [2, 2], [1, 1, 1, 1], false),
        ),
        row(
            "AvgPool",
            vec![In::F(&[1, 2, 4, 4], -1.0, 1.0)],
            |x| x[0].avg_pool2d(&Pool2dOptions::new(2, 1).pad_mode(PadMode::Pad([1, 0, 0, 1]))),
            |x| avg_pool_ref(&x[0], [2, 2], [1, 1], [1, 0, 0, 1], true),
        ),
        row(
            "AvgPoolGrad",
            vec![In::F(&[1, 2, 2, 2], -1.0, 1.0)],
            |x| {
                spore_core::apply::apply(
                    Op::AvgPool2dGrad {
                        attrs: PoolAttrs {
                            kernel: [3, 3],
                            stride: [2, 2],
                            pads: [1, 1, 1, 1],
                            count_include_pad: false,
                            ceil_mode: false,
                        },
                        input_shape: [1, 2, 4, 4],
                    },
                    &[&x[0]],
                    std::panic::Location::caller(),
                )
            },
            |x| {
                let mut dx = Nd::zeros(&[1, 2, 4, 4]);
                r::pool_windows(
                    &[1, 2, 4, 4],
                    [3, 3],
                    [2, 2],
                    [1, 1, 1, 1],
                    |p, o, cells| {
                        for &c in &cells {
                            dx.data[c] += x[0].data[p * 4 + o] / cells.len() as f64;
                        }
                    },
                );
                dx
            },
        ),
    ]
}

fn index_and_random_rows() -> Vec<Row> {
    vec![
        row(
            "Gather",
            vec![In::F(&[3, 4, 2], -1.0, 1.0), In::I(&[2, 3], -4, 3)],
            |x| x[0].gather(&x[1], 1),
            |x| {
                let mut v = vec![];
                for a in 0..3 {
                    for &i in &x[1].data {
                        let i = if i < 0.0 { i + 4.0 } else { i } as usize;
                        for c in 0..2 {
                            v.push(x[0].at(&[a, i, c]));
                        }
                    }
                }
                Nd::new(&[3, 2, 3, 2], v)
            },
        ),
        row(
            "ScatterAdd",
            vec![
                In::F(&[4, 3], -1.0, 1.0),
                In::I(&[5], 0, 3),
                In::F(&[5, 3], -1.0, 1.0),
            ],
            |x| x[0].scatter_add(&x[1], &x[2], 0),
            |x| {
                let mut out = x[0].clone();
                for (k, &i) in x[1].data.iter().enumerate() {
                    for c in 0..3 {
                        out.data[i as usize * 3 + c] += x[2].at(&[k, c]);
                    }
                }
                out
            },
        ),
        row(
            "OneHot",
            vec![In::I(&[2, 3], -1, 4)],
            |x| x[0].one_hot(4, DType::F32),
            |x| {
                let mut v = vec![];
                for &i in &x[0].data {
                    for d in 0..4 {
                        v.push(bool_of(i == d as f64));
                    }
                }
                Nd::new(&[2, 3, 4], v)
            },
        )
        .no_grad()
        .dtype(DType::F32),
        row(
            "UniformReal",
            vec![In::I(&[], 0, 1000)],
            |x| Tensor::uniform_from_key(&x[0].cast(DType::I64)?, &[3, 5]),
            |x| Nd::new(&[3, 5], uniform_ref(x[0].data[0] as u64, 15)),
        )
        .no_grad()
        .dtype(DType::F32),
    ]
}

fn composite_rows() -> Vec<Row> {
    vec![
        // Composite operations, checked the same way.
        row(
            "softmax",
            vec![In::F(&[3, 5], -3.0, 3.0)],
            |x| x[0].softmax(-1),
            |x| {
                let mut v = x[0].data.clone();
                for r in v.chunks_mut(5) {
                    let s: f64 = r.iter().map(|a| a.exp()).sum();
                    r.iter_mut().for_each(|a| *a = a.exp() / s);
                }
                Nd::new(&[3, 5], v)
            },
        ),
        row(
            "log_softmax",
            vec![In::F(&[3, 5], -3.0, 3.0)],
            |x| x[0].log_softmax(0),
            |x| {
                let t = r::permute(&x[0], &[1, 0]);
                let mut v = t.data.clone();
                for r in v.chunks_mut(3) {
                    let s: f64 = r.iter().map(|a| a.exp()).sum::<f64>().ln();
                    r.iter_mut().for_each(|a| *a -= s);
                }
                r::permute(&Nd::new(&[5, 3], v), &[1, 0])
            },
        ),
        row(
            "mean",
            vec![In::F(&[2, 3, 4], -1.0, 1.0)],
            |x| x[0].mean(&[1], false),
            |x| {
                r::reduce(&x[0], &[1], false, |v| {
                    v.iter().sum::<f64>() / v.len() as f64
                })
            },
        ),
        row(
            "var",
            vec![In::F(&[2, 3, 4], -1.0, 1.0)],
            |x| x[0].var(&[0, 2], true, 1),
            |x| {
                r::reduce(&x[0], &[0, 2], true, |v| {
                    let m = v.iter().sum::<f64>() / v.len() as f64;
                    v.iter().map(|a| (a - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64
                })
            },
        ),
        row(
            "gelu",
            vec![In::F(&[3, 4], -3.0, 3.0)],
            |x| x[0].gelu(false),
            |x| x[0].map(|a| 0.5 * a * (1.0 + libm::erf(a / 2f64.sqrt()))),
        ),
        row(
            "gelu_tanh",
            vec![In::F(&[3, 4], -3.0, 3.0)],
            |x| x[0].gelu(true),
            |x| {
                x[0].map(|a| {
                    0.5 * a
                        * (1.0
                            + ((2.0 / std::f64::consts::PI).sqrt() * (a + 0.044715 * a.powi(3)))
                                .tanh())
                })
            },
        ),
        row(
            "stack",
            vec![In::F(&[2, 3], -1.0, 1.0), In::F(&[2, 3], -1.0, 1.0)],
            |x| Tensor::stack(&[&x[0], &x[1]], -1),
            |x| {
                let mut v = vec![];
                for i in 0..6 {
                    v.push(x[0].data[i]);
                    v.push(x[1].data[i]);
                }
                Nd::new(&[2, 3, 2], v)
            },
        ),
        row(
            "squeeze_flatten",
            vec![In::F(&[2, 1, 3, 1, 2], -1.0, 1.0)],
            |x| x[0].squeeze(&[1, -2])?.unsqueeze(0)?.flatten(2),
            |x| Nd::new(&[1, 2, 6], x[0].data.clone()),
        ),
    ]
}
