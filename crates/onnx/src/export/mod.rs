//! Export: a Spore network's inference graph as an ONNX model at opset 17. The network
//! is traced in evaluation mode; the batch axis of inputs and outputs is symbolic
//! (`batch`), and reshapes copy the dimensions they keep (written 0), so the model runs
//! at any batch size when the graph only carries the batch through; parameters become
//! initializers under their names,
//! constants become initializers too, every operator becomes the ONNX node (or short
//! chain) with the same meaning, and the nodes keep Spore's scope names
//! (`Default/conv1/Conv2D-op0`). A graph with an operator that has no ONNX form here is
//! an error naming it and its scope.
//!
//! ```no_run
//! use spore_core::{DType, TensorType};
//! use spore_nn::prelude::*;
//! let net = ResNet::resnet18(10).unwrap();
//! spore_onnx::export(&*net, &[TensorType::new(&[1, 3, 32, 32], DType::F32)], "resnet18.onnx".as_ref()).unwrap();
//! ```

use std::collections::HashMap;
use std::path::Path;

mod batch_norm;

use batch_norm::BatchNormNode;

use prost::Message;
use spore_core::ir::{Graph, NodeKind};
use spore_core::op::Op;
use spore_core::{Error, Result, Tensor, TensorType, trace};
use spore_kernels::{BinaryFn, CompareFn, ReduceFn, UnaryFn};
use spore_nn::cell::{Cell, CellExt};

use crate::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto, attribute_proto, tensor_shape_proto, type_proto,
};
use crate::tensor::{from_tensor, onnx_type};

/// The opset exported models declare.
pub const OPSET: i64 = 17;

fn attr_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_proto::AttributeType::Ints as i32,
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn attr_float(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_proto::AttributeType::Float as i32,
        f: v,
        ..Default::default()
    }
}

fn attr_int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_proto::AttributeType::Int as i32,
        i: v,
        ..Default::default()
    }
}

