//! Slice, Split, Pad and OneHot: ONNX's inputs and attributes (constant inputs from
//! opsets 10, 11, 13 and 18, attributes before) read and passed to [`crate::api`].

use spore_core::{Result, Tensor};

use super::{fail, input, ints_of};
use crate::api;
use crate::proto::NodeProto;
use crate::tensor::Attrs;

/// An optional constant input's integers, or the attribute of the same name before the
/// opset that moved it to an input.
fn ints_input_or_attr(
    node: &NodeProto,
    opset: i64,
    args: &[Option<Tensor>],
    i: usize,
    name: &str,
    input_from: i64,
) -> Result<Option<Vec<i64>>> {
    if opset >= input_from {
        args.get(i)
            .and_then(|a| a.as_ref())
            .map(ints_of)
            .transpose()
    } else {
        Ok(Attrs::of(node).ints(name))
    }
}

/// ONNX's Slice.
pub(super) fn slice(node: &NodeProto, opset: i64, args: &[Option<Tensor>]) -> Result<Tensor> {
    let x = input(node, opset, args, 0)?;
    let read = |i: usize, name: &str| ints_input_or_attr(node, opset, args, i, name, 10);
    let required = |i: usize, name: &str| -> Result<Vec<i64>> {
        read(i, name)?.ok_or_else(|| fail(node, opset, &format!("`{name}` is missing")))
    };
    let (starts, ends) = (required(1, "starts")?, required(2, "ends")?);
    let axes = read(3, "axes")?;
    let steps = if opset >= 10 { read(4, "steps")? } else { None };
    api::slice(x, &starts, &ends, axes.as_deref(), steps.as_deref())
        .map_err(|e| fail(node, opset, &e.to_string()))
}

/// ONNX's Split: by `split` sizes, or into as many parts as the node has outputs.
pub(super) fn split(node: &NodeProto, opset: i64, args: &[Option<Tensor>]) -> Result<Vec<Tensor>> {
    let x = input(node, opset, args, 0)?;
    let at = Attrs::of(node);
    let parts = node.output.len();
    let sizes = ints_input_or_attr(node, opset, args, 1, "split", 13)?.unwrap_or_default();
    if sizes.iter().any(|&v| v < 0) || !(sizes.is_empty() || sizes.len() == parts) {
        return Err(fail(
            node,
            opset,
            &format!("split {sizes:?}: expected {parts} non-negative sizes"),
        ));
    }
    if at.int("num_outputs", parts as i64) != parts as i64 {
        return Err(fail(
            node,
            opset,
            &format!("num_outputs differs from the {parts} outputs"),
        ));
    }
    let sizes: Vec<usize> = sizes.iter().map(|&v| v as usize).collect();
    api::split(x, at.int("axis", 0), &sizes, parts).map_err(|e| fail(node, opset, &e.to_string()))
}

/// ONNX's Pad (constant, reflect, edge and wrap; negative amounts crop).
pub(super) fn pad(node: &NodeProto, opset: i64, args: &[Option<Tensor>]) -> Result<Tensor> {
    let x = input(node, opset, args, 0)?;
    let at = Attrs::of(node);
    let pads = ints_input_or_attr(node, opset, args, 1, "pads", 11)?
        .ok_or_else(|| fail(node, opset, "`pads` is missing"))?;
    let value = match args.get(2).and_then(|a| a.as_ref()) {
        Some(v) if opset >= 11 => v.to_f64_vec()?.first().copied().unwrap_or(0.0),
        _ => at.float("value", 0.0) as f64,
    };
    let axes = match args.get(3).and_then(|a| a.as_ref()) {
        Some(t) if opset >= 18 => Some(ints_of(t)?),
        _ => None,
    };
    api::pad(
        x,
        &pads,
        axes.as_deref(),
        &at.string("mode", "constant"),
        value,
    )
    .map_err(|e| fail(node, opset, &e.to_string()))
}

/// ONNX's OneHot.
pub(super) fn one_hot(node: &NodeProto, opset: i64, args: &[Option<Tensor>]) -> Result<Tensor> {
    let indices = input(node, opset, args, 0)?;
    let depth = input(node, opset, args, 1)?.to_f64_vec()?;
    let depth = match depth.as_slice() {
        [d] if *d >= 1.0 => *d as usize,
        _ => {
            return Err(fail(
                node,
                opset,
                &format!("depth {depth:?}: expected one value of at least 1"),
            ));
        }
    };
    let values = input(node, opset, args, 2)?;
    let axis = Attrs::of(node).int("axis", -1) as isize;
    api::one_hot(indices, depth, values, axis).map_err(|e| fail(node, opset, &e.to_string()))
}
