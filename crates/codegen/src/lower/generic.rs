//! Steps that map one node to one kernel writing a fresh buffer: pooling that no
//! convolution absorbed, elementwise functions, reductions, concatenation, padding and
//! transposition.

use spore_core::Result;
use spore_core::op::Op;

use super::{Lowered, Lowering, shape4};
use crate::program::{PoolKind, Step, Storage};

impl<'a> Lowering<'a> {
    pub(super) fn generic(&mut self, i: usize, op: &'a Op, args: &'a [usize]) -> Result<()> {
        let ty = self.g.nodes[i].ty();
        match op {
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
            _ => unreachable!("generic is called for the ops above"),
        }
        Ok(())
    }
}
