//! Rows of the primitives only the graph compiler makes (`Conv2DReLU`, `Conv2DEpilogue`,
//! `MaxPoolGradReLU`, `FusedReduceSum`, `FusedElementwise`; the products' are in `table_products.rs`) and of
//! the side-effect op (`Print`), each against a naive reference.

use spore_core::Tensor;
use spore_core::op::{ConvAttrs, ConvEpilogueParts, Op, PrintSegment};
use spore_kernels::DType;

use super::reference::{self as r, Nd};
use super::table::{In, Row, row};
use super::table_structural::{POOL_2X2, apply_2x2_pool_grad, max_pool_2x2_grad_ref};

fn apply(op: Op, x: &[Tensor]) -> spore_core::Result<Tensor> {
    let args: Vec<&Tensor> = x.iter().collect();
    spore_core::apply::apply(op, &args, std::panic::Location::caller())
}

/// `relu(conv(x, w))` in f64.
fn conv_relu_ref(x: &Nd, w: &Nd, s: &r::ConvSpec) -> Nd {
    let (oh, ow) = r::conv_out(x.shape[2], x.shape[3], w.shape[2], w.shape[3], s);
    let mut y = Nd::zeros(&[x.shape[0], w.shape[0], oh, ow]);
    r::conv_terms(&x.shape, &w.shape, s, |xi, wi, yi| {
        y.data[yi] += x.data[xi] * w.data[wi]
    });
    y.map(|v| v.max(0.0))
}

/// The op's attributes for a reference convolution's spec.
fn attrs_of(spec: &r::ConvSpec) -> ConvAttrs {
    ConvAttrs {
        stride: spec.stride,
        dilation: spec.dilation,
        pads: spec.pads,
        groups: spec.groups,
    }
}

fn conv_row(x: &'static [usize], w: &'static [usize], spec: r::ConvSpec) -> Row {
    let attrs = attrs_of(&spec);
    row(
        "Conv2DReLU",
        vec![In::F(x, -1.0, 1.0), In::F(w, -1.0, 1.0)],
        move |x| apply(Op::Conv2dRelu(attrs), x),
        move |x| conv_relu_ref(&x[0], &x[1], &spec),
    )
    .no_grad()
}

/// `conv(x, w)` in f64, then per output channel `* scale + shift`, `+ addend` and ReLU
/// (each where `parts` has it; the operands follow x and w in that order).
fn conv_epilogue_ref(x: &[Nd], s: &r::ConvSpec, parts: ConvEpilogueParts) -> Nd {
    let (input, w) = (&x[0], &x[1]);
    let (oh, ow) = r::conv_out(input.shape[2], input.shape[3], w.shape[2], w.shape[3], s);
    let mut y = Nd::zeros(&[input.shape[0], w.shape[0], oh, ow]);
    r::conv_terms(&input.shape, &w.shape, s, |xi, wi, yi| {
        y.data[yi] += input.data[xi] * w.data[wi]
    });
    let mut operands = x[2..].iter();
    let mut next = |present: bool| present.then(|| operands.next().unwrap().data.clone());
    let (scale, shift, addend) = (next(parts.scale), next(parts.shift), next(parts.addend));
    let (channels, plane) = (w.shape[0], oh * ow);
    for (i, v) in y.data.iter_mut().enumerate() {
        let o = (i / plane) % channels;
        *v = scale.as_ref().map_or(*v, |s| *v * s[o]);
        *v = shift.as_ref().map_or(*v, |t| *v + t[o]);
        *v = addend.as_ref().map_or(*v, |d| *v + d[i]);
        if parts.relu {
            *v = v.max(0.0);
        }
    }
    y
}

/// `Conv2DEpilogue` on an inference BatchNorm with a residual and ReLU, and on a bias
/// alone, with strides, padding and groups in the second.
fn conv_epilogue_rows() -> Vec<Row> {
    let all = ConvEpilogueParts {
        scale: true,
        shift: true,
        addend: true,
        relu: true,
    };
    let bias = ConvEpilogueParts {
        shift: true,
        ..Default::default()
    };
    let same = r::ConvSpec {
        stride: [1, 1],
        dilation: [1, 1],
        pads: [1; 4],
        groups: 1,
    };
    let strided = r::ConvSpec {
        stride: [2, 1],
        dilation: [1, 1],
        pads: [1, 0, 0, 1],
        groups: 2,
    };
    let make = |inputs: Vec<In>, spec: r::ConvSpec, parts: ConvEpilogueParts| {
        let attrs = attrs_of(&spec);
        row(
            "Conv2DEpilogue",
            inputs,
            move |x| apply(Op::Conv2dEpilogue { attrs, parts }, x),
            move |x| conv_epilogue_ref(x, &spec, parts),
        )
        .no_grad()
    };
    vec![
        make(
            vec![
                In::F(&[2, 3, 5, 5], -1.0, 1.0),
                In::F(&[4, 3, 3, 3], -1.0, 1.0),
                In::F(&[1, 4, 1, 1], 0.5, 2.0),
                In::F(&[1, 4, 1, 1], -1.0, 1.0),
                In::F(&[2, 4, 5, 5], -1.0, 1.0),
            ],
            same,
            all,
        ),
        make(
            vec![
                In::F(&[1, 4, 6, 5], -1.0, 1.0),
                In::F(&[6, 2, 3, 2], -1.0, 1.0),
                In::F(&[6, 1, 1], -1.0, 1.0),
            ],
            strided,
            bias,
        ),
    ]
}

pub fn compiled_rows() -> Vec<Row> {
    [conv_print_rows(), conv_epilogue_rows(), fused_rows()]
        .into_iter()
        .flatten()
        .collect::<Vec<Row>>()
}

