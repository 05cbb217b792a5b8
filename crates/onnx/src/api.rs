//! ONNX operators with typed arguments, for code `spore convert` writes (and the
//! importer): each is a few Spore operators, so a converted network reads as Spore code
//! and keeps Spore's gradients.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_onnx::api::{flatten, reshape};
//! let x = Tensor::ones(&[2, 3, 4], DType::F32).unwrap();
//! assert_eq!(reshape(&x, &[0, -1]).unwrap().shape(), &[2, 12]);
//! assert_eq!(flatten(&x, 2).unwrap().shape(), &[6, 4]);
//! ```

use std::panic::Location;

use spore_core::apply::apply;
use spore_core::op::{ConvAttrs, Op, PoolAttrs};
use spore_core::{Error, Result, Tensor};

/// ONNX's Conv on NCHW: `pads` as (top, bottom, left, right).
pub fn conv2d(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    stride: [usize; 2],
    pads: [usize; 4],
    dilation: [usize; 2],
    groups: usize,
) -> Result<Tensor> {
    let attrs = ConvAttrs {
        stride,
        dilation,
        pads,
        groups: groups.max(1),
    };
    let y = apply(Op::Conv2d(attrs), &[x, w], Location::caller())?;
    match bias {
        Some(b) => y.add(&b.reshape(&[1, b.numel(), 1, 1])?),
        None => Ok(y),
    }
}

/// ONNX's MaxPool (`max`) or AveragePool on NCHW.
pub fn pool2d(
    x: &Tensor,
    max: bool,
    kernel: [usize; 2],
    stride: [usize; 2],
    pads: [usize; 4],
    count_include_pad: bool,
) -> Result<Tensor> {
    let attrs = PoolAttrs {
        kernel,
        stride,
        pads,
        count_include_pad,
    };
    let op = if max {
        Op::MaxPool2d(attrs)
    } else {
        Op::AvgPool2d(attrs)
    };
    apply(op, &[x], Location::caller())
}

/// ONNX's Gemm: `alpha · op(a) · op(b) + beta · c`.
pub fn gemm(
    a: &Tensor,
    b: &Tensor,
    c: Option<&Tensor>,
    trans_a: bool,
    trans_b: bool,
    alpha: f32,
    beta: f32,
) -> Result<Tensor> {
    let a = if trans_a { a.transpose()? } else { a.clone() };
    let b = if trans_b { b.transpose()? } else { b.clone() };
    let mut y = a.matmul(&b)?;
    if alpha != 1.0 {
        y = y.mul_scalar(alpha as f64)?;
    }
    match c {
        Some(c) if beta != 1.0 => y.add(&c.mul_scalar(beta as f64)?),
        Some(c) => y.add(c),
        None => Ok(y),
    }
}

/// ONNX's BatchNormalization in inference (running statistics), channels on axis 1.
pub fn batch_norm(
    x: &Tensor,
    scale: &Tensor,
    bias: &Tensor,
    mean: &Tensor,
    var: &Tensor,
    epsilon: f64,
) -> Result<Tensor> {
    let mut b = vec![1usize; x.rank()];
    if let Some(c) = b.get_mut(1) {
        *c = scale.numel();
    }
    let inv = var.add_scalar(epsilon)?.rsqrt()?.mul(scale)?;
    let shift = bias.sub(&mean.mul(&inv)?)?;
    x.mul(&inv.reshape(&b)?)?.add(&shift.reshape(&b)?)
}

/// ONNX's LayerNormalization over the axes from `axis` to the last.
pub fn layer_norm(
    x: &Tensor,
    scale: &Tensor,
    bias: Option<&Tensor>,
    axis: usize,
    epsilon: f64,
) -> Result<Tensor> {
    let axes: Vec<isize> = (axis..x.rank()).map(|a| a as isize).collect();
    let mean = x.mean(&axes, true)?;
    let d = x.sub(&mean)?;
    let var = d.mul(&d)?.mean(&axes, true)?;
    let y = d.mul(&var.add_scalar(epsilon)?.rsqrt()?)?.mul(scale)?;
    match bias {
        Some(b) => y.add(b),
        None => Ok(y),
    }
}

/// ONNX's Reshape: 0 copies the input's dimension, one -1 is inferred.
pub fn reshape(x: &Tensor, target: &[i64]) -> Result<Tensor> {
    let mut shape: Vec<usize> = vec![];
    let mut infer = None;
    for (i, &d) in target.iter().enumerate() {
        match d {
            0 => shape.push(*x.shape().get(i).ok_or_else(|| {
                Error::invalid(format!(
                    "reshape: 0 at axis {i} copies a dimension {:?} lacks",
                    x.shape()
                ))
            })?),
            -1 if infer.is_none() => {
                infer = Some(i);
                shape.push(1);
            }
            d if d >= 0 => shape.push(d as usize),
            _ => {
                return Err(Error::invalid(format!(
                    "reshape: target {target:?} has more than one -1 or another negative"
                )));
            }
        }
    }
    if let Some(i) = infer {
        let known: usize = shape.iter().product();
        if known == 0 || !x.numel().is_multiple_of(known) {
            return Err(Error::invalid(format!(
                "reshape: cannot reshape {:?} to {target:?}",
                x.shape()
            )));
        }
        shape[i] = x.numel() / known;
    }
    x.reshape(&shape)
}

/// ONNX's Flatten: a matrix of the axes before `axis` by the rest.
pub fn flatten(x: &Tensor, axis: usize) -> Result<Tensor> {
    let outer: usize = x.shape()[..axis.min(x.rank())].iter().product();
    x.reshape(&[outer, x.numel() / outer.max(1)])
}
