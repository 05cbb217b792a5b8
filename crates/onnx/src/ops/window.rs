//! Window operators: Conv, ConvTranspose, MaxPool and AveragePool, with ONNX's
//! `auto_pad`, `pads` and (for ConvTranspose) `output_padding` and `output_shape`
//! resolved to explicit padding.

use spore_core::{Result, Tensor};

use super::{fail, input};
use crate::api;
use crate::proto::NodeProto;
use crate::tensor::Attrs;

/// Explicit (top, bottom, left, right) pads of a 2-D window op from `pads`/`auto_pad`.
fn window_pads(
    node: &NodeProto,
    opset: i64,
    at: &Attrs,
    input: &[usize],
    kernel: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
) -> Result<[usize; 4]> {
    let auto = at.string("auto_pad", "NOTSET");
    match auto.as_str() {
        "NOTSET" => {
            let p = at.ints("pads").unwrap_or_else(|| vec![0; 4]);
            if p.len() != 4 || p.iter().any(|&v| v < 0) {
                return Err(fail(
                    node,
                    opset,
                    &format!("pads {p:?}: expected 4 non-negative values for a 2-D window"),
                ));
            }
            Ok([p[0] as usize, p[2] as usize, p[1] as usize, p[3] as usize])
        }
        "VALID" => Ok([0; 4]),
        "SAME_UPPER" | "SAME_LOWER" => {
            let mut out = [0usize; 4];
            for d in 0..2 {
                let size = input[2 + d];
                let o = size.div_ceil(stride[d]);
                let need = (o.saturating_sub(1).saturating_mul(stride[d])
                    + kernel[d].saturating_sub(1).saturating_mul(dilation[d])
                    + 1)
                .saturating_sub(size);
                let (small, big) = (need / 2, need - need / 2);
                let (before, after) = if auto == "SAME_UPPER" {
                    (small, big)
                } else {
                    (big, small)
                };
                out[2 * d] = before;
                out[2 * d + 1] = after;
            }
            Ok(out)
        }
        other => Err(fail(
            node,
            opset,
            &format!("auto_pad {other:?} is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER"),
        )),
    }
}

fn pair(
    node: &NodeProto,
    opset: i64,
    at: &Attrs,
    name: &str,
    default: usize,
) -> Result<[usize; 2]> {
    match at.ints(name) {
        None => Ok([default; 2]),
        Some(v) if v.len() == 2 && v.iter().all(|&x| x > 0) => Ok([v[0] as usize, v[1] as usize]),
        Some(v) => Err(fail(
            node,
            opset,
            &format!("{name} {v:?}: expected 2 positive values (2-D only)"),
        )),
    }
}

pub(super) fn conv(node: &NodeProto, opset: i64, args: &[Option<Tensor>]) -> Result<Tensor> {
    let (x, w) = (input(node, opset, args, 0)?, input(node, opset, args, 1)?);
    if x.rank() != 4 || w.rank() != 4 {
        return Err(fail(
            node,
            opset,
            "only 2-D convolutions (NCHW) are supported",
        ));
    }
    let at = Attrs::of(node);
    let stride = pair(node, opset, &at, "strides", 1)?;
    let dilation = pair(node, opset, &at, "dilations", 1)?;
    let kernel = [w.shape()[2], w.shape()[3]];
    let pads = window_pads(node, opset, &at, x.shape(), kernel, stride, dilation)?;
    let bias = args.get(2).and_then(|b| b.as_ref());
    api::conv2d(
        x,
        w,
        bias,
        stride,
        pads,
        dilation,
        at.int("group", 1).max(1) as usize,
    )
}

