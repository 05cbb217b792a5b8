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
use spore_kernels::{BinaryFn, UnaryFn};

use crate::emit::conv::{channel_block, pack_weights};
use crate::freeze::Frozen;
use crate::program::{
    Act, Const, ConstId, Conv, Dense, FusedPool, Operand, PoolKind, Program, Step, Storage, Value,
    ValueId,
};

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
        let mut name = format!("{base}{suffix}");
        let mut k = 1;
        while self.p.consts.iter().any(|c| c.name == name) {
            k += 1;
            name = format!("{base}{suffix}_{k}");
        }
        name
    }

    fn add_const(&mut self, name: String, data: Vec<f32>, origin: String) -> ConstId {
        self.p.consts.push(Const { name, data, origin });
        self.p.consts.len() - 1
    }

    /// Node `i` as an operand of an elementwise kernel.
    fn operand(&mut self, i: usize) -> Result<Operand> {
        match self.done[i] {
            Some(Lowered::Buffer(v)) => Ok(Operand::Value(v)),
            Some(Lowered::Constant) => {
                let t = self.constant(i).expect("constant node");
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
            Op::MaxPool2d(attrs) | Op::AvgPool2d(attrs) => {
                let x = self.buffer(i, args[0])?;
                let kind = if matches!(op, Op::MaxPool2d(_)) {
                    PoolKind::Max
                } else {
                    PoolKind::Avg
                };
                let y = self.new_value(i, Storage::Arena);
                let step = Step::Pool {
                    x,
                    y,
                    kind,
                    attrs: *attrs,
                    input: shape4(&self.g.nodes[args[0]].ty().shape)?,
                    output: shape4(&ty.shape)?,
                };
                self.push(i, step);
                self.done[i] = Some(Lowered::Buffer(y));
            }
            Op::Unary(f) => {
                let x = self.buffer(i, args[0])?;
                let y = self.new_value(i, Storage::Arena);
                self.push(
                    i,
                    Step::Unary {
                        x,
                        y,
                        f: *f,
                        numel: ty.numel(),
                    },
                );
                self.done[i] = Some(Lowered::Buffer(y));
            }
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
            Op::Reduce { kind, axes, .. } => {
                let x = self.buffer(i, args[0])?;
                let y = self.new_value(i, Storage::Arena);
                let step = Step::Reduce {
                    x,
                    y,
                    kind: *kind,
                    input: self.g.nodes[args[0]].ty().shape.to_vec(),
                    axes: axes.clone(),
                };
                self.push(i, step);
                self.done[i] = Some(Lowered::Buffer(y));
            }
            Op::Concat { axis } => {
                let mut xs = vec![];
                for &a in args {
                    xs.push((self.operand(a)?, self.g.nodes[a].ty().shape.to_vec()));
                }
                let y = self.new_value(i, Storage::Arena);
                self.push(i, Step::Concat { xs, y, axis: *axis });
                self.done[i] = Some(Lowered::Buffer(y));
            }
            Op::Pad { pads, value_bits } => {
                let x = self.buffer(i, args[0])?;
                let y = self.new_value(i, Storage::Arena);
                let step = Step::Pad {
                    x,
                    y,
                    input: self.g.nodes[args[0]].ty().shape.to_vec(),
                    pads: pads.clone(),
                    value: f64::from_bits(*value_bits) as f32,
                };
                self.push(i, step);
                self.done[i] = Some(Lowered::Buffer(y));
            }
            Op::Transpose(perm) => {
                let x = self.buffer(i, args[0])?;
                let y = self.new_value(i, Storage::Arena);
                let step = Step::Transpose {
                    x,
                    y,
                    input: self.g.nodes[args[0]].ty().shape.to_vec(),
                    perm: perm.clone(),
                };
                self.push(i, step);
                self.done[i] = Some(Lowered::Buffer(y));
            }
            _ => {
                return Err(self.unsupported(
                    i,
                    "the generator emits Conv2D, MatMul/Dense, BiasAdd, BatchNorm (inference), ReLU, ReLU6, Sigmoid, Tanh, GELU, MaxPool, AvgPool, global average pooling, Flatten/Reshape, Add, Concat and Softmax",
                ));
            }
        }
        Ok(())
    }

    /// The single reader of `t`, when `t` is not an output and has exactly one.
    fn sole_reader(&self, t: usize) -> Option<usize> {
        match self.users[t].as_slice() {
            [u] if !self.is_output[t] => Some(*u),
            _ => None,
        }
    }

    /// For `Mul/Add/Sub(t, K)` (either order for Mul/Add) with `K` a constant: K.
    fn const_operand(&self, u: usize, t: usize, f: BinaryFn) -> Option<&'a Tensor> {
        let NodeKind::Op {
            op: Op::Binary(g),
            args,
        } = &self.g.nodes[u].kind
        else {
            return None;
        };
        if *g != f || self.g.nodes[u].ty().shape != self.g.nodes[t].ty().shape {
            return None;
        }
        let commutes = matches!(f, BinaryFn::Add | BinaryFn::Mul);
        match (args[0] == t, args[1] == t) {
            (true, false) => self.constant(args[1]),
            (false, true) if commutes => self.constant(args[0]),
            _ => None,
        }
    }

    /// ReLU (`ReLU(t)` or `Maximum(t, 0)`) or ReLU6 (`Minimum(Maximum(t, 0), 6)`) at `u`:
    /// the activation and the last node it spans.
    fn activation(&self, u: usize, t: usize) -> Option<(Act, usize)> {
        if let NodeKind::Op {
            op: Op::Unary(UnaryFn::Relu),
            ..
        } = &self.g.nodes[u].kind
        {
            return Some((Act::Relu, u));
        }
        let is_scalar = |k: Option<&Tensor>, v: f32| {
            k.is_some_and(|k| k.numel() == 1 && scalar_of(k).is_ok_and(|x| x == v))
        };
        if !is_scalar(self.const_operand(u, t, BinaryFn::Maximum), 0.0) {
            return None;
        }
        if let Some(m) = self.sole_reader(u)
            && is_scalar(self.const_operand(m, u, BinaryFn::Minimum), 6.0)
        {
            return Some((Act::Relu6, m));
        }
        Some((Act::Relu, u))
    }

    fn conv(&mut self, i: usize, attrs: spore_core::op::ConvAttrs, args: &[usize]) -> Result<()> {
        let Some(w) = self.constant(args[1]) else {
            return Err(self.unsupported(i, "its weight is computed from the inputs"));
        };
        let mut x = self.buffer(i, args[0])?;
        let mut input = shape4(&self.g.nodes[args[0]].ty().shape)?;
        let mut attrs = attrs;
        if attrs.pads != [0; 4] {
            // A zero-padded copy: the kernel's loops then need no bounds checks.
            let [t, b, l, r] = attrs.pads;
            let padded = [input[0], input[1], input[2] + t + b, input[3] + l + r];
            let y = self.new_buffer(args[0], padded.iter().product(), "padded");
            let step = Step::Pad {
                x,
                y,
                input: input.to_vec(),
                pads: vec![(0, 0), (0, 0), (t, b), (l, r)],
                value: 0.0,
            };
            self.push(i, step);
            (x, input) = (y, padded);
            attrs.pads = [0; 4];
        }
        let conv = shape4(&self.g.nodes[i].ty().shape)?;
        let ws = w.shape();
        let oc = conv[1];
        let mut weight = w.to_vec::<f32>()?;
        let per_oc = weight.len() / oc.max(1);
        let mut bias: Option<Vec<f32>> = None;
        let mut bias_origin: Vec<String> = vec![];
        let mut act = Act::None;
        let mut pool = None;
        let mut tail = i;
        while let Some(u) = self.sole_reader(tail) {
            let before_act = act == Act::None && pool.is_none();
            if before_act
                && let Some(k) = self.const_operand(u, tail, BinaryFn::Mul)
                && let Some(scale) = per_channel(k, oc)?
            {
                for (o, s) in scale.iter().enumerate() {
                    weight[o * per_oc..(o + 1) * per_oc]
                        .iter_mut()
                        .for_each(|v| *v *= s);
                    if let Some(b) = bias.as_mut() {
                        b[o] *= s;
                    }
                }
                bias_origin.extend(self.origin_of_other(u, tail));
                tail = u;
                continue;
            }
            let shift = [(BinaryFn::Add, 1.0f32), (BinaryFn::Sub, -1.0)]
                .into_iter()
                .find_map(|(f, sign)| self.const_operand(u, tail, f).map(|k| (k, sign)));
            if before_act
                && let Some((k, sign)) = shift
                && let Some(add) = per_channel(k, oc)?
            {
                let b = bias.get_or_insert_with(|| vec![0.0; oc]);
                b.iter_mut().zip(&add).for_each(|(b, a)| *b += sign * a);
                bias_origin.extend(self.origin_of_other(u, tail));
                tail = u;
                continue;
            }
            if act == Act::None
                && pool.is_none()
                && let Some((a, last)) = self.activation(u, tail)
            {
                act = a;
                tail = last;
                continue;
            }
            if pool.is_none()
                && let Some(p) = self.tiling_pool(u)
            {
                pool = Some(p);
                tail = u;
                continue;
            }
            break;
        }
        let w_name = self.const_name(args[1], "");
        let w_origin = self.origins[args[1]].join(", ");
        // Packed as the kernel reads it (`emit::conv`): blocks of output channels.
        let block = channel_block(oc / attrs.groups.max(1));
        let w = self.add_const(w_name.clone(), pack_weights(&weight, oc, block), w_origin);
        let bias = match bias {
            Some(b) => {
                bias_origin.dedup();
                let name = if bias_origin.len() == 1 {
                    c_ident(&bias_origin[0])
                } else {
                    format!("{w_name}_bias")
                };
                Some(self.add_const(name, b, bias_origin.join(", ")))
            }
            None => None,
        };
        let y = self.new_value(tail, Storage::Arena);
        self.push(
            i,
            Step::Conv(Conv {
                x,
                y,
                w,
                bias,
                attrs,
                input,
                conv,
                kernel: [ws[2], ws[3]],
                act,
                pool,
            }),
        );
        self.finish_chain(i, tail, y);
        Ok(())
    }

    /// Marks the absorbed nodes from `head` to `tail` done; `tail` holds the result.
    fn finish_chain(&mut self, head: usize, tail: usize, y: ValueId) {
        let mut t = head;
        while t != tail {
            self.done[t] = Some(Lowered::Absorbed);
            t = self.users[t][0];
        }
        self.done[tail] = Some(Lowered::Buffer(y));
    }

    fn origin_of_other(&self, u: usize, t: usize) -> Vec<String> {
        self.g.nodes[u]
            .args()
            .into_iter()
            .filter(|&a| a != t)
            .flat_map(|a| self.origins[a].clone())
            .collect()
    }

    /// A max or average pool at `u` whose windows tile its input (square, kernel =
    /// stride, no padding).
    fn tiling_pool(&self, u: usize) -> Option<FusedPool> {
        let (kind, a) = match self.g.nodes[u].op()? {
            Op::MaxPool2d(a) => (PoolKind::Max, a),
            Op::AvgPool2d(a) => (PoolKind::Avg, a),
            _ => return None,
        };
        let k = a.kernel[0];
        (a.kernel == [k, k] && a.stride == [k, k] && a.pads == [0; 4] && k > 1)
            .then_some(FusedPool { kind, size: k })
    }

    fn dense(&mut self, i: usize, args: &[usize]) -> Result<()> {
        let (a, b) = (args[0], args[1]);
        let Some(w) = self.constant(b) else {
            return Err(self.unsupported(
                i,
                "a product of two computed values (only products with a weight matrix)",
            ));
        };
        let (ash, wsh) = (&self.g.nodes[a].ty().shape[..], w.shape());
        if ash.len() != 2 || wsh.len() != 2 {
            return Err(self.unsupported(i, &format!("only matrices, got {ash:?} x {wsh:?}")));
        }
        let x = self.buffer(i, a)?;
        let (m, k, n) = (ash[0], ash[1], wsh[1]);
        let mut bias: Option<(Vec<f32>, Vec<String>)> = None;
        let mut act = Act::None;
        let mut tail = i;
        while let Some(u) = self.sole_reader(tail) {
            if act == Act::None
                && bias.is_none()
                && let Some(k) = self.const_operand(u, tail, BinaryFn::Add)
                && (k.numel() == 1 || k.shape().last() == Some(&n) && k.numel() == n)
            {
                let v = k.to_vec::<f32>()?;
                let b = if v.len() == 1 { vec![v[0]; n] } else { v };
                bias = Some((b, self.origin_of_other(u, tail)));
                tail = u;
                continue;
            }
            if act == Act::None
                && let Some((f, last)) = self.activation(u, tail)
            {
                act = f;
                tail = last;
                continue;
            }
            break;
        }
        let w_name = self.const_name(b, "");
        let w_origin = self.origins[b].join(", ");
        let w = self.add_const(w_name.clone(), w.to_vec::<f32>()?, w_origin);
        let bias = match bias {
            Some((data, origin)) => {
                let name = match origin.as_slice() {
                    [one] => c_ident(one),
                    _ => format!("{w_name}_bias"),
                };
                Some(self.add_const(name, data, origin.join(", ")))
            }
            None => None,
        };
        let y = self.new_value(tail, Storage::Arena);
        self.push(
            i,
            Step::Dense(Dense {
                x,
                y,
                w,
                bias,
                m,
                k,
                n,
                act,
            }),
        );
        self.finish_chain(i, tail, y);
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

/// The `oc` per-channel values of a constant that broadcasts along axis 1 of an NCHW
/// tensor only (`[1, C, 1, 1]`, `[C, 1, 1]` or a scalar); `None` for any other shape.
fn per_channel(k: &Tensor, oc: usize) -> Result<Option<Vec<f32>>> {
    let v = k.to_vec::<f32>()?;
    if v.len() == 1 {
        return Ok(Some(vec![v[0]; oc]));
    }
    let mut s = k.shape().to_vec();
    while s.len() < 4 {
        s.insert(0, 1);
    }
    Ok((s.len() == 4 && s[0] == 1 && s[1] == oc && s[2] == 1 && s[3] == 1).then_some(v))
}