/// A tensor's type; with `dynamic_batch`, axis 0 is the symbolic `batch`.
fn value_info(name: &str, t: &TensorType, dynamic_batch: bool) -> Result<ValueInfoProto> {
    let dims = t
        .shape
        .iter()
        .enumerate()
        .map(|(i, &d)| tensor_shape_proto::Dimension {
            value: Some(if i == 0 && dynamic_batch {
                tensor_shape_proto::dimension::Value::DimParam("batch".into())
            } else {
                tensor_shape_proto::dimension::Value::DimValue(d as i64)
            }),
            ..Default::default()
        })
        .collect();
    Ok(ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: onnx_type(t.dtype)?,
                shape: Some(TensorShapeProto { dim: dims }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// Builds the ONNX graph node by node.
struct Builder<'g> {
    g: &'g Graph,
    names: Vec<String>,
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
    /// The initializers' names, which ONNX needs unique.
    initializer_names: std::collections::HashSet<String>,
}

impl Builder<'_> {
    fn constant(&mut self, name: String, t: &Tensor) -> Result<String> {
        if !self.initializer_names.insert(name.clone()) {
            return Err(Error::invalid(format!(
                "onnx export: two parameters or constants are named {name:?}; ONNX needs unique initializer names"
            )));
        }
        self.initializers.push(from_tensor(&name, t)?);
        Ok(name)
    }

    fn ints(&mut self, base: &str, v: &[i64]) -> Result<String> {
        let t = Tensor::from_vec(v.to_vec(), &[v.len()])?;
        self.constant(format!("{base}/shape"), &t)
    }

    fn node(
        &mut self,
        name: &str,
        op: &str,
        inputs: Vec<String>,
        output: String,
        attrs: Vec<AttributeProto>,
    ) {
        self.nodes.push(NodeProto {
            name: name.into(),
            op_type: op.into(),
            input: inputs,
            output: vec![output],
            attribute: attrs,
            ..Default::default()
        });
    }

    /// Convolutions and pooling, with their windows as attributes.
    fn window(&mut self, scope: &str, op: &Op, args: &[usize], a: Vec<String>, out: String) {
        match op {
            Op::Conv2dBackpropInput {
                attrs: c,
                input_shape,
            } => {
                // The transposed convolution's output size fixes `output_padding`: the
                // cells past the last one the input reaches.
                let (x, w) = (
                    &self.g.nodes[args[0]].ty().shape,
                    &self.g.nodes[args[1]].ty().shape,
                );
                let extra = |d: usize| {
                    let reach = (x[2 + d].max(1) - 1) * c.stride[d]
                        + c.dilation[d] * (w[2 + d].max(1) - 1)
                        + 1;
                    (input_shape[2 + d] + c.pads[2 * d] + c.pads[2 * d + 1]).saturating_sub(reach)
                        as i64
                };
                let attrs = vec![
                    attr_ints("strides", &[c.stride[0] as i64, c.stride[1] as i64]),
                    attr_ints("dilations", &[c.dilation[0] as i64, c.dilation[1] as i64]),
                    attr_ints(
                        "pads",
                        &[
                            c.pads[0] as i64,
                            c.pads[2] as i64,
                            c.pads[1] as i64,
                            c.pads[3] as i64,
                        ],
                    ),
                    attr_ints("output_padding", &[extra(0), extra(1)]),
                    attr_int("group", c.groups as i64),
                ];
                self.node(scope, "ConvTranspose", a, out, attrs);
            }
            Op::Conv2d(c) => {
                let attrs = vec![
                    attr_ints("strides", &[c.stride[0] as i64, c.stride[1] as i64]),
                    attr_ints("dilations", &[c.dilation[0] as i64, c.dilation[1] as i64]),
                    attr_ints(
                        "pads",
                        &[
                            c.pads[0] as i64,
                            c.pads[2] as i64,
                            c.pads[1] as i64,
                            c.pads[3] as i64,
                        ],
                    ),
                    attr_int("group", c.groups as i64),
                ];
                self.node(scope, "Conv", a, out, attrs);
            }
            Op::MaxPool2d(p) | Op::AvgPool2d(p) => {
                let mut attrs = vec![
                    attr_ints("kernel_shape", &[p.kernel[0] as i64, p.kernel[1] as i64]),
                    attr_ints("strides", &[p.stride[0] as i64, p.stride[1] as i64]),
                    attr_ints(
                        "pads",
                        &[
                            p.pads[0] as i64,
                            p.pads[2] as i64,
                            p.pads[1] as i64,
                            p.pads[3] as i64,
                        ],
                    ),
                ];
                let kind = if matches!(op, Op::MaxPool2d(_)) {
                    "MaxPool"
                } else {
                    "AveragePool"
                };
                if kind == "AveragePool" {
                    attrs.push(attr_int("count_include_pad", p.count_include_pad as i64));
                }
                if p.ceil_mode {
                    attrs.push(attr_int("ceil_mode", 1));
                }
                self.node(scope, kind, a, out, attrs);
            }
            _ => {}
        }
    }

    /// Padding, slicing and gathering, with their amounts and indices as constants.
    fn indexing(
        &mut self,
        scope: &str,
        op: &Op,
        args: &[usize],
        a: Vec<String>,
        out: String,
    ) -> Result<()> {
        match op {
            Op::Pad { pads, value_bits } => {
                let amounts: Vec<i64> = pads
                    .iter()
                    .map(|p| p.0 as i64)
                    .chain(pads.iter().map(|p| p.1 as i64))
                    .collect();
                let p = self.ints(scope, &amounts)?;
                let dtype = self.g.nodes[args[0]].ty().dtype;
                let value = Tensor::full(&[], f64::from_bits(*value_bits), dtype)?;
                let v = self.constant(format!("{scope}/value"), &value)?;
                self.node(scope, "Pad", vec![a[0].clone(), p, v], out, vec![]);
            }
            Op::StridedSlice { begin, step, len } => {
                // Only the axes the slice changes: an axis taken whole is left to the
                // input, so the batch axis stays free.
                let input = &self.g.nodes[args[0]].ty().shape;
                let axes: Vec<usize> = (0..begin.len())
                    .filter(|&k| !(begin[k] == 0 && step[k] == 1 && Some(&len[k]) == input.get(k)))
                    .collect();
                if axes.is_empty() {
                    self.node(scope, "Identity", a, out, vec![]);
                    return Ok(());
                }
                let starts: Vec<i64> = axes.iter().map(|&k| begin[k] as i64).collect();
                // One past the last element taken; below 0 (a backwards slice that ends
                // at element 0) ONNX reads as "from the end", so INT64_MIN says "before
                // the start" instead.
                let ends: Vec<i64> = axes
                    .iter()
                    .map(
                        |&k| match begin[k] as i64 + step[k] as i64 * len[k] as i64 {
                            e if e < 0 => i64::MIN,
                            e => e,
                        },
                    )
                    .collect();
                let steps: Vec<i64> = axes.iter().map(|&k| step[k] as i64).collect();
                let axes: Vec<i64> = axes.iter().map(|&k| k as i64).collect();
                let inputs = vec![
                    a[0].clone(),
                    self.ints(&format!("{scope}/starts"), &starts)?,
                    self.ints(&format!("{scope}/ends"), &ends)?,
                    self.ints(&format!("{scope}/axes"), &axes)?,
                    self.ints(&format!("{scope}/steps"), &steps)?,
                ];
                self.node(scope, "Slice", inputs, out, vec![]);
            }
            Op::Gather { axis } => {
                self.node(
                    scope,
                    "Gather",
                    a,
                    out,
                    vec![attr_int("axis", *axis as i64)],
                );
            }
            _ => {}
        }
        Ok(())
    }

    /// The BatchNorm chain ending at node `i` as one node; in training mode its updated
    /// moving statistics (named `<parameter>/running`) are returned as extra outputs.
    fn batch_norm(&mut self, i: usize, bn: &BatchNormNode) -> Result<Vec<ValueInfoProto>> {
        let scope = self.g.nodes[i].name.clone();
        let scope = scope
            .rsplit_once('/')
            .map_or(scope.clone(), |(s, _)| s.to_string());
        let mut inputs = vec![self.names[bn.input].clone()];
        inputs.extend(bn.params.iter().map(|&p| self.names[p].clone()));
        let mut outputs = vec![self.names[i].clone()];
        let mut extra = vec![];
        if bn.training {
            for &p in &bn.params[2..] {
                let name = format!("{}/running", self.names[p]);
                extra.push(value_info(&name, self.g.nodes[p].ty(), false)?);
                outputs.push(name);
            }
        }
        self.nodes.push(NodeProto {
            name: format!("{scope}/BatchNormalization"),
            op_type: "BatchNormalization".into(),
            input: inputs,
            output: outputs,
            attribute: vec![
                attr_float("epsilon", bn.epsilon as f32),
                attr_float("momentum", bn.momentum as f32),
                attr_int("training_mode", bn.training as i64),
            ],
            ..Default::default()
        });
        Ok(extra)
    }

    fn unsupported(&self, i: usize, op: &Op) -> Error {
        Error::invalid(format!(
            "onnx export: {} at scope {} has no ONNX form here",
            op.name(),
            self.g.nodes[i].name
        ))
    }

    fn op(&mut self, i: usize, op: &Op, args: &[usize]) -> Result<()> {
        let scope = self.g.nodes[i].name.clone();
        let out = self.names[i].clone();
        let a: Vec<String> = args.iter().map(|&x| self.names[x].clone()).collect();
        if let Some(name) = same_name(op) {
            self.node(&scope, name, a, out, vec![]);
            return Ok(());
        }
        match op {
            Op::Unary(UnaryFn::Rsqrt) => {
                let mid = format!("{out}/sqrt");
                self.node(&format!("{scope}/Sqrt"), "Sqrt", a, mid.clone(), vec![]);
                self.node(&scope, "Reciprocal", vec![mid], out, vec![]);
            }
            Op::Compare(CompareFn::NotEqual) => {
                let mid = format!("{out}/equal");
                self.node(&format!("{scope}/Equal"), "Equal", a, mid.clone(), vec![]);
                self.node(&scope, "Not", vec![mid], out, vec![]);
            }
            Op::Cast(d) => {
                self.node(
                    &scope,
                    "Cast",
                    a,
                    out,
                    vec![attr_int("to", onnx_type(*d)? as i64)],
                );
            }
            Op::Reshape(shape) | Op::BroadcastTo(shape) => {
                let mut dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
                if let Op::Reshape(_) = op {
                    // Leading dimensions the reshape keeps are written as 0 ("copy the
                    // input's"), so the batch dimension stays free.
                    let input = &self.g.nodes[args[0]].ty().shape;
                    for (d, (&t, &s)) in dims.iter_mut().zip(shape.iter().zip(input.iter())) {
                        if t != s {
                            break;
                        }
                        *d = 0;
                    }
                } else {
                    // Expand broadcasts the input against the target: 1 keeps the input's
                    // own dimension (the batch included) wherever it already has it.
                    let input = &self.g.nodes[args[0]].ty().shape;
                    let lead = shape.len() - input.len().min(shape.len());
                    for (k, d) in dims.iter_mut().enumerate().skip(lead) {
                        if input[k - lead] as i64 == *d {
                            *d = 1;
                        }
                    }
                }
                let s = self.ints(&scope, &dims)?;
                let kind = if matches!(op, Op::Reshape(_)) {
                    "Reshape"
                } else {
                    "Expand"
                };
                self.node(&scope, kind, vec![a[0].clone(), s], out, vec![]);
            }
            Op::Transpose(perm) => {
                let p: Vec<i64> = perm.iter().map(|&v| v as i64).collect();
                self.node(&scope, "Transpose", a, out, vec![attr_ints("perm", &p)]);
            }
            Op::Reduce {
                kind,
                axes,
                keep_dims,
            } => {
                let ax: Vec<i64> = axes.iter().map(|&v| v as i64).collect();
                let keep = attr_int("keepdims", *keep_dims as i64);
                match kind {
                    // ReduceSum takes its axes as an input from opset 13; the others
                    // keep an attribute until opset 18.
                    ReduceFn::Sum => {
                        let s = self.ints(&scope, &ax)?;
                        self.node(&scope, "ReduceSum", vec![a[0].clone(), s], out, vec![keep]);
                    }
                    ReduceFn::Max | ReduceFn::Min => {
                        let n = if *kind == ReduceFn::Max {
                            "ReduceMax"
                        } else {
                            "ReduceMin"
                        };
                        self.node(&scope, n, a, out, vec![attr_ints("axes", &ax), keep]);
                    }
                }
            }
            Op::Concat { axis } => {
                self.node(
                    &scope,
                    "Concat",
                    a,
                    out,
                    vec![attr_int("axis", *axis as i64)],
                );
            }
            Op::Conv2d(_)
            | Op::MaxPool2d(_)
            | Op::AvgPool2d(_)
            | Op::Conv2dBackpropInput { .. } => self.window(&scope, op, args, a, out),
            Op::Pad { .. } | Op::StridedSlice { .. } | Op::Gather { .. } => {
                self.indexing(&scope, op, args, a, out)?
            }
            _ => return Err(self.unsupported(i, op)),
        }
        Ok(())
    }
}

/// The ONNX operator with the same meaning and inputs as `op`, when there is one.
fn same_name(op: &Op) -> Option<&'static str> {
    Some(match op {
        Op::Identity | Op::StopGradient => "Identity",
        Op::Unary(f) => match f {
            UnaryFn::Neg => "Neg",
            UnaryFn::Exp => "Exp",
            UnaryFn::Log => "Log",
            UnaryFn::Sqrt => "Sqrt",
            UnaryFn::Abs => "Abs",
            UnaryFn::Sign => "Sign",
            UnaryFn::Tanh => "Tanh",
            UnaryFn::Sigmoid => "Sigmoid",
            UnaryFn::Relu => "Relu",
            UnaryFn::Sin => "Sin",
            UnaryFn::Cos => "Cos",
            UnaryFn::Erf => "Erf",
            UnaryFn::Rsqrt | UnaryFn::Log1p => return None,
        },
        Op::Binary(f) => match f {
            BinaryFn::Add => "Add",
            BinaryFn::Sub => "Sub",
            BinaryFn::Mul => "Mul",
            BinaryFn::Div => "Div",
            BinaryFn::Pow => "Pow",
            BinaryFn::Maximum => "Max",
            BinaryFn::Minimum => "Min",
        },
        Op::Compare(f) => match f {
            CompareFn::Equal => "Equal",
            CompareFn::Less => "Less",
            CompareFn::Greater => "Greater",
            CompareFn::LessEqual => "LessOrEqual",
            CompareFn::GreaterEqual => "GreaterOrEqual",
            CompareFn::NotEqual => return None,
        },
        Op::Select => "Where",
        Op::MatMul => "MatMul",
        _ => return None,
    })
}

