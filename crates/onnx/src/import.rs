//! Import: an ONNX model becomes a Spore [`Cell`] ([`OnnxNetwork`]) whose `construct`
//! runs the graph's nodes with Spore's operators, so it runs in PyNative mode (op by op)
//! and in Graph mode (traced and compiled like any cell), and trains: float
//! initializers become trainable Parameters named after them. Other initializers and
//! `Constant` nodes stay constants. Shapes computed in the graph (`Shape`, `Gather` on
//! it, `Concat`...) are concrete values while tracing, so `Reshape` targets resolve.
//!
//! ```no_run
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! let net = spore_onnx::import("lenet.onnx".as_ref()).unwrap();
//! let y = net.call1(&Tensor::ones(&[1, 1, 32, 32], DType::F32).unwrap()).unwrap();
//! ```

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use prost::Message;
use spore_core::{DType, Error, Parameter, Result, Tensor};
use spore_nn::cell::{Cell, CellBase};

use crate::ops::run_node;
use crate::proto::{GraphProto, ModelProto};
use crate::tensor::to_tensor;

/// An imported ONNX graph as a cell.
pub struct OnnxNetwork {
    base: CellBase,
    graph: GraphProto,
    /// The default domain's opset the model was written for.
    pub opset: i64,
    params: Vec<(String, Parameter)>,
    constants: HashMap<String, Tensor>,
    /// Graph inputs that are not initializers, in order.
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
}

/// Reads and imports the model at `path` (external tensor data is read beside it).
pub fn import(path: &Path) -> Result<Arc<OnnxNetwork>> {
    let bytes =
        std::fs::read(path).map_err(|e| Error::io(path, format!("cannot read the model: {e}")))?;
    import_bytes(&bytes, path.parent())
}

/// Imports a serialized model; `dir` is where external tensor data lives.
pub fn import_bytes(bytes: &[u8], dir: Option<&Path>) -> Result<Arc<OnnxNetwork>> {
    let model = ModelProto::decode(bytes).map_err(|e| {
        Error::invalid(format!(
            "onnx: not an ONNX model (protobuf decoding failed: {e})"
        ))
    })?;
    OnnxNetwork::new(model, dir)
}

impl OnnxNetwork {
    pub fn new(model: ModelProto, dir: Option<&Path>) -> Result<Arc<OnnxNetwork>> {
        let opset = model
            .opset_import
            .iter()
            .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
            .map(|o| o.version)
            .ok_or_else(|| Error::invalid("onnx: the model imports no default-domain opset"))?;
        if !(7..=21).contains(&opset) {
            return Err(Error::invalid(format!(
                "onnx: opset {opset} is not supported (13 to 21 are; 7 to 12 are read as far as they agree)"
            )));
        }
        let graph = model
            .graph
            .ok_or_else(|| Error::invalid("onnx: the model has no graph"))?;
        // BatchNormalization's running statistics are not trained.
        let statistics: Vec<&str> = graph
            .node
            .iter()
            .filter(|n| n.op_type == "BatchNormalization")
            .flat_map(|n| n.input.iter().skip(3).map(String::as_str))
            .collect();
        // Float initializers read as settings (Pad's constant value, OneHot's depth) must
        // be known while tracing, so they stay constants rather than becoming Parameters.
        let settings: Vec<&str> = graph
            .node
            .iter()
            .filter_map(|n| match n.op_type.as_str() {
                "Pad" => n.input.get(2),
                "OneHot" => n.input.get(1),
                _ => None,
            })
            .map(String::as_str)
            .collect();
        let mut params = vec![];
        let mut constants = HashMap::new();
        for init in &graph.initializer {
            let t = to_tensor(init, dir)?;
            if t.dtype() == DType::F32 && !settings.contains(&init.name.as_str()) {
                let trained = !statistics.contains(&init.name.as_str());
                params.push((
                    init.name.clone(),
                    Parameter::with_requires_grad(t, &init.name, trained),
                ));
            } else {
                constants.insert(init.name.clone(), t);
            }
        }
        let known: Vec<&str> = graph.initializer.iter().map(|i| i.name.as_str()).collect();
        let inputs = graph
            .input
            .iter()
            .map(|v| v.name.clone())
            .filter(|n| !known.contains(&n.as_str()))
            .collect();
        let outputs = graph.output.iter().map(|v| v.name.clone()).collect();
        Ok(Arc::new(OnnxNetwork {
            base: CellBase::new(),
            graph,
            opset,
            params,
            constants,
            inputs,
            outputs,
        }))
    }

    /// The graph's nodes (for reports).
    pub fn graph(&self) -> &GraphProto {
        &self.graph
    }

    /// The parameters made from float initializers, under their ONNX names.
    pub fn parameters(&self) -> &[(String, Parameter)] {
        &self.params
    }

    /// A non-float initializer.
    pub fn constant(&self, name: &str) -> Option<&Tensor> {
        self.constants.get(name)
    }
}

impl Cell for OnnxNetwork {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        if inputs.len() != self.inputs.len() {
            return Err(Error::invalid(format!(
                "onnx: the model takes {} inputs ({:?}), got {}",
                self.inputs.len(),
                self.inputs,
                inputs.len()
            )));
        }
        let mut env: HashMap<String, Tensor> = self.constants.clone();
        for (name, p) in &self.params {
            env.insert(name.clone(), p.value());
        }
        for (name, x) in self.inputs.iter().zip(inputs) {
            env.insert(name.clone(), x.clone());
        }
        for node in &self.graph.node {
            let args: Vec<Option<Tensor>> = node
                .input
                .iter()
                .map(|n| {
                    if n.is_empty() {
                        Ok(None)
                    } else {
                        env.get(n).cloned().map(Some).ok_or_else(|| {
                            Error::invalid(format!(
                                "onnx: node {:?} ({}) reads {n:?}, which nothing before it defines",
                                node.name, node.op_type
                            ))
                        })
                    }
                })
                .collect::<Result<_>>()?;
            let out = run_node(node, &args, self.opset)?;
            for (name, t) in node.output.iter().zip(out) {
                if !name.is_empty() {
                    env.insert(name.clone(), t);
                }
            }
        }
        self.outputs
            .iter()
            .map(|n| {
                env.get(n).cloned().ok_or_else(|| {
                    Error::invalid(format!("onnx: graph output {n:?} is never computed"))
                })
            })
            .collect()
    }

    fn params(&self) -> Vec<(String, Parameter)> {
        self.params.clone()
    }

    fn base(&self) -> &CellBase {
        &self.base
    }

    fn class_name(&self) -> &'static str {
        "OnnxNetwork"
    }
}