pub(super) fn pool(
    node: &NodeProto,
    opset: i64,
    args: &[Option<Tensor>],
    max: bool,
) -> Result<Tensor> {
    let x = input(node, opset, args, 0)?;
    let at = Attrs::of(node);
    if x.rank() != 4 {
        return Err(fail(
            node,
            opset,
            &format!(
                "only 2-D pooling (NCHW) is supported, got shape {:?}",
                x.shape()
            ),
        ));
    }
    if at.ints("kernel_shape").is_none() {
        return Err(fail(node, opset, "`kernel_shape` is missing"));
    }
    let kernel = pair(node, opset, &at, "kernel_shape", 0)?;
    let stride = pair(node, opset, &at, "strides", 1)?;
    if pair(node, opset, &at, "dilations", 1)? != [1, 1] {
        return Err(fail(node, opset, "dilated pooling is not supported"));
    }
    if at.int("storage_order", 0) != 0 {
        return Err(fail(node, opset, "storage_order = 1 is not supported"));
    }
    let pads = window_pads(node, opset, &at, x.shape(), kernel, stride, [1, 1])?;
    let count_include_pad = at.int("count_include_pad", 0) != 0;
    let ceil_mode = at.int("ceil_mode", 0) != 0;
    api::pool2d(x, max, kernel, stride, pads, count_include_pad, ceil_mode)
}

/// ONNX's ConvTranspose on NCHW. Padding comes from `pads`, from `auto_pad` (SAME_*:
/// output = input · stride) or from `output_shape` (the padding that gives that size,
/// the odd cell placed as onnxruntime places it).
pub(super) fn conv_transpose(
    node: &NodeProto,
    opset: i64,
    args: &[Option<Tensor>],
) -> Result<Tensor> {
    let (x, w) = (input(node, opset, args, 0)?, input(node, opset, args, 1)?);
    if x.rank() != 4 || w.rank() != 4 {
        return Err(fail(
            node,
            opset,
            "only 2-D transposed convolutions (NCHW) are supported",
        ));
    }
    let at = Attrs::of(node);
    let stride = pair(node, opset, &at, "strides", 1)?;
    let dilation = pair(node, opset, &at, "dilations", 1)?;
    let output_padding = match at.ints("output_padding") {
        None => [0, 0],
        Some(v) if v.len() == 2 && v.iter().all(|&p| p >= 0) => [v[0] as usize, v[1] as usize],
        Some(v) => {
            return Err(fail(
                node,
                opset,
                &format!("output_padding {v:?}: expected 2 non-negative values"),
            ));
        }
    };
    let auto = at.string("auto_pad", "NOTSET");
    let full = |d: usize| {
        (x.shape()[2 + d].max(1) - 1)
            .saturating_mul(stride[d])
            .saturating_add(dilation[d].saturating_mul(w.shape()[2 + d].max(1) - 1))
            .saturating_add(1 + output_padding[d])
    };
    let target: Option<Vec<i64>> = match (at.ints("output_shape"), auto.as_str()) {
        (Some(s), _) => Some(s.iter().rev().take(2).rev().copied().collect()),
        (None, "SAME_UPPER" | "SAME_LOWER") => Some(
            (0..2)
                .map(|d| (x.shape()[2 + d] * stride[d]) as i64)
                .collect(),
        ),
        _ => None,
    };
    let pads = match target {
        Some(t) if t.len() == 2 => {
            let mut p = [0usize; 4];
            for d in 0..2 {
                let total = (full(d) as i64) - t[d];
                if total < 0 {
                    return Err(fail(
                        node,
                        opset,
                        &format!(
                            "output size {} on axis {} is larger than the {} cells the input reaches",
                            t[d],
                            2 + d,
                            full(d)
                        ),
                    ));
                }
                let (small, big) = ((total / 2) as usize, (total - total / 2) as usize);
                // onnxruntime puts the odd cell at the end for SAME_UPPER, at the start otherwise.
                (p[2 * d], p[2 * d + 1]) = if auto == "SAME_UPPER" {
                    (small, big)
                } else {
                    (big, small)
                };
            }
            p
        }
        Some(t) => {
            return Err(fail(
                node,
                opset,
                &format!("output_shape {t:?}: expected 2 spatial sizes"),
            ));
        }
        None if auto == "VALID" => [0; 4],
        None => window_pads(node, opset, &at, x.shape(), [1, 1], [1, 1], [1, 1])?,
    };
    let groups = at.int("group", 1).max(1) as usize;
    let bias = args.get(2).and_then(|b| b.as_ref());
    api::conv_transpose2d(x, w, bias, stride, pads, dilation, output_padding, groups)
}
