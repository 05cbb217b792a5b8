//! The Rust spelling of each ONNX operator `spore convert` writes: one expression per
//! node, with Spore's tensor methods and [`crate::api`], or the reason it cannot be
//! written (indices or shapes that are only known when the graph runs).

use std::collections::HashMap;

use spore_core::Tensor;

use crate::import::OnnxNetwork;
use crate::proto::NodeProto;
use crate::tensor::Attrs;

/// `v` as a Rust `f32` expression: `0.5f32`, `2.0f32`, or `f32::NAN` and the infinities
/// (which have no literal).
pub(super) fn f32_literal(v: f32) -> String {
    float_literal(
        format!("{v:?}"),
        v.is_nan(),
        v.is_infinite(),
        v < 0.0,
        "f32",
    )
}

/// [`f32_literal`] for `f64`.
fn f64_literal(v: f64) -> String {
    float_literal(
        format!("{v:?}"),
        v.is_nan(),
        v.is_infinite(),
        v < 0.0,
        "f64",
    )
}

fn float_literal(debug: String, nan: bool, infinite: bool, negative: bool, ty: &str) -> String {
    match (nan, infinite, negative) {
        (true, _, _) => format!("{ty}::NAN"),
        (_, true, true) => format!("{ty}::NEG_INFINITY"),
        (_, true, false) => format!("{ty}::INFINITY"),
        _ if debug.contains(['.', 'e']) => format!("{debug}{ty}"),
        _ => format!("{debug}.0{ty}"),
    }
}

/// The integer values of a node input known at conversion time (an initializer or a
/// `Constant`).
fn known_ints(net: &OnnxNetwork, consts: &HashMap<String, Tensor>, name: &str) -> Option<Vec<i64>> {
    consts
        .get(name)
        .or_else(|| net.constant(name))
        .and_then(|t| t.to_f64_vec().ok())
        .map(|v| v.iter().map(|&x| x as i64).collect())
}

/// A node's inputs (as Rust names) and attributes, read as the generated code needs
/// them.
struct Spelling<'a> {
    at: Attrs<'a>,
    a: &'a [String],
}

impl<'a> Spelling<'a> {
    fn new(node: &'a NodeProto, a: &'a [String]) -> Spelling<'a> {
        Spelling {
            at: Attrs::of(node),
            a,
        }
    }

    fn arg(&self, i: usize) -> std::result::Result<String, String> {
        self.a
            .get(i)
            .cloned()
            .ok_or_else(|| format!("input {i} is missing"))
    }

    /// `Some(&x)` for a present optional input, else `None`.
    fn opt(&self, i: usize) -> String {
        self.a
            .get(i)
            .filter(|s| !s.is_empty())
            .map_or("None".to_string(), |s| format!("Some(&{s})"))
    }

    fn pair(&self, n: &str) -> std::result::Result<[i64; 2], String> {
        match self.at.ints(n) {
            None => Ok([1, 1]),
            Some(v) if v.len() == 2 => Ok([v[0], v[1]]),
            Some(v) => Err(format!("{n} {v:?} is not 2-D")),
        }
    }

    /// (top, bottom, left, right) from `pads` or `auto_pad` (SAME needs shapes).
    fn pads(&self) -> std::result::Result<[i64; 4], String> {
        match self.at.string("auto_pad", "NOTSET").as_str() {
            "NOTSET" => {
                let p = self.at.ints("pads").unwrap_or_else(|| vec![0; 4]);
                if p.len() != 4 {
                    return Err(format!("pads {p:?} are not 2-D"));
                }
                Ok([p[0], p[2], p[1], p[3]])
            }
            "VALID" => Ok([0; 4]),
            other => Err(format!(
                "auto_pad {other} needs the input's shape (not converted)"
            )),
        }
    }
}

