//! Fusion while lowering: what a convolution or a product absorbs from the nodes after it
//! (each absorbed value must have that one reader).

use spore_core::ir::NodeKind;
use spore_core::op::{ConvAttrs, Op};
use spore_core::{Result, Tensor};
use spore_kernels::{BinaryFn, UnaryFn};

use super::{Lowered, Lowering, c_ident, scalar_of, shape4};
use crate::emit::conv::{channel_block, pack_weights};
use crate::program::{Act, Conv, Dense, FusedPool, Step, Storage, ValueId};

impl<'a> Lowering<'a> {
    /// The single reader of `t`, when `t` is not an output and has exactly one.
    pub(super) fn sole_reader(&self, t: usize) -> Option<usize> {
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
    pub(super) fn activation(&self, u: usize, t: usize) -> Option<(Act, usize)> {
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

    pub(super) fn conv(&mut self, i: usize, attrs: ConvAttrs, args: &[usize]) -> Result<()> {
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
    pub(super) fn finish_chain(&mut self, head: usize, tail: usize, y: ValueId) {
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

    /// A max pool at `u` whose windows tile its input (square, kernel = stride, no
    /// padding).
    fn tiling_pool(&self, u: usize) -> Option<FusedPool> {
        let Op::MaxPool2d(a) = self.g.nodes[u].op()? else {
            return None;
        };
        let k = a.kernel[0];
        (a.kernel == [k, k] && a.stride == [k, k] && a.pads == [0; 4] && !a.ceil_mode && k > 1)
            .then_some(FusedPool { size: k })
    }

    pub(super) fn dense(&mut self, i: usize, args: &[usize]) -> Result<()> {
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
