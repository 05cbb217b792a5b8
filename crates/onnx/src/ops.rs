//! The ONNX operators Spore imports, each written with Spore's own operators (so each
//! has Spore's gradients). An operator, attribute value or input this file does not
//! handle is an error naming the node, its type and the model's opset.

use spore_core::{DType, Error, Result, Tensor};

use crate::api;
use crate::proto::NodeProto;
use crate::tensor::{Attrs, dtype_of, to_tensor};

fn fail(node: &NodeProto, opset: i64, what: &str) -> Error {
    Error::invalid(format!(
        "onnx: node {:?} ({}, opset {opset}): {what}",
        node.name, node.op_type
    ))
}

/// Input `i` (required).
fn input<'a>(
    node: &NodeProto,
    opset: i64,
    args: &'a [Option<Tensor>],
    i: usize,
) -> Result<&'a Tensor> {
    args.get(i)
        .and_then(|a| a.as_ref())
        .ok_or_else(|| fail(node, opset, &format!("input {i} is missing")))
}

/// A constant integer input's values (shapes, axes, pads).
fn ints_of(t: &Tensor) -> Result<Vec<i64>> {
    Ok(t.to_f64_vec()?.iter().map(|&v| v as i64).collect())
}

fn norm_axis(node: &NodeProto, opset: i64, a: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let v = if a < 0 { a + r } else { a };
    if (0..r.max(1)).contains(&v) {
        Ok(v as usize)
    } else {
        Err(fail(
            node,
            opset,
            &format!("axis {a} is out of range for rank {rank}"),
        ))
    }
}

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
                let need =
                    ((o - 1) * stride[d] + (kernel[d] - 1) * dilation[d] + 1).saturating_sub(size);
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

