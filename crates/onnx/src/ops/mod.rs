//! The ONNX operators Spore imports, each written with Spore's own operators (so each
//! has Spore's gradients). An operator, attribute value or input this file does not
//! handle is an error naming the node, its type and the model's opset.

use spore_core::{DType, Error, Result, Tensor};

mod attributes;
mod slicing;
mod window;

use crate::api;
use crate::proto::NodeProto;
use crate::tensor::{Attrs, dtype_of, to_tensor};

pub(super) fn fail(node: &NodeProto, opset: i64, what: &str) -> Error {
    Error::invalid(format!(
        "onnx: node {:?} ({}, opset {opset}): {what}",
        node.name, node.op_type
    ))
}

/// Input `i` (required).
pub(super) fn input<'a>(
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
pub(super) fn ints_of(t: &Tensor) -> Result<Vec<i64>> {
    Ok(t.to_f64_vec()?.iter().map(|&v| v as i64).collect())
}

pub(super) fn norm_axis(node: &NodeProto, opset: i64, a: i64, rank: usize) -> Result<usize> {
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
    if Attrs::of(node).int("spatial", 1) == 0 {
        return Err(fail(
            node,
            opset,
            "spatial = 0 (statistics per element, not per channel) is not supported",
        ));
    }
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

/// Runs one node on its inputs (`None` for omitted optional inputs).
pub fn run_node(node: &NodeProto, args: &[Option<Tensor>], opset: i64) -> Result<Vec<Tensor>> {
    if !node.domain.is_empty() && node.domain != "ai.onnx" {
        return Err(fail(
            node,
            opset,
            &format!("domain {:?} is not supported", node.domain),
        ));
    }
    let known = attributes::known(&node.op_type);
    if let Some(a) = node
        .attribute
        .iter()
        .find(|a| !known.contains(&a.name.as_str()))
    {
        return Err(fail(
            node,
            opset,
            &format!("attribute {:?} is not supported", a.name),
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
        "Conv" => one(window::conv(node, opset, args)?),
        "ConvTranspose" => one(window::conv_transpose(node, opset, args)?),
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
        "LeakyRelu" => one(api::leaky_relu(x0()?, at.float("alpha", 0.01))?),
        "Gelu" => one(x0()?.gelu(at.string("approximate", "none") == "tanh")?),
        "Clip" => {
            let x = x0()?;
            // Before opset 11 the bounds are attributes.
            let (lo, hi) = if opset < 11 {
                let bound = |name: &str| -> Result<Option<Tensor>> {
                    if node.attribute.iter().any(|a| a.name == name) {
                        Ok(Some(Tensor::full(
                            &[],
                            at.float(name, 0.0) as f64,
                            x.dtype(),
                        )?))
                    } else {
                        Ok(None)
                    }
                };
                (bound("min")?, bound("max")?)
            } else {
                (
                    args.get(1).and_then(|a| a.clone()),
                    args.get(2).and_then(|a| a.clone()),
                )
            };
            one(api::clip(x, lo.as_ref(), hi.as_ref())?)
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
            one(window::pool(node, opset, args, true)?)
        }
        "AveragePool" => one(window::pool(node, opset, args, false)?),
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
        "Expand" => one(api::expand(x0()?, &ints_of(input(node, opset, args, 1)?)?)?),
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
                one(api::squeeze(x, &axes)?)
            } else {
                one(api::unsqueeze(x, &axes).map_err(|e| fail(node, opset, &e.to_string()))?)
            }
        }
        "Concat" => {
            let xs: Vec<&Tensor> = args.iter().flatten().collect();
            let a = at.int("axis", 0);
            one(Tensor::concat(&xs, a as isize)?)
        }
        "Shape" => {
            let dims: Vec<i64> = x0()?.shape().iter().map(|&d| d as i64).collect();
            // Opset 15's `start`/`end`: a slice of the dimensions, clamped.
            let r = dims.len() as i64;
            let clip = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
            let (s, e) = (clip(at.int("start", 0)), clip(at.int("end", r)));
            let kept = dims[s..e.max(s)].to_vec();
            let n = kept.len();
            one(Tensor::from_vec(kept, &[n])?)
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
        "Slice" => one(slicing::slice(node, opset, args)?),
        "Split" => slicing::split(node, opset, args),
        "Pad" => one(slicing::pad(node, opset, args)?),
        "OneHot" => one(slicing::one_hot(node, opset, args)?),
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