fn conv_print_rows() -> Vec<Row> {
    let plain = r::ConvSpec {
        stride: [1, 1],
        dilation: [1, 1],
        pads: [0; 4],
        groups: 1,
    };
    vec![
        // LeNet's first layer: the path that applies the ReLU while copying rows out.
        conv_row(&[2, 1, 32, 32], &[6, 1, 5, 5], plain),
        // Strides, dilation, padding and groups: the ReLU applied after the product.
        conv_row(
            &[2, 4, 7, 6],
            &[6, 2, 3, 2],
            r::ConvSpec {
                stride: [2, 1],
                dilation: [1, 2],
                pads: [1, 0, 2, 1],
                groups: 2,
            },
        ),
        // Print writes its text and tensors to standard output (captured by the test
        // harness) and returns a 0-d Int32 zero, which keeps it in graphs.
        row(
            "Print",
            vec![In::F(&[2, 3], -1.0, 1.0)],
            |x| {
                apply(
                    Op::Print(vec![
                        PrintSegment::Text("row:".into()),
                        PrintSegment::Tensor,
                    ]),
                    x,
                )
            },
            |_| Nd::new(&[], vec![0.0]),
        )
        .no_grad()
        .dtype(DType::I32),
    ]
}

/// Runs a two-input fused program `instrs` (in the inputs' float dtype) on `x`.
fn run_fused(
    x: &[Tensor],
    instrs: Vec<spore_core::prims::fused::FusedInstr>,
) -> spore_core::Result<Tensor> {
    let program = spore_core::prims::fused::FusedProgram {
        num_inputs: 2,
        instrs,
        compute: x[0].dtype(),
        out_dtype: x[0].dtype(),
    };
    spore_core::apply::apply(
        Op::Fused(program),
        &[&x[0], &x[1]],
        std::panic::Location::caller(),
    )
}

fn fused_rows() -> Vec<Row> {
    vec![
        row(
            "MaxPoolGradReLU",
            // Mostly negative inputs: windows whose maximum is not positive, where the
            // mask decides, are common.
            vec![
                In::F(&[1, 2, 4, 4], -1.0, 0.2),
                In::F(&[1, 2, 2, 2], -1.0, 1.0),
            ],
            |x| apply_2x2_pool_grad(Op::MaxPool2dGradOfRelu(POOL_2X2), x),
            |x| {
                // MaxPoolGrad's reference, then zero wherever the pooled input is not
                // positive (ReLU's gradient through its output).
                let dx = max_pool_2x2_grad_ref(&x[0], &x[1]);
                r::zip(&dx, &x[0], |d, y| if y > 0.0 { d } else { 0.0 })
            },
        )
        .no_grad(),
        row(
            "FusedReduceSum",
            vec![In::F(&[2, 3, 4], -1.0, 1.0), In::F(&[3, 1], -1.0, 1.0)],
            |x| {
                use spore_core::prims::fused::{FusedInstr as I, FusedProgram};
                use spore_kernels::{BinaryFn, UnaryFn};
                // Σ over axes 0 and 2 of exp(a) * b, b broadcast along both.
                let program = FusedProgram {
                    num_inputs: 2,
                    instrs: vec![I::Unary(UnaryFn::Exp, 0), I::Binary(BinaryFn::Mul, 2, 1)],
                    compute: x[0].dtype(),
                    out_dtype: x[0].dtype(),
                };
                spore_core::apply::apply(
                    Op::FusedReduceSum {
                        program,
                        axes: vec![0, 2],
                        keep_dims: false,
                    },
                    &[&x[0], &x[1]],
                    std::panic::Location::caller(),
                )
            },
            |x| {
                let product = r::zip(&x[0].map(f64::exp), &x[1], |a, b| a * b);
                r::reduce(&product, &[0, 2], false, |v| v.iter().sum())
            },
        )
        .no_grad(),
        row(
            "FusedElementwise",
            vec![In::F(&[2, 3], -1.0, 1.0), In::F(&[3], -1.0, 1.0)],
            |x| {
                use spore_core::prims::fused::FusedInstr as I;
                use spore_kernels::{BinaryFn, CompareFn, UnaryFn};
                // select(a > b, exp(a) * b, a - b)
                run_fused(
                    x,
                    vec![
                        I::Compare(CompareFn::Greater, 0, 1),
                        I::Unary(UnaryFn::Exp, 0),
                        I::Binary(BinaryFn::Mul, 3, 1),
                        I::Binary(BinaryFn::Sub, 0, 1),
                        I::Select(2, 4, 5),
                    ],
                )
            },
            |x| r::zip(&x[0], &x[1], |a, b| if a > b { a.exp() * b } else { a - b }),
        )
        .no_grad(),
        // A scalar read by every kind of instruction over ten chunks in two thread
        // blocks: it is held as one chunk of copies, read again for every chunk.
        row(
            "FusedElementwise",
            vec![In::F(&[5, 1000], -1.0, 1.0), In::F(&[], -0.5, 0.5)],
            |x| {
                use spore_core::prims::fused::FusedInstr as I;
                use spore_kernels::{BinaryFn, CompareFn, UnaryFn};
                // select(a > s, a * s, neg(s) - a)
                run_fused(
                    x,
                    vec![
                        I::Compare(CompareFn::Greater, 0, 1),
                        I::Binary(BinaryFn::Mul, 0, 1),
                        I::Unary(UnaryFn::Neg, 1),
                        I::Binary(BinaryFn::Sub, 4, 0),
                        I::Select(2, 3, 5),
                    ],
                )
            },
            |x| {
                let s = x[1].data[0];
                let v = x[0]
                    .data
                    .iter()
                    .map(|&a| if a > s { a * s } else { -s - a })
                    .collect();
                Nd::new(&[5, 1000], v)
            },
        )
        .no_grad(),
    ]
}
