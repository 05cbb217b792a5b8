//! Lowering: a frozen graph becomes kernel calls ([`Program`]). The offline optimisations
//! happen here: a convolution absorbs what follows it while each value has one reader
//! (BatchNorm's per-channel scale into its weights, the shift and any bias into one bias,
//! then ReLU or ReLU6, then a max or average pool whose windows tile its output); a
//! product with a constant matrix becomes a Dense kernel with its bias and activation;
//! reshapes cost nothing (they share the buffer).
//!
//! ```
//! use spore_codegen::{freeze::freeze, lower::lower};
//! use spore_core::{DType, TensorType};
//! use spore_nn::prelude::*;
//! let net = LeNet5::new(10).unwrap();
//! let p = lower(&freeze(&*net, &[TensorType::new(&[1, 1, 32, 32], DType::F32)]).unwrap()).unwrap();
//! let kinds: Vec<String> = p.steps.iter().map(|s| s.kind()).collect();
//! assert_eq!(kinds, ["Conv2D+ReLU+MaxPool", "Conv2D+ReLU+MaxPool", "MatMul+BiasAdd+ReLU",
//!                    "MatMul+BiasAdd+ReLU", "MatMul+BiasAdd"]);
//! ```

use std::collections::HashMap;

use spore_core::ir::{Graph, NodeKind};
use spore_core::op::Op;
use spore_core::{DType, Error, Result, Tensor};

mod fuse;
mod generic;

use crate::freeze::Frozen;
use crate::program::{Act, Const, ConstId, Operand, Program, Step, Storage, Value, ValueId};

/// What a graph node became.
#[derive(Clone, Copy, Debug)]
enum Lowered {
    Buffer(ValueId),
    /// A constant node (turned into an array or a literal when a kernel reads it).
    Constant,
    /// Folded into the kernel of an earlier node (its one reader was absorbed too).
    Absorbed,
}

struct Lowering<'a> {
    g: &'a Graph,
    origins: &'a [Vec<String>],
    users: Vec<Vec<usize>>,
    is_output: Vec<bool>,
    done: Vec<Option<Lowered>>,
    /// Constant nodes already emitted as arrays.
    const_ids: HashMap<usize, ConstId>,
    p: Program,
}

/// Lowers a frozen inference graph. Unsupported operators and dtypes are errors naming
/// the operator and its scope.
pub fn lower(frozen: &Frozen) -> Result<Program> {
    let g = &frozen.graph;
    let mut users = vec![vec![]; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for a in n.args() {
            if !users[a].contains(&i) {
                users[a].push(i);
            }
        }
    }
    let mut is_output = vec![false; g.nodes.len()];
    for &o in &g.outputs {
        is_output[o] = true;
    }
    let mut l = Lowering {
        g,
        origins: &frozen.origins,
        users,
        is_output,
        done: vec![None; g.nodes.len()],
        const_ids: HashMap::new(),
        p: Program::default(),
    };
    let needed = needed(g);
    for (i, &need) in needed.iter().enumerate() {
        if need && l.done[i].is_none() {
            l.node(i)?;
        }
    }
    l.outputs()?;
    // The C API takes inputs in the graph's argument order, whatever order the nodes are in.
    let values = &l.p.values;
    l.p.inputs.sort_by_key(|&v| match values[v].storage {
        Storage::Input(k) => k,
        _ => usize::MAX,
    });
    Ok(l.p)
}

/// Nodes some output depends on.
fn needed(g: &Graph) -> Vec<bool> {
    let mut live = vec![false; g.nodes.len()];
    for &o in &g.outputs {
        live[o] = true;
    }
    for &i in &g.inputs {
        live[i] = true;
    }
    for i in (0..g.nodes.len()).rev() {
        if live[i] {
            for a in g.nodes[i].args() {
                live[a] = true;
            }
        }
    }
    live
}

fn c_ident(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, 'c');
    }
    out
}

fn scalar_of(t: &Tensor) -> Result<f32> {
    Ok(t.to_vec::<f32>()?[0])
}

