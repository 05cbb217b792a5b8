//! Rows of the primitives only the graph compiler makes that no other file covers
//! (`Conv2DReLU`), and of the side-effect op (`Print`), each against a naive reference.

use spore_core::Tensor;
use spore_core::op::{ConvAttrs, Op, PrintSegment};
use spore_kernels::DType;

use super::reference::{self as r, Nd};
use super::table::{In, Row, row};

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

fn conv_row(x: &'static [usize], w: &'static [usize], spec: r::ConvSpec) -> Row {
    let attrs = ConvAttrs {
        stride: spec.stride,
        dilation: spec.dilation,
        pads: spec.pads,
        groups: spec.groups,
    };
    row(
        "Conv2DReLU",
        vec![In::F(x, -1.0, 1.0), In::F(w, -1.0, 1.0)],
        move |x| apply(Op::Conv2dRelu(attrs), x),
        move |x| conv_relu_ref(&x[0], &x[1], &spec),
    )
    .no_grad()
}

pub fn compiled_rows() -> Vec<Row> {
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