/// The statement's right-hand side for `node`, or why it cannot be written.
pub(super) fn expression(
    net: &OnnxNetwork,
    node: &NodeProto,
    a: &[String],
    consts: &HashMap<String, Tensor>,
) -> std::result::Result<String, String> {
    let at = Attrs::of(node);
    let arg = |i: usize| {
        a.get(i)
            .cloned()
            .ok_or_else(|| format!("input {i} is missing"))
    };
    let unary =
        |m: &str| -> std::result::Result<String, String> { Ok(format!("{}.{m}()?", arg(0)?)) };
    let binary = |m: &str| -> std::result::Result<String, String> {
        Ok(format!("{}.{m}(&{})?", arg(0)?, arg(1)?))
    };
    Ok(match node.op_type.as_str() {
        "GlobalAveragePool" => format!("{}.mean(&[2, 3], true)?", arg(0)?),
        "MatMul" => binary("matmul")?,
        "Add" => binary("add")?,
        "Sub" => binary("sub")?,
        "Mul" => binary("mul")?,
        "Div" => binary("div")?,
        "Pow" => binary("pow")?,
        "Relu" => unary("relu")?,
        "Sigmoid" => unary("sigmoid")?,
        "Tanh" => unary("tanh")?,
        "Exp" => unary("exp")?,
        "Log" => unary("log")?,
        "Sqrt" => unary("sqrt")?,
        "Erf" => unary("erf")?,
        "Neg" => unary("neg")?,
        "Abs" => unary("abs")?,
        "Sign" => unary("sign")?,
        "Sin" => unary("sin")?,
        "Cos" => unary("cos")?,
        "Reciprocal" => format!("{x}.ones_like().div(&{x})?", x = arg(0)?),
        "Not" => format!("{x}.equal(&{x}.zeros_like())?", x = arg(0)?),
        "Equal" => binary("equal")?,
        "Less" => binary("less")?,
        "Greater" => binary("greater")?,
        "LessOrEqual" => binary("less_equal")?,
        "GreaterOrEqual" => binary("greater_equal")?,
        "Max" if a.len() == 2 => binary("maximum")?,
        "Min" if a.len() == 2 => binary("minimum")?,
        "Where" => format!("Tensor::select(&{}, &{}, &{})?", arg(0)?, arg(1)?, arg(2)?),
        "LeakyRelu" => format!(
            "api::leaky_relu(&{}, {})?",
            arg(0)?,
            f32_literal(at.float("alpha", 0.01))
        ),
        "Gather" => format!(
            "{}.gather(&{}.cast(DType::I64)?, {})?",
            arg(0)?,
            arg(1)?,
            at.int("axis", 0)
        ),
        "Cast" => format!(
            "{}.cast(DType::{:?})?",
            arg(0)?,
            crate::tensor::dtype_of(at.int("to", 1) as i32).map_err(|e| e.to_string())?
        ),
        "Identity" | "Dropout" => format!("{}.clone()", arg(0)?),
        "Gelu" => format!(
            "{}.gelu({})?",
            arg(0)?,
            at.string("approximate", "none") == "tanh"
        ),
        "Softmax" | "LogSoftmax" => {
            let m = if node.op_type == "Softmax" {
                "softmax"
            } else {
                "log_softmax"
            };
            format!("{}.{m}({})?", arg(0)?, at.int("axis", -1))
        }
        _ => return windows(net, node, &Spelling::new(node, a), consts),
    })
}