/// The ONNX model of a traced graph.
pub fn graph_to_model(g: &Graph) -> Result<ModelProto> {
    graph_with_batch_norms(g, &HashMap::new())
}

/// [`graph_to_model`] with the BatchNorm chains in `bns` (keyed by their output node)
/// written as `BatchNormalization` nodes; nodes the outputs do not need are left out.
fn graph_with_batch_norms(g: &Graph, bns: &HashMap<usize, BatchNormNode>) -> Result<ModelProto> {
    let mut b = Builder {
        g,
        names: g.nodes.iter().map(|n| n.name.clone()).collect(),
        nodes: vec![],
        initializers: vec![],
        initializer_names: Default::default(),
    };
    let live = batch_norm::live(g, bns);
    let mut inputs = vec![];
    let mut extra_outputs = vec![];
    for (i, n) in g.nodes.iter().enumerate() {
        if !live[i] {
            continue;
        }
        if let Some(bn) = bns.get(&i) {
            extra_outputs.extend(b.batch_norm(i, bn)?);
            continue;
        }
        match &n.kind {
            NodeKind::Input(_) => inputs.push(value_info(&b.names[i], n.ty(), true)?),
            NodeKind::Parameter(p) => {
                let name = g.params[*p].name();
                b.names[i] = name.clone();
                b.constant(name, &g.params[*p].stored())?;
            }
            NodeKind::Constant(t) => {
                let name = b.names[i].clone();
                b.constant(name, t)?;
            }
            NodeKind::Op { op, args } => b.op(i, op, args)?,
            _ => {
                return Err(Error::invalid(format!(
                    "onnx export: control flow and random keys ({}) have no ONNX form here",
                    n.name
                )));
            }
        }
    }
    let mut outputs = vec![];
    for (k, &o) in g.outputs.iter().enumerate() {
        // Outputs get their own names (an output may also be an input or a parameter).
        let name = format!("output{k}");
        b.node(
            &format!("Default/output{k}"),
            "Identity",
            vec![b.names[o].clone()],
            name.clone(),
            vec![],
        );
        outputs.push(value_info(&name, g.nodes[o].ty(), true)?);
    }
    outputs.extend(extra_outputs);
    Ok(ModelProto {
        ir_version: 8,
        producer_name: "spore".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: OPSET,
        }],
        graph: Some(GraphProto {
            name: g.name.clone(),
            node: b.nodes,
            initializer: b.initializers,
            input: inputs,
            output: outputs,
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// What [`export_with`] writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportOptions {
    /// The training-mode graph: BatchNorm normalises with batch statistics
    /// (`training_mode = 1`) and the updated moving statistics are extra outputs
    /// (PyTorch's `training=TrainingMode.TRAINING`). Dropout, which draws random masks,
    /// has no exported training form here.
    pub training: bool,
}

/// MindSpore's `export(net, input, file_name, file_format='ONNX')`: writes `net`'s
/// inference graph for inputs of `inputs`' types (the batch included) to `path`.
pub fn export<C: Cell + ?Sized>(net: &C, inputs: &[TensorType], path: &Path) -> Result<()> {
    export_with(net, inputs, path, &ExportOptions::default())
}

/// [`export`] with options (the training-mode graph).
pub fn export_with<C: Cell + ?Sized>(
    net: &C,
    inputs: &[TensorType],
    path: &Path,
    options: &ExportOptions,
) -> Result<()> {
    let _ = net.parameters_and_names();
    let was = net.is_training();
    net.set_train(options.training);
    let g = trace::trace(net.class_name(), inputs, |x| {
        spore_nn::call::construct_as_root(net, x)
    });
    net.set_train(was);
    let g = g?;
    let bns: HashMap<usize, BatchNormNode> = batch_norm::find(net, &g, options.training)
        .into_iter()
        .map(|bn| (bn.output, bn))
        .collect();
    let model = graph_with_batch_norms(&g, &bns)?;
    std::fs::write(path, model.encode_to_vec())
        .map_err(|e| Error::io(path, format!("cannot write the model: {e}")))
}