fn conv(node: &NodeProto, opset: i64, args: &[Option<Tensor>]) -> Result<Tensor> {
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

fn pool(node: &NodeProto, opset: i64, args: &[Option<Tensor>], max: bool) -> Result<Tensor> {
    let x = input(node, opset, args, 0)?;
    let at = Attrs::of(node);
    let kernel = pair(node, opset, &at, "kernel_shape", 0)?;
    let stride = pair(node, opset, &at, "strides", 1)?;
    let mut pads = window_pads(node, opset, &at, x.shape(), kernel, stride, [1, 1])?;
    let count_include_pad = at.int("count_include_pad", 0) != 0;
    if at.int("ceil_mode", 0) != 0 {
        if !max && count_include_pad {
            return Err(fail(
                node,
                opset,
                "ceil_mode = 1 with count_include_pad = 1 is not supported",
            ));
        }
        // Ceil mode as padding: the extra bottom/right cells make the floor formula give
        // the ceil count, and pooling never reads padding (a max skips it, a mean
        // without count_include_pad divides by the cells inside), as ceil mode's clipped
        // windows do. A window may not start in the right padding (ONNX's rule).
        for d in 0..2 {
            let size = x.shape().get(2 + d).copied().unwrap_or(0);
            let span = size + pads[2 * d] + pads[2 * d + 1];
            if span < kernel[d] || kernel[d] == 0 {
                continue;
            }
            let mut out = (span - kernel[d]).div_ceil(stride[d]) + 1;
            if (out - 1) * stride[d] >= size + pads[2 * d] {
                out -= 1;
            }
            let needed = (out - 1) * stride[d] + kernel[d];
            pads[2 * d + 1] += needed.saturating_sub(span);
        }
    }
    api::pool2d(x, max, kernel, stride, pads, count_include_pad)
}

fn gemm(node: &NodeProto, opset: i64, args: &[Option<Tensor>]) -> Result<Tensor> {
    let at = Attrs::of(node);
    let (a, b) = (input(node, opset, args, 0)?, input(node, opset, args, 1)?);
    let c = args.get(2).and_then(|c| c.as_ref());
    let (ta, tb) = (at.int("transA", 0) != 0, at.int("transB", 0) != 0);
    api::gemm(
        a,
        b,
        c,
        ta,
        tb,
        at.float("alpha", 1.0),
        at.float("beta", 1.0),
    )
}

/// Reduction axes: the attribute (or, from the opsets that moved them, the input).
fn reduce_axes(
    node: &NodeProto,
    opset: i64,
    args: &[Option<Tensor>],
    rank: usize,
    input_from: i64,
) -> Result<Vec<isize>> {
    let at = Attrs::of(node);
    let raw = if opset >= input_from {
        match args.get(1).and_then(|a| a.as_ref()) {
            Some(t) => Some(ints_of(t)?),
            None => None,
        }
    } else {
        at.ints("axes")
    };
    Ok(match raw {
        Some(v) if !v.is_empty() => v.into_iter().map(|a| a as isize).collect(),
        _ if at.int("noop_with_empty_axes", 0) != 0 => vec![],
        _ => (0..rank as isize).collect(),
    })
}

fn reshape(node: &NodeProto, opset: i64, args: &[Option<Tensor>]) -> Result<Tensor> {
    let x = input(node, opset, args, 0)?;
    let target = ints_of(input(node, opset, args, 1)?)?;
    if Attrs::of(node).int("allowzero", 0) != 0 && target.contains(&0) {
        return Err(fail(
            node,
            opset,
            "allowzero = 1 with a 0 in the shape (an empty tensor) is not supported",
        ));
    }
    api::reshape(x, &target).map_err(|e| fail(node, opset, &e.to_string()))
}

fn batch_norm(node: &NodeProto, opset: i64, args: &[Option<Tensor>]) -> Result<Tensor> {
    if Attrs::of(node).int("training_mode", 0) != 0 {
        return Err(fail(
            node,
            opset,
            "training_mode = 1 is not supported (import evaluates with the running statistics)",
        ));
    }
    let t = |i| input(node, opset, args, i);
    let eps = Attrs::of(node).float("epsilon", 1e-5) as f64;
    api::batch_norm(t(0)?, t(1)?, t(2)?, t(3)?, t(4)?, eps)
}

fn layer_norm(node: &NodeProto, opset: i64, args: &[Option<Tensor>]) -> Result<Tensor> {
    let x = input(node, opset, args, 0)?;
    let at = Attrs::of(node);
    let first = norm_axis(node, opset, at.int("axis", -1), x.rank())?;
    let bias = args.get(2).and_then(|b| b.as_ref());
    api::layer_norm(
        x,
        input(node, opset, args, 1)?,
        bias,
        first,
        at.float("epsilon", 1e-5) as f64,
    )
}

fn unary(
    node: &NodeProto,
    opset: i64,
    args: &[Option<Tensor>],
    f: fn(&Tensor) -> Result<Tensor>,
) -> Result<Vec<Tensor>> {
    Ok(vec![f(input(node, opset, args, 0)?)?])
}

fn binary(
    node: &NodeProto,
    opset: i64,
    args: &[Option<Tensor>],
    f: fn(&Tensor, &Tensor) -> Result<Tensor>,
) -> Result<Vec<Tensor>> {
    Ok(vec![f(
        input(node, opset, args, 0)?,
        input(node, opset, args, 1)?,
    )?])
}

/// ONNX's `Expand`: broadcasting to a shape aligned on the right with the input's.
fn expand(node: &NodeProto, opset: i64, args: &[Option<Tensor>]) -> Result<Tensor> {
    let x = input(node, opset, args, 0)?;
    let target = ints_of(input(node, opset, args, 1)?)?;
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

/// Runs one node on its inputs (`None` for omitted optional inputs).
pub fn run_node(node: &NodeProto, args: &[Option<Tensor>], opset: i64) -> Result<Vec<Tensor>> {
    if !node.domain.is_empty() && node.domain != "ai.onnx" {
        return Err(fail(
            node,
            opset,
            &format!("domain {:?} is not supported", node.domain),
        ));
    }
    elementwise(node, args, opset)
}

/// Elementwise functions, products and convolutions.
fn elementwise(node: &NodeProto, args: &[Option<Tensor>], opset: i64) -> Result<Vec<Tensor>> {
    let at = Attrs::of(node);
    let x0 = || input(node, opset, args, 0);
    let one = |t: Tensor| Ok(vec![t]);
    match node.op_type.as_str() {
        "Conv" => one(conv(node, opset, args)?),
        "Gemm" => one(gemm(node, opset, args)?),
        "MatMul" => binary(node, opset, args, |a, b| a.matmul(b)),
        "Add" => binary(node, opset, args, |a, b| a.add(b)),
        "Sub" => binary(node, opset, args, |a, b| a.sub(b)),
        "Mul" => binary(node, opset, args, |a, b| a.mul(b)),
        "Div" => binary(node, opset, args, |a, b| a.div(b)),
        "Pow" => binary(node, opset, args, |a, b| a.pow(b)),
        "Equal" => binary(node, opset, args, |a, b| a.equal(b)),
        "Less" => binary(node, opset, args, |a, b| a.less(b)),
        "Greater" => binary(node, opset, args, |a, b| a.greater(b)),
        "Sqrt" => unary(node, opset, args, |x| x.sqrt()),
        "Exp" => unary(node, opset, args, |x| x.exp()),
        "Log" => unary(node, opset, args, |x| x.log()),
        "Relu" => unary(node, opset, args, |x| x.relu()),
        "Sigmoid" => unary(node, opset, args, |x| x.sigmoid()),
        "Tanh" => unary(node, opset, args, |x| x.tanh()),
        "Erf" => unary(node, opset, args, |x| x.erf()),
        "Neg" => unary(node, opset, args, |x| x.neg()),
        "Reciprocal" => unary(node, opset, args, |x| x.ones_like().div(x)),
        "Sign" => unary(node, opset, args, |x| x.sign()),
        "Sin" => unary(node, opset, args, |x| x.sin()),
        "Cos" => unary(node, opset, args, |x| x.cos()),
        "Not" => unary(node, opset, args, |x| x.equal(&x.zeros_like())),
        "Max" | "Min" if args.len() == 2 => {
            let f = if node.op_type == "Max" {
                Tensor::maximum
            } else {
                Tensor::minimum
            };
            Ok(vec![f(
                input(node, opset, args, 0)?,
                input(node, opset, args, 1)?,
            )?])
        }
        "LessOrEqual" => binary(node, opset, args, |a, b| a.less_equal(b)),
        "GreaterOrEqual" => binary(node, opset, args, |a, b| a.greater_equal(b)),
        "Abs" => unary(node, opset, args, |x| x.abs()),
        "LeakyRelu" => {
            let x = x0()?;
            let alpha = at.float("alpha", 0.01) as f64;
            let zero = x.zeros_like();
            one(Tensor::select(
                &x.greater(&zero)?,
                x,
                &x.mul_scalar(alpha)?,
            )?)
        }
        "Gelu" => one(x0()?.gelu(at.string("approximate", "none") == "tanh")?),
        "Clip" => {
            let mut y = x0()?.clone();
            if let Some(lo) = args.get(1).and_then(|a| a.as_ref()) {
                y = y.maximum(lo)?;
            }
            if let Some(hi) = args.get(2).and_then(|a| a.as_ref()) {
                y = y.minimum(hi)?;
            }
            one(y)
        }
        _ => network(node, args, opset),
    }
}

/// Pooling, normalisation, reductions and softmax.
fn network(node: &NodeProto, args: &[Option<Tensor>], opset: i64) -> Result<Vec<Tensor>> {
    let at = Attrs::of(node);
    let x0 = || input(node, opset, args, 0);
    let one = |t: Tensor| Ok(vec![t]);
    match node.op_type.as_str() {
        "Softmax" | "LogSoftmax" => {
            let x = x0()?;
            let default = if opset >= 13 { -1 } else { 1 };
            let a = at.int("axis", default);
            if opset < 13 && norm_axis(node, opset, a, x.rank())? != x.rank() - 1 {
                return Err(fail(
                    node,
                    opset,
                    "before opset 13, Softmax flattens from its axis; only the last axis is supported",
                ));
            }
            let a = a as isize;
            one(if node.op_type == "Softmax" {
                x.softmax(a)?
            } else {
                x.log_softmax(a)?
            })
        }
        "MaxPool" => {
            if node.output.len() > 1 && !node.output[1].is_empty() {
                return Err(fail(node, opset, "the Indices output is not supported"));
            }
            one(pool(node, opset, args, true)?)
        }
        "AveragePool" => one(pool(node, opset, args, false)?),
        "GlobalAveragePool" => one(x0()?.mean(&[2, 3], true)?),
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" => {
            let x = x0()?;
            let from = if node.op_type == "ReduceSum" { 13 } else { 18 };
            let axes = reduce_axes(node, opset, args, x.rank(), from)?;
            let keep = at.int("keepdims", 1) != 0;
            if axes.is_empty() {
                return one(x.clone());
            }
            one(match node.op_type.as_str() {
                "ReduceMean" => x.mean(&axes, keep)?,
                "ReduceSum" => x.sum(&axes, keep)?,
                "ReduceMin" => x.min(&axes, keep)?,
                _ => x.max(&axes, keep)?,
            })
        }
        "BatchNormalization" => one(batch_norm(node, opset, args)?),
        "LayerNormalization" => one(layer_norm(node, opset, args)?),

        _ => structural(node, args, opset),
    }
}

/// Shapes, layouts, constants and indexing.
fn structural(node: &NodeProto, args: &[Option<Tensor>], opset: i64) -> Result<Vec<Tensor>> {
    let at = Attrs::of(node);
    let x0 = || input(node, opset, args, 0);
    let one = |t: Tensor| Ok(vec![t]);
    match node.op_type.as_str() {
        "Expand" => one(expand(node, opset, args)?),
        "Identity" => one(x0()?.clone()),
        "Dropout" => one(x0()?.clone()),
        "Flatten" => {
            let x = x0()?;
            let a = norm_axis(node, opset, at.int("axis", 1), x.rank() + 1)?;
            let outer: usize = x.shape()[..a].iter().product();
            one(x.reshape(&[outer, x.numel() / outer.max(1)])?)
        }
        "Reshape" => one(reshape(node, opset, args)?),
        "Transpose" => {
            let x = x0()?;
            let perm: Vec<usize> = match at.ints("perm") {
                Some(p) => p.iter().map(|&v| v as usize).collect(),
                None => (0..x.rank()).rev().collect(),
            };
            one(x.permute(&perm)?)
        }
        "Squeeze" | "Unsqueeze" => {
            let x = x0()?;
            let axes = if opset >= 13 {
                match args.get(1).and_then(|a| a.as_ref()) {
                    Some(t) => ints_of(t)?,
                    None => vec![],
                }
            } else {
                at.ints("axes").unwrap_or_default()
            };
            if node.op_type == "Squeeze" {
                let axes: Vec<isize> = if axes.is_empty() {
                    (0..x.rank())
                        .filter(|&i| x.shape()[i] == 1)
                        .map(|i| i as isize)
                        .collect()
                } else {
                    axes.iter().map(|&a| a as isize).collect()
                };
                one(x.squeeze(&axes)?)
            } else {
                let rank = x.rank() + axes.len();
                let mut norm: Vec<usize> = axes
                    .iter()
                    .map(|&a| norm_axis(node, opset, a, rank))
                    .collect::<Result<_>>()?;
                norm.sort_unstable();
                let mut y = x.clone();
                for a in norm {
                    y = y.unsqueeze(a as isize)?;
                }
                one(y)
            }
        }
        "Concat" => {
            let xs: Vec<&Tensor> = args.iter().flatten().collect();
            let a = at.int("axis", 0);
            one(Tensor::concat(&xs, a as isize)?)
        }
        "Shape" => {
            let dims: Vec<i64> = x0()?.shape().iter().map(|&d| d as i64).collect();
            let n = dims.len();
            one(Tensor::from_vec(dims, &[n])?)
        }
        "Constant" => match at.tensor("value") {
            Some(t) => one(to_tensor(t, None)?),
            None => Err(fail(
                node,
                opset,
                &format!(
                    "only the `value` attribute is supported, the node has {:?}",
                    at.names()
                ),
            )),
        },
        "ConstantOfShape" => {
            let shape: Vec<usize> = ints_of(x0()?)?.iter().map(|&d| d.max(0) as usize).collect();
            let (value, dtype) = match at.tensor("value") {
                Some(t) => {
                    let v = to_tensor(t, None)?;
                    (v.to_f64_vec()?.first().copied().unwrap_or(0.0), v.dtype())
                }
                None => (0.0, DType::F32),
            };
            one(Tensor::full(&shape, value, dtype)?)
        }
        "Cast" => one(x0()?.cast(dtype_of(at.int("to", 1) as i32)?)?),
        "Where" => {
            let c = input(node, opset, args, 0)?;
            one(Tensor::select(
                c,
                input(node, opset, args, 1)?,
                input(node, opset, args, 2)?,
            )?)
        }
        "Gather" => {
            let x = x0()?;
            let idx = input(node, opset, args, 1)?;
            let a = at.int("axis", 0);
            one(x.gather(&idx.cast(DType::I64)?, a as isize)?)
        }
        other => Err(fail(
            node,
            opset,
            &format!("operator {other:?} is not supported"),
        )),
    }
}