impl<'a> Lowering<'a> {
    fn scope(&self, i: usize) -> &str {
        &self.g.nodes[i].name
    }

    fn unsupported(&self, i: usize, what: &str) -> Error {
        let n = &self.g.nodes[i];
        let op = n
            .op()
            .map_or_else(|| "a control-flow node".to_string(), |o| o.name());
        let at = n
            .location
            .as_ref()
            .map(|l| format!(" (at {l})"))
            .unwrap_or_default();
        Error::invalid(format!(
            "codegen: {op} at scope {}{at} is not supported: {what}",
            n.name
        ))
    }

    fn constant(&self, i: usize) -> Option<&'a Tensor> {
        match &self.g.nodes[i].kind {
            NodeKind::Constant(t) => Some(t),
            _ => None,
        }
    }

    fn new_value(&mut self, i: usize, storage: Storage) -> ValueId {
        self.p.values.push(Value {
            numel: self.g.nodes[i].ty().numel(),
            storage,
            scope: self.g.nodes[i].name.clone(),
            node: i,
        });
        self.p.values.len() - 1
    }

    /// A workspace buffer of `numel` elements holding a form of node `i`'s value.
    fn new_buffer(&mut self, i: usize, numel: usize, what: &str) -> ValueId {
        self.p.values.push(Value {
            numel,
            storage: Storage::Arena,
            scope: format!("{} ({what})", self.g.nodes[i].name),
            node: i,
        });
        self.p.values.len() - 1
    }

    fn push(&mut self, source: usize, step: Step) {
        self.p.scopes.push(self.g.nodes[source].name.clone());
        self.p.steps.push(step);
    }

    /// The name an array of node `i` gets: after the parameter it came from.
    fn const_name(&self, i: usize, suffix: &str) -> String {
        let base = match self.origins[i].first() {
            Some(p) if self.origins[i].len() == 1 => c_ident(p),
            Some(p) => format!("{}_folded", c_ident(p)),
            None => c_ident(self.scope(i)),
        };
        format!("{base}{suffix}")
    }

    /// A new weight array; its name gets `_2`, `_3`, ... when taken (a layer used twice).
    fn add_const(&mut self, name: String, data: Vec<f32>, origin: String) -> ConstId {
        let mut unique = name.clone();
        let mut k = 1;
        while self.p.consts.iter().any(|c| c.name == unique) {
            k += 1;
            unique = format!("{name}_{k}");
        }
        self.p.consts.push(Const {
            name: unique,
            data,
            origin,
        });
        self.p.consts.len() - 1
    }

    /// Node `i` as an operand of an elementwise kernel.
    fn operand(&mut self, i: usize) -> Result<Operand> {
        match self.done[i] {
            Some(Lowered::Buffer(v)) => Ok(Operand::Value(v)),
            Some(Lowered::Constant) => {
                let Some(t) = self.constant(i) else {
                    return Err(Error::invalid(format!(
                        "codegen: internal error: {} is marked constant but holds no value",
                        self.scope(i)
                    )));
                };
                if t.numel() == 1 {
                    return Ok(Operand::Scalar(scalar_of(t)?));
                }
                if let Some(&c) = self.const_ids.get(&i) {
                    return Ok(Operand::Const(c));
                }
                let name = self.const_name(i, "");
                let origin = self.origins[i].join(", ");
                let c = self.add_const(name, t.to_vec::<f32>()?, origin);
                self.const_ids.insert(i, c);
                Ok(Operand::Const(c))
            }
            Some(Lowered::Absorbed) | None => Err(Error::invalid(format!(
                "codegen: internal error: {} is read but was not lowered on its own",
                self.scope(i)
            ))),
        }
    }

    fn buffer(&mut self, reader: usize, i: usize) -> Result<ValueId> {
        match self.operand(i)? {
            Operand::Value(v) => Ok(v),
            _ => Err(self.unsupported(
                reader,
                &format!("its input {} is a constant", self.scope(i)),
            )),
        }
    }

    fn node(&mut self, i: usize) -> Result<()> {
        let n = &self.g.nodes[i];
        if n.types.iter().any(|t| t.dtype != DType::F32) {
            return Err(self.unsupported(
                i,
                &format!(
                    "generated code computes in float32, this node gives {}",
                    n.ty()
                ),
            ));
        }
        match &n.kind {
            NodeKind::Input(k) => {
                let v = self.new_value(i, Storage::Input(*k));
                self.p.inputs.push(v);
                self.done[i] = Some(Lowered::Buffer(v));
            }
            NodeKind::Constant(_) => self.done[i] = Some(Lowered::Constant),
            NodeKind::Op { op, args } => self.op(i, op, args)?,
            _ => return Err(self.unsupported(i, "control flow and random keys")),
        }
        Ok(())
    }

    fn op(&mut self, i: usize, op: &'a Op, args: &'a [usize]) -> Result<()> {
        let ty = self.g.nodes[i].ty();
        for &a in args {
            if self.g.nodes[a].ty().dtype != DType::F32 {
                return Err(self.unsupported(
                    i,
                    &format!(
                        "generated code computes in float32, input {} is {}",
                        self.scope(a),
                        self.g.nodes[a].ty()
                    ),
                ));
            }
        }
        match op {
            Op::Identity | Op::StopGradient | Op::Reshape(_) => {
                self.done[i] = self.done[args[0]];
            }
            Op::Conv2d(attrs) => self.conv(i, *attrs, args)?,
            Op::MatMul => self.dense(i, args)?,
            Op::Binary(f) => {
                let a = self.operand(args[0])?;
                let b = self.operand(args[1])?;
                let (act, tail) = self
                    .sole_reader(i)
                    .and_then(|u| self.activation(u, i))
                    .unwrap_or((Act::None, i));
                let y = self.new_value(tail, Storage::Arena);
                let step = Step::Binary {
                    a,
                    b,
                    y,
                    f: *f,
                    act,
                    a_shape: self.g.nodes[args[0]].ty().shape.to_vec(),
                    b_shape: self.g.nodes[args[1]].ty().shape.to_vec(),
                    shape: ty.shape.to_vec(),
                };
                self.push(i, step);
                self.finish_chain(i, tail, y);
            }
            Op::MaxPool2d(_)
            | Op::AvgPool2d(_)
            | Op::Unary(_)
            | Op::Reduce { .. }
            | Op::Concat { .. }
            | Op::Pad { .. }
            | Op::Transpose(_) => self.generic(i, op, args)?,
            _ => {
                return Err(self.unsupported(
                    i,
                    "the generator emits Conv2D, MatMul/Dense, BiasAdd, BatchNorm (inference), ReLU, ReLU6, Sigmoid, Tanh, GELU, MaxPool, AvgPool, global average pooling, Flatten/Reshape, Add, Concat and Softmax",
                ));
            }
        }
        Ok(())
    }

    /// Points each output at a caller's array: the buffer that holds it is written
    /// straight into the output, or copied when it is an input, a constant or another
    /// output.
    fn outputs(&mut self) -> Result<()> {
        let g = self.g;
        for (k, &o) in g.outputs.iter().enumerate() {
            let src = self.operand(o)?;
            let direct = match src {
                Operand::Value(v) if self.p.values[v].storage == Storage::Arena => Some(v),
                _ => None,
            };
            let v = match direct {
                Some(v) => {
                    self.p.values[v].storage = Storage::Output(k);
                    v
                }
                None => {
                    let y = self.new_value(o, Storage::Output(k));
                    let numel = g.nodes[o].ty().numel();
                    self.push(o, Step::Copy { x: src, y, numel });
                    y
                }
            };
            self.p.outputs.push(v);
        }
        Ok(())
    }
}

fn shape4(s: &[usize]) -> Result<[usize; 4]> {
    s.try_into().map_err(|_| {
        Error::invalid(format!(
            "codegen: expected an NCHW (rank 4) tensor, got shape {s:?}"
        ))
    })
}
