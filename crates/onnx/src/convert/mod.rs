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

mod forms;

use forms::{expression, f32_literal};

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
        if let Some(lit) = literal(&t)? {
            let _ = writeln!(body, "        let {} = {lit};", names.get("v", out));
        }
    }
    Ok(true)
}

/// `Tensor::from_vec(...)` spelling a small float or integer tensor (`None` for other
/// dtypes and for more than [`LITERAL_LIMIT`] elements).
fn literal(t: &Tensor) -> Result<Option<String>> {
    if t.numel() > LITERAL_LIMIT {
        return Ok(None);
    }
    let items: Vec<String> = match t.dtype() {
        DType::F32 => t.to_vec::<f32>()?.into_iter().map(f32_literal).collect(),
        DType::I64 => t
            .to_vec::<i64>()?
            .iter()
            .map(|v| format!("{v}i64"))
            .collect(),
        DType::I32 => t
            .to_vec::<i32>()?
            .iter()
            .map(|v| format!("{v}i32"))
            .collect(),
        _ => return Ok(None),
    };
    Ok(Some(format!(
        "Tensor::from_vec(vec![{}], &{:?})?",
        items.join(", "),
        t.shape()
    )))
}

/// The most elements a constant is written out with in the generated source.
const LITERAL_LIMIT: usize = 4096;

/// The body of `construct` and the report, written node by node.
struct Writer<'a> {
    net: &'a OnnxNetwork,
    struct_name: &'a str,
    names: Names,
    consts: HashMap<String, Tensor>,
    body: String,
    report: String,
    converted: usize,
    not_converted: Vec<String>,
}

/// `s` safe inside a Rust string literal of the generated source.
fn in_literal(s: &str) -> String {
    s.replace(['"', '\\'], "'")
}

impl Writer<'_> {
    /// The input count check, the inputs, the parameters, and the initializers that are
    /// not parameters (indices, shapes, settings) as literals.
    fn prologue(&mut self) -> Result<()> {
        let (net, name) = (self.net, self.struct_name);
        let _ = writeln!(
            self.body,
            "        if inputs.len() != {} {{\n            return Err(Error::invalid(format!(\"{name}: expected {} inputs, got {{}}\", inputs.len())));\n        }}",
            net.inputs.len(),
            net.inputs.len()
        );
        for (k, i) in net.inputs.iter().enumerate() {
            let v = self.names.get("v", i);
            let _ = writeln!(self.body, "        let {v} = inputs[{k}].clone();");
        }
        for (n, _) in net.parameters() {
            let f = self.names.get("p", n);
            let _ = writeln!(self.body, "        let {f} = self.{f}.value();");
        }
        for init in &net.graph().initializer {
            let Some(t) = net.constant(&init.name) else {
                continue;
            };
            match literal(t)? {
                Some(lit) => {
                    let v = self.names.get("v", &init.name);
                    let _ = writeln!(self.body, "        let {v} = {lit};");
                }
                None => {
                    self.not_converted.push(init.name.clone());
                    let _ = writeln!(
                        self.report,
                        "| {} | initializer | **not converted**: a {} tensor of {} elements is not written as a literal |",
                        init.name,
                        t.dtype(),
                        t.numel()
                    );
                }
            }
        }
        Ok(())
    }

    /// One statement for `node` (or one that returns an error naming it).
    fn node(&mut self, node: &NodeProto) -> Result<()> {
        let name = self.struct_name;
        if node.op_type == "Constant"
            && constant(node, &mut self.names, &mut self.consts, &mut self.body)?
        {
            self.converted += 1;
            let _ = writeln!(self.report, "| {} | Constant | a constant |", node.name);
            return Ok(());
        }
        let params = self.net.parameters();
        let args: Vec<String> = node
            .input
            .iter()
            .map(|i| match i {
                _ if i.is_empty() => String::new(),
                _ if params.iter().any(|(n, _)| n == i) => self.names.get("p", i),
                _ => self.names.get("v", i),
            })
            .collect();
        // A node with several outputs (Split) binds them from the Vec it returns.
        let outs: Vec<String> = node.output.iter().map(|o| self.names.get("v", o)).collect();
        let (binding, unpack) = match outs.as_slice() {
            [] => ("_: Tensor".to_string(), String::new()),
            [one] => (format!("{one}: Tensor"), String::new()),
            many => (
                format!("[{}]: [Tensor; {}]", many.join(", "), many.len()),
                format!(
                    ".try_into().map_err(|_| Error::invalid(\"{name}: node {} returned the wrong number of outputs\"))?",
                    in_literal(&node.name)
                ),
            ),
        };
        match expression(self.net, node, &args, &self.consts) {
            Ok(e) => {
                self.converted += 1;
                let _ = writeln!(self.body, "        let {binding} = {e}{unpack};");
                let _ = writeln!(
                    self.report,
                    "| {} | {} | `{}` |",
                    node.name,
                    node.op_type,
                    e.replace('|', "\\|")
                );
            }
            Err(why) => {
                self.not_converted.push(node.name.clone());
                let _ = writeln!(
                    self.body,
                    "        let {binding} = return Err(Error::invalid(\"{name}: node {} ({}) was not converted: {}\"));",
                    in_literal(&node.name),
                    in_literal(&node.op_type),
                    in_literal(&why)
                );
                let _ = writeln!(
                    self.report,
                    "| {} | {} | **not converted**: {why} |",
                    node.name, node.op_type
                );
            }
        }
        Ok(())
    }
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
    let mut w = Writer {
        net,
        struct_name,
        names: Names(HashMap::new(), vec![]),
        consts: HashMap::new(),
        body: String::new(),
        report: format!(
            "# Conversion of the ONNX model into `{struct_name}`\n\n| node | op | became |\n|---|---|---|\n"
        ),
        converted: 0,
        not_converted: vec![],
    };
    w.prologue()?;
    for node in &net.graph().node {
        w.node(node)?;
    }
    let outs: Vec<String> = net.outputs.iter().map(|o| w.names.get("v", o)).collect();
    let _ = writeln!(w.body, "        Ok(vec![{}])", outs.join(", "));
    let _ = writeln!(
        w.report,
        "\n{} nodes converted, {} not converted{}.",
        w.converted,
        w.not_converted.len(),
        if w.not_converted.is_empty() {
            String::new()
        } else {
            format!(": {}", w.not_converted.join(", "))
        }
    );
    let src = source(net, struct_name, &mut w.names, &w.body);
    Ok(Conversion {
        source: src,
        report: w.report,
        converted: w.converted,
        not_converted: w.not_converted,
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
