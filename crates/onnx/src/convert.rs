//! `spore convert`: MindConverter's three outputs for an ONNX model: a checkpoint of its
//! weights (safetensors, loadable with `load_param_into_net`), the Rust source of an
//! equivalent [`Cell`](spore_nn::cell::Cell) to edit and build on (one statement per
//! node, written with Spore's tensor methods and [`crate::api`]), and a report of what
//! each node became. A node the source generator cannot write becomes a statement that
//! returns an error naming it, and the report lists it.
//!
//! ```no_run
//! let c = spore_onnx::convert::convert_file("lenet.onnx".as_ref(), "converted".as_ref(), "LeNetOnnx").unwrap();
//! println!("{}", c.report);
//! ```

use std::collections::HashMap;
use std::fmt::Write;
use std::path::Path;

use spore_core::{DType, Error, Result, Tensor};

use crate::import::{OnnxNetwork, import};
use crate::proto::NodeProto;
use crate::tensor::{Attrs, to_tensor};

/// What a conversion produced.
#[derive(Clone, Debug)]
pub struct Conversion {
    pub source: String,
    pub report: String,
    /// Nodes written as Rust, and nodes left out (their names).
    pub converted: usize,
    pub not_converted: Vec<String>,
}

fn ident(prefix: &str, s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    while out.contains("__") {
        out = out.replace("__", "_");
    }
    format!("{prefix}_{}", out.trim_matches('_'))
}

/// Names every value once, uniquely.
struct Names(HashMap<String, String>, Vec<String>);

impl Names {
    fn get(&mut self, prefix: &str, onnx: &str) -> String {
        if let Some(n) = self.0.get(onnx) {
            return n.clone();
        }
        let mut name = ident(prefix, onnx);
        let mut k = 1;
        while self.1.contains(&name) {
            k += 1;
            name = format!("{}_{k}", ident(prefix, onnx));
        }
        self.1.push(name.clone());
        self.0.insert(onnx.to_string(), name.clone());
        name
    }
}