/// Convolutions, products with options, and pooling.
fn windows(
    net: &OnnxNetwork,
    node: &NodeProto,
    sp: &Spelling,
    consts: &HashMap<String, Tensor>,
) -> std::result::Result<String, String> {
    Ok(match node.op_type.as_str() {
        "Conv" => {
            let (s, d, p) = (sp.pair("strides")?, sp.pair("dilations")?, sp.pads()?);
            format!(
                "api::conv2d(&{}, &{}, {}, {s:?}, {p:?}, {d:?}, {})?",
                sp.arg(0)?,
                sp.arg(1)?,
                sp.opt(2),
                sp.at.int("group", 1)
            )
        }
        "Gemm" => format!(
            "api::gemm(&{}, &{}, {}, {}, {}, {}, {})?",
            sp.arg(0)?,
            sp.arg(1)?,
            sp.opt(2),
            sp.at.int("transA", 0) != 0,
            sp.at.int("transB", 0) != 0,
            f32_literal(sp.at.float("alpha", 1.0)),
            f32_literal(sp.at.float("beta", 1.0))
        ),
        "MaxPool" | "AveragePool" => {
            let k = sp
                .at
                .ints("kernel_shape")
                .filter(|k| k.len() == 2)
                .ok_or("kernel_shape is not 2-D")?;
            let (s, p) = (sp.pair("strides")?, sp.pads()?);
            format!(
                "api::pool2d(&{}, {}, {k:?}, {s:?}, {p:?}, {}, {})?",
                sp.arg(0)?,
                node.op_type == "MaxPool",
                sp.at.int("count_include_pad", 0) != 0,
                sp.at.int("ceil_mode", 0) != 0
            )
        }
        "ConvTranspose" => {
            if sp.at.ints("output_shape").is_some() {
                return Err("output_shape needs the input's shape (not converted)".into());
            }
            let (s, d, p) = (sp.pair("strides")?, sp.pair("dilations")?, sp.pads()?);
            let o = sp.at.ints("output_padding").unwrap_or_else(|| vec![0, 0]);
            if o.len() != 2 {
                return Err(format!("output_padding {o:?} is not 2-D"));
            }
            format!(
                "api::conv_transpose2d(&{}, &{}, {}, {s:?}, {p:?}, {d:?}, {o:?}, {})?",
                sp.arg(0)?,
                sp.arg(1)?,
                sp.opt(2),
                sp.at.int("group", 1)
            )
        }
        _ => return slicing(net, node, sp, consts),
    })
}

/// Slice, Split, Pad and OneHot, whose indices, sizes and amounts must be known here.
fn slicing(
    net: &OnnxNetwork,
    node: &NodeProto,
    sp: &Spelling,
    consts: &HashMap<String, Tensor>,
) -> std::result::Result<String, String> {
    let computed = |what: &str| format!("the {what} are computed in the graph");
    // An input's values (`None` when the node omits it: the attribute of older opsets,
    // if any); an input computed in the graph cannot be written as a literal.
    let known = |i: usize, name: &str| -> std::result::Result<Option<Vec<i64>>, String> {
        match node.input.get(i).filter(|n| !n.is_empty()) {
            Some(n) => known_ints(net, consts, n)
                .map(Some)
                .ok_or_else(|| computed(name)),
            None => Ok(sp.at.ints(name)),
        }
    };
    let opt = |v: Option<Vec<i64>>| v.map_or("None".to_string(), |v| format!("Some(&{v:?})"));
    Ok(match node.op_type.as_str() {
        "Slice" => format!(
            "api::slice(&{}, &{:?}, &{:?}, {}, {})?",
            sp.arg(0)?,
            known(1, "starts")?.ok_or_else(|| computed("starts"))?,
            known(2, "ends")?.ok_or_else(|| computed("ends"))?,
            opt(known(3, "axes")?),
            opt(known(4, "steps")?)
        ),
        "Split" => format!(
            "api::split(&{}, {}, &{:?}, {})?",
            sp.arg(0)?,
            sp.at.int("axis", 0),
            known(1, "split")?.unwrap_or_default(),
            node.output.len()
        ),
        "Pad" => {
            let value = match node.input.get(2).filter(|n| !n.is_empty()) {
                Some(n) => consts
                    .get(n)
                    .or_else(|| net.constant(n))
                    .and_then(|t| t.to_f64_vec().ok())
                    .and_then(|v| v.first().copied())
                    .ok_or_else(|| computed("padding value"))?,
                None => sp.at.float("value", 0.0) as f64,
            };
            format!(
                "api::pad(&{}, &{:?}, {}, {:?}, {})?",
                sp.arg(0)?,
                known(1, "pads")?.ok_or_else(|| computed("pads"))?,
                opt(known(3, "axes")?),
                sp.at.string("mode", "constant"),
                f64_literal(value)
            )
        }
        "OneHot" => {
            let depth = known(1, "depth")?
                .filter(|d| d.len() == 1)
                .ok_or_else(|| computed("depth"))?;
            format!(
                "api::one_hot(&{}, {}, &{}, {})?",
                sp.arg(0)?,
                depth[0].max(1),
                sp.arg(2)?,
                sp.at.int("axis", -1)
            )
        }
        "Clip" => {
            // Before opset 11 the bounds are attributes, written as scalars.
            let bound = |i: usize, name: &str| {
                if net.opset >= 11 {
                    sp.opt(i)
                } else if node.attribute.iter().any(|a| a.name == name) {
                    let v = f32_literal(sp.at.float(name, 0.0));
                    format!("Some(&Tensor::scalar({v}))")
                } else {
                    "None".to_string()
                }
            };
            format!(
                "api::clip(&{}, {}, {})?",
                sp.arg(0)?,
                bound(1, "min"),
                bound(2, "max")
            )
        }
        "Squeeze" | "Unsqueeze" => {
            let axes = if net.opset >= 13 {
                known(1, "axes")?
            } else {
                sp.at.ints("axes")
            };
            format!(
                "api::{}(&{}, &{:?})?",
                node.op_type.to_lowercase(),
                sp.arg(0)?,
                axes.unwrap_or_default()
            )
        }
        "Expand" => format!(
            "api::expand(&{}, &{:?})?",
            sp.arg(0)?,
            known(1, "shape")?.ok_or_else(|| computed("shape"))?
        ),
        _ => return shapes(net, node, sp, consts),
    })
}

