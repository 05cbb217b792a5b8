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
use spore_core::ops::{ConvTranspose2dOptions, PadMode, PaddingMode};
use spore_core::{DType, Error, Result, Tensor};

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
    add_channel_bias(y, bias)
}

/// `y` plus one bias value per channel (axis 1 of NCHW), when there is a bias.
fn add_channel_bias(y: Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    match bias {
        Some(b) => y.add(&b.reshape(&[1, b.numel(), 1, 1])?),
        None => Ok(y),
    }
}

/// ONNX's MaxPool (`max`) or AveragePool on NCHW.
#[allow(clippy::too_many_arguments)] // ONNX's attributes, one argument each
pub fn pool2d(
    x: &Tensor,
    max: bool,
    kernel: [usize; 2],
    stride: [usize; 2],
    pads: [usize; 4],
    count_include_pad: bool,
    ceil_mode: bool,
) -> Result<Tensor> {
    let attrs = PoolAttrs {
        kernel,
        stride,
        pads,
        count_include_pad,
        ceil_mode,
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

/// ONNX's ConvTranspose on NCHW with explicit `pads` (top, bottom, left, right).
#[allow(clippy::too_many_arguments)] // ONNX's attributes, one argument each
pub fn conv_transpose2d(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    stride: [usize; 2],
    pads: [usize; 4],
    dilation: [usize; 2],
    output_padding: [usize; 2],
    groups: usize,
) -> Result<Tensor> {
    let opts = ConvTranspose2dOptions {
        stride,
        dilation,
        pad_mode: PadMode::Pad(pads),
        output_padding,
        groups: groups.max(1),
    };
    let y = x.conv_transpose2d(w, &opts)?;
    add_channel_bias(y, bias)
}

/// Normalises ONNX axes (negative counts from the end) for a rank-`rank` tensor.
fn axes_of(what: &str, axes: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut out: Vec<usize> = vec![];
    for &a in axes {
        let v = if a < 0 { a + rank as i64 } else { a };
        if !(0..rank as i64).contains(&v) {
            return Err(Error::invalid(format!(
                "{what}: axis {a} is out of range for rank {rank}"
            )));
        }
        if out.contains(&(v as usize)) {
            return Err(Error::invalid(format!(
                "{what}: axes {axes:?} repeat an axis"
            )));
        }
        out.push(v as usize);
    }
    Ok(out)
}

/// ONNX's Slice on `axes` (`None`: the first `starts.len()` axes), NumPy's clamping.
pub fn slice(
    x: &Tensor,
    starts: &[i64],
    ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> Result<Tensor> {
    let r = x.rank();
    let all: Vec<i64> = (0..starts.len() as i64).collect();
    let axes = axes_of("slice", axes.unwrap_or(&all), r)?;
    let ones = vec![1; starts.len()];
    let steps = steps.unwrap_or(&ones);
    if ends.len() != starts.len()
        || axes.len() != starts.len()
        || steps.len() != starts.len()
        || steps.contains(&0)
    {
        return Err(Error::invalid(format!(
            "slice: {} starts, {} ends, {} axes and steps {steps:?} (one each, non-zero)",
            starts.len(),
            ends.len(),
            axes.len()
        )));
    }
    let (mut b, mut e, mut s) = (vec![0isize; r], vec![isize::MAX / 2; r], vec![1isize; r]);
    // ONNX writes "to the end" as INT64_MAX and "before the start" as INT64_MIN; halved,
    // they still clamp to the axis and cannot overflow when a length is added.
    let clamp = |v: i64| (v as isize).clamp(isize::MIN / 2, isize::MAX / 2);
    for (k, &a) in axes.iter().enumerate() {
        let dim = x.shape()[a] as isize;
        let mut start = clamp(starts[k]);
        if steps[k] < 0 && dim > 0 {
            // Walking backwards ONNX clamps the start to [0, dim - 1] (NumPy, which
            // `strided_slice` follows, to [-1, dim - 1]: an empty slice).
            start = (if start < 0 { start + dim } else { start }).clamp(0, dim - 1);
        }
        // Any step of at least the axis's length takes one element: clamped alike.
        (b[a], e[a], s[a]) = (start, clamp(ends[k]), clamp(steps[k]));
    }
    x.strided_slice(&b, &e, &s)
}

/// ONNX's Split along `axis`: parts of the given `sizes`, or (`sizes` empty) `parts`
/// near-equal parts, the last one smaller.
pub fn split(x: &Tensor, axis: i64, sizes: &[usize], parts: usize) -> Result<Vec<Tensor>> {
    let axis = axes_of("split", &[axis], x.rank())?[0];
    let n = x.shape()[axis];
    let sizes: Vec<usize> = if sizes.is_empty() {
        let each = n.div_ceil(parts.max(1));
        (0..parts)
            .map(|k| each.min(n.saturating_sub(k * each)))
            .collect()
    } else {
        sizes.to_vec()
    };
    if sizes.iter().sum::<usize>() != n {
        return Err(Error::invalid(format!(
            "split: sizes {sizes:?} do not add up to {n}"
        )));
    }
    let mut at = 0;
    sizes
        .iter()
        .map(|&len| {
            let part = x.narrow(axis as isize, at, len);
            at += len;
            part
        })
        .collect()
}

/// ONNX's Pad: `pads` holds every begin then every end (negative crops) for `axes`
/// (`None`: all axes); `mode` is constant, reflect, edge or wrap.
pub fn pad(
    x: &Tensor,
    pads: &[i64],
    axes: Option<&[i64]>,
    mode: &str,
    value: f64,
) -> Result<Tensor> {
    let n = pads.len() / 2;
    let all: Vec<i64> = (0..x.rank() as i64).collect();
    let axes = axes_of("pad", axes.unwrap_or(&all), x.rank())?;
    if !pads.len().is_multiple_of(2) || axes.len() != n {
        return Err(Error::invalid(format!(
            "pad: pads {pads:?} need a begin and an end for each of {} axes",
            axes.len()
        )));
    }
    let mut per_axis = vec![(0isize, 0isize); x.rank()];
    for (k, &a) in axes.iter().enumerate() {
        per_axis[a] = (pads[k] as isize, pads[n + k] as isize);
    }
    let mode = match mode {
        "constant" => PaddingMode::Constant(value),
        "reflect" => PaddingMode::Reflect,
        "edge" => PaddingMode::Replicate,
        "wrap" => PaddingMode::Circular,
        other => {
            return Err(Error::invalid(format!(
                "pad: mode {other:?} is not constant, reflect, edge or wrap"
            )));
        }
    };
    x.pad_with(&per_axis, mode)
}

/// ONNX's OneHot: `values` = [off, on]; negative indices count back from `depth`.
pub fn one_hot(indices: &Tensor, depth: usize, values: &Tensor, axis: isize) -> Result<Tensor> {
    if values.numel() != 2 {
        return Err(Error::invalid(format!(
            "one_hot: values must be [off, on], got shape {:?}",
            values.shape()
        )));
    }
    let flat = values.reshape(&[2])?;
    let off = flat.narrow(0, 0, 1)?.reshape(&[])?;
    let on = flat.narrow(0, 1, 1)?.reshape(&[])?;
    let idx = indices.cast(DType::I64)?;
    let negative = idx.less(&idx.zeros_like())?;
    let wrapped = Tensor::select(&negative, &idx.add_scalar(depth as f64)?, &idx)?;
    wrapped.one_hot_with(depth, &on, &off, axis)
}

/// ONNX's LeakyRelu: `x` where positive, `alpha · x` elsewhere.
pub fn leaky_relu(x: &Tensor, alpha: f32) -> Result<Tensor> {
    Tensor::select(
        &x.greater(&x.zeros_like())?,
        x,
        &x.mul_scalar(alpha as f64)?,
    )
}

/// ONNX's Clip: `x` bounded below by `lo` and above by `hi` where given.
pub fn clip(x: &Tensor, lo: Option<&Tensor>, hi: Option<&Tensor>) -> Result<Tensor> {
    let mut y = x.clone();
    if let Some(lo) = lo {
        y = y.maximum(lo)?;
    }
    if let Some(hi) = hi {
        y = y.minimum(hi)?;
    }
    Ok(y)
}

/// ONNX's Expand: broadcasting to `target` aligned on the right with the input's shape
/// (a 1 in either keeps the other's dimension).
pub fn expand(x: &Tensor, target: &[i64]) -> Result<Tensor> {
    let rank = target.len().max(x.rank());
    let shape: Vec<usize> = (0..rank)
        .map(|i| {
            let t = target
                .len()
                .checked_sub(rank - i)
                .map_or(1, |j| target[j].max(1) as usize);
            let s = x.rank().checked_sub(rank - i).map_or(1, |j| x.shape()[j]);
            if s == 1 { t } else { s }
        })
        .collect();
    x.broadcast_to(&shape)
}

/// ONNX's Squeeze: the given axes of length 1 removed (every such axis when `axes` is
/// empty).
pub fn squeeze(x: &Tensor, axes: &[i64]) -> Result<Tensor> {
    let axes: Vec<isize> = if axes.is_empty() {
        (0..x.rank())
            .filter(|&i| x.shape()[i] == 1)
            .map(|i| i as isize)
            .collect()
    } else {
        axes.iter().map(|&a| a as isize).collect()
    };
    x.squeeze(&axes)
}

/// ONNX's Unsqueeze: axes of length 1 inserted at `axes`, positions of the result.
pub fn unsqueeze(x: &Tensor, axes: &[i64]) -> Result<Tensor> {
    let mut norm = axes_of("unsqueeze", axes, x.rank() + axes.len())?;
    norm.sort_unstable();
    let mut y = x.clone();
    for a in norm {
        y = y.unsqueeze(a as isize)?;
    }
    Ok(y)
}