fn f32_literal(v: f32) -> String {
    let s = format!("{v:?}");
    if s.contains(['.', 'e', 'N', 'i']) {
        s
    } else {
        format!("{s}.0")
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
fn expression(
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
                "api::conv2d(&{}, &{}, {}, [{}, {}], [{}, {}, {}, {}], [{}, {}], {})?",
                sp.arg(0)?,
                sp.arg(1)?,
                sp.opt(2),
                s[0],
                s[1],
                p[0],
                p[1],
                p[2],
                p[3],
                d[0],
                d[1],
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
            if sp.at.int("ceil_mode", 0) != 0 {
                return Err("ceil_mode = 1 is not supported".into());
            }
            let k = sp
                .at
                .ints("kernel_shape")
                .filter(|k| k.len() == 2)
                .ok_or("kernel_shape is not 2-D")?;
            let (s, p) = (sp.pair("strides")?, sp.pads()?);
            format!(
                "api::pool2d(&{}, {}, [{}, {}], [{}, {}], [{}, {}, {}, {}], {})?",
                sp.arg(0)?,
                node.op_type == "MaxPool",
                k[0],
                k[1],
                s[0],
                s[1],
                p[0],
                p[1],
                p[2],
                p[3],
                sp.at.int("count_include_pad", 0) != 0
            )
        }
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
        "ReduceMean" | "ReduceSum" => {
            let axes = sp
                .at
                .ints("axes")
                .or_else(|| node.input.get(1).and_then(|n| known_ints(net, consts, n)))
                .ok_or("the axes are computed in the graph")?;
            let m = if node.op_type == "ReduceMean" {
                "mean"
            } else {
                "sum"
            };
            format!(
                "{}.{m}(&{axes:?}, {})?",
                sp.arg(0)?,
                sp.at.int("keepdims", 1) != 0
            )
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

/// A `Constant` node: remembered (for shapes and axes), and written as a literal when it
/// is a small float tensor. False when its value cannot be read.
fn constant(
    node: &NodeProto,
    names: &mut Names,
    consts: &mut HashMap<String, Tensor>,
    body: &mut String,
) -> Result<bool> {
    let Some(t) = Attrs::of(node)
        .tensor("value")
        .and_then(|t| to_tensor(t, None).ok())
    else {
        return Ok(false);
    };
    if let Some(out) = node.output.first() {
        consts.insert(out.clone(), t.clone());
        if t.numel() <= 64 && t.dtype() == DType::F32 {
            let v: Vec<String> = t.to_vec::<f32>()?.iter().map(|&x| f32_literal(x)).collect();
            let name = names.get("v", out);
            let _ = writeln!(
                body,
                "        let {name} = Tensor::from_vec(vec![{}f32], &{:?})?;",
                v.join("f32, "),
                t.shape()
            );
        }
    }
    Ok(true)
}

/// The Rust source and the report for an imported network.
pub fn convert(net: &OnnxNetwork, struct_name: &str) -> Result<Conversion> {
    if !struct_name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_')
        || !struct_name.starts_with(|c: char| c.is_ascii_uppercase())
    {
        return Err(Error::invalid(format!(
            "spore convert: the struct name must be a Rust type name (letters, digits, '_', starting upper-case), got {struct_name:?}"
        )));
    }
    let mut names = Names(HashMap::new(), vec![]);
    let params = net.parameters();
    let mut consts: HashMap<String, Tensor> = HashMap::new();
    let mut body = String::new();
    let mut report = format!(
        "# Conversion of the ONNX model into `{struct_name}`\n\n| node | op | became |\n|---|---|---|\n"
    );
    let (mut converted, mut not_converted) = (0, vec![]);
    let _ = writeln!(
        body,
        "        if inputs.len() != {} {{\n            return Err(Error::invalid(format!(\"{struct_name}: expected {} inputs, got {{}}\", inputs.len())));\n        }}",
        net.inputs.len(),
        net.inputs.len()
    );
    for (k, i) in net.inputs.iter().enumerate() {
        let _ = writeln!(
            body,
            "        let {} = inputs[{k}].clone();",
            names.get("v", i)
        );
    }
    for (n, _) in params {
        let f = names.get("p", n);
        let _ = writeln!(body, "        let {f} = self.{f}.value();");
    }
    for node in &net.graph().node {
        if node.op_type == "Constant" && constant(node, &mut names, &mut consts, &mut body)? {
            converted += 1;
            let _ = writeln!(report, "| {} | Constant | a constant |", node.name);
            continue;
        }
        let args: Vec<String> = node
            .input
            .iter()
            .map(|i| {
                if i.is_empty() {
                    String::new()
                } else if params.iter().any(|(n, _)| n == i) {
                    names.get("p", i)
                } else {
                    names.get("v", i)
                }
            })
            .collect();
        let out = node
            .output
            .first()
            .map(|o| names.get("v", o))
            .unwrap_or_else(|| "_".into());
        match expression(net, node, &args, &consts) {
            Ok(e) => {
                converted += 1;
                let _ = writeln!(body, "        let {out} = {e};");
                let _ = writeln!(
                    report,
                    "| {} | {} | `{}` |",
                    node.name,
                    node.op_type,
                    e.replace('|', "\\|")
                );
            }
            Err(why) => {
                not_converted.push(node.name.clone());
                let _ = writeln!(
                    body,
                    "        let {out}: Tensor = return Err(Error::invalid(\"{struct_name}: node {:?} ({}) was not converted: {}\"));",
                    node.name,
                    node.op_type,
                    why.replace('"', "'")
                );
                let _ = writeln!(
                    report,
                    "| {} | {} | **not converted**: {why} |",
                    node.name, node.op_type
                );
            }
        }
    }
    let outs: Vec<String> = net.outputs.iter().map(|o| names.get("v", o)).collect();
    let _ = writeln!(body, "        Ok(vec![{}])", outs.join(", "));
    let _ = writeln!(
        report,
        "\n{converted} nodes converted, {} not converted{}.",
        not_converted.len(),
        if not_converted.is_empty() {
            String::new()
        } else {
            format!(": {}", not_converted.join(", "))
        }
    );
    let src = source(net, struct_name, &mut names, &body);
    Ok(Conversion {
        source: src,
        report,
        converted,
        not_converted,
    })
}

/// The file around the body of `construct`: the struct, `new`, and the `Cell` impl.
fn source(net: &OnnxNetwork, struct_name: &str, names: &mut Names, body: &str) -> String {
    let params = net.parameters();
    let mut src = format!(
        "//! `{struct_name}`: converted by `spore convert` from an ONNX model (opset {}).\n//! Its parameters start at zero: load the converted checkpoint with\n//! `load_param_into_net(&*net, &load_checkpoint(\"model.ckpt\")?)`.\n\nuse std::sync::Arc;\n\nuse spore::core::{{DType, Error, Parameter, Result, Tensor}};\nuse spore::nn::cell::{{Cell, CellBase}};\nuse spore::onnx::api;\n\npub struct {struct_name} {{\n    base: CellBase,\n",
        net.opset
    );
    for (n, p) in params {
        let _ = writeln!(
            src,
            "    /// ONNX initializer `{n}`.\n    pub {}: Parameter,",
            names.get("p", n)
        );
        let _ = p;
    }
    src.push_str("}\n\n");
    let _ = writeln!(
        src,
        "impl {struct_name} {{\n    pub fn new() -> Result<Arc<{struct_name}>> {{\n        Ok(Arc::new({struct_name} {{\n            base: CellBase::new(),"
    );
    for (n, p) in params {
        let _ = writeln!(
            src,
            "            {}: Parameter::with_requires_grad(Tensor::zeros(&{:?}, DType::F32)?, {n:?}, {}),",
            names.get("p", n),
            p.tensor_type().shape.to_vec(),
            p.requires_grad()
        );
    }
    src.push_str("        }))\n    }\n}\n\n");
    let _ = writeln!(
        src,
        "impl Cell for {struct_name} {{\n    #[allow(unreachable_code, unused_variables, clippy::diverging_sub_expression)]\n    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {{"
    );
    src.push_str(body);
    src.push_str("    }\n\n    fn params(&self) -> Vec<(String, Parameter)> {\n        vec![\n");
    for (n, _) in params {
        let _ = writeln!(
            src,
            "            ({n:?}.to_string(), self.{}.clone()),",
            names.get("p", n)
        );
    }
    let _ = writeln!(
        src,
        "        ]\n    }}\n\n    fn base(&self) -> &CellBase {{\n        &self.base\n    }}\n\n    fn class_name(&self) -> &'static str {{\n        {struct_name:?}\n    }}\n}}"
    );
    src
}

/// Converts the model at `model` into `out/model.rs`, `out/model.ckpt` and
/// `out/REPORT.md`.
pub fn convert_file(model: &Path, out: &Path, struct_name: &str) -> Result<Conversion> {
    let net = import(model)?;
    let c = convert(&net, struct_name)?;
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, format!("cannot create: {e}")))?;
    let write = |name: &str, text: &str| -> Result<()> {
        let p = out.join(name);
        std::fs::write(&p, text).map_err(|e| Error::io(&p, format!("cannot write: {e}")))
    };
    write("model.rs", &c.source)?;
    write("REPORT.md", &c.report)?;
    spore_nn::checkpoint::save_checkpoint(&*net, out.join("model.ckpt"))?;
    Ok(c)
}