/// Shape operators, reductions, concatenation and normalisations.
fn shapes(
    net: &OnnxNetwork,
    node: &NodeProto,
    sp: &Spelling,
    consts: &HashMap<String, Tensor>,
) -> std::result::Result<String, String> {
    Ok(match node.op_type.as_str() {
        "Flatten" => {
            let axis = sp.at.int("axis", 1);
            if axis < 0 {
                return Err("a negative Flatten axis is not converted".into());
            }
            format!("api::flatten(&{}, {axis})?", sp.arg(0)?)
        }
        "Reshape" => {
            let shape = node
                .input
                .get(1)
                .and_then(|n| known_ints(net, consts, n))
                .ok_or("the target shape is computed in the graph")?;
            format!("api::reshape(&{}, &{shape:?})?", sp.arg(0)?)
        }
        "Transpose" => {
            let perm = sp
                .at
                .ints("perm")
                .ok_or("Transpose without perm is not converted")?;
            format!("{}.permute(&{perm:?})?", sp.arg(0)?)
        }
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" => {
            let axes = match node.input.get(1).filter(|n| !n.is_empty()) {
                Some(n) => {
                    Some(known_ints(net, consts, n).ok_or("the axes are computed in the graph")?)
                }
                None => sp.at.ints("axes"),
            };
            if axes.is_none() && sp.at.int("noop_with_empty_axes", 0) != 0 {
                return Ok(format!("{}.clone()", sp.arg(0)?));
            }
            let m = match node.op_type.as_str() {
                "ReduceMean" => "mean",
                "ReduceMax" => "max",
                "ReduceMin" => "min",
                _ => "sum",
            };
            // No axes: every axis.
            let x = sp.arg(0)?;
            let axes = axes.map_or_else(
                || format!("(0..{x}.rank() as isize).collect::<Vec<_>>()"),
                |a| format!("{a:?}"),
            );
            format!("{x}.{m}(&{axes}, {})?", sp.at.int("keepdims", 1) != 0)
        }
        "Concat" => {
            let xs: Vec<String> = sp.a.iter().map(|s| format!("&{s}")).collect();
            format!(
                "Tensor::concat(&[{}], {})?",
                xs.join(", "),
                sp.at.int("axis", 0)
            )
        }
        "BatchNormalization" => format!(
            "api::batch_norm(&{}, &{}, &{}, &{}, &{}, {})?",
            sp.arg(0)?,
            sp.arg(1)?,
            sp.arg(2)?,
            sp.arg(3)?,
            sp.arg(4)?,
            sp.at.float("epsilon", 1e-5) as f64
        ),
        "LayerNormalization" => format!(
            "api::layer_norm(&{x}, &{}, {}, ({x}.rank() as i64 + {}) as usize % {x}.rank().max(1), {})?",
            sp.arg(1)?,
            sp.opt(2),
            sp.at.int("axis", -1),
            sp.at.float("epsilon", 1e-5) as f64,
            x = sp.arg(0)?
        ),
        other => {
            return Err(format!(
                "operator {other} has no Rust form in the converter yet"
            ));
        }
    })
}
