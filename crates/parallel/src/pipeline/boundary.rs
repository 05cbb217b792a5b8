//! The primitives at a pipeline stage's edges. Each is differentiable so that the
//! ordinary backward pass of a training step is the pipeline's backward schedule: the
//! gradient of a sent activation is received from the next stage, the gradient of a
//! received one is sent back.
//!
//! | primitive | forward | backward |
//! |---|---|---|
//! | [`StageSend`] `(x, token) -> token` | sends `x` to the next stage | receives `x`'s gradient |
//! | [`StageRecv`] `(token) -> x` | receives `x` from the previous stage | sends `x`'s gradient back |
//! | [`Token`] `(x[, received]) -> token` | a scalar zero that comes after `x` | zero for `received` |
//! | [`After`] `(x, token) -> x` | `x`, once `token` exists | `x`'s gradient, passed on |
//! | [`StageLoss`] `(value) -> loss` | the last stage's loss, on every stage | identity |
//!
//! Sends block until the peer receives (MPI's rendezvous for large messages), so both
//! sides must meet their messages in the same order. Tokens chain the sends of one
//! stage, and the receives of the next, in micro-batch order, forward and backward;
//! the backward pass, which runs each node after every node that read its output, then
//! meets them in reverse micro-batch order on both sides. Each micro-batch's input also
//! waits for a token of the previous micro-batch's output on the stage, so that the
//! backward pass finishes micro-batch `m` (and sends its gradient on) before it starts
//! `m - 1`: without that order a stage would send no gradient until its whole backward
//! pass had run, and the stages' backward passes would not overlap.

use spore_core::prims::custom::CustomPrimitive;
use spore_core::{DType, Result, Tensor, TensorType};

use crate::backend::ReduceOp;
use crate::collective;
use crate::management::GroupInfo;
use crate::ops::{apply_primitive, contiguous_buffer, result_tensor, shared_buffer};

fn scalar_zero() -> Tensor {
    Tensor::scalar(0.0f32)
}

fn token_type() -> TensorType {
    TensorType::new(&[], DType::F32)
}

/// Where a boundary's message goes or comes from: the peer's rank in the world group and
/// the message tag.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    pub(crate) peer: usize,
    pub(crate) tag: i32,
    pub(crate) group: GroupInfo,
}

impl Link {
    fn send(&self, x: &Tensor) -> std::result::Result<(), String> {
        collective::send(
            &self.group,
            contiguous_buffer(x)?,
            x.shape(),
            self.peer,
            self.tag,
        )
        .map_err(|e| e.to_string())
    }
    fn recv(&self, t: &TensorType) -> std::result::Result<Tensor, String> {
        let data = collective::recv(&self.group, &t.shape, t.dtype, self.peer, self.tag)
            .map_err(|e| e.to_string())?;
        result_tensor(data, &t.shape)
    }
    fn attributes(&self, dir: &str) -> String {
        format!("{dir}={}, tag={}", self.peer, self.tag)
    }
}

/// Sends an activation to the next stage; its gradient comes back from there.
#[derive(Debug, Clone)]
pub(crate) struct StageSend {
    pub(crate) link: Link,
    /// The tag the gradient comes back with.
    pub(crate) grad_tag: i32,
}

impl CustomPrimitive for StageSend {
    fn name(&self) -> &str {
        "StageSend"
    }
    fn attributes(&self) -> String {
        format!(
            "{}, grad_tag={}",
            self.link.attributes("dest"),
            self.grad_tag
        )
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        match inputs {
            [_, token] if token.shape.is_empty() => Ok(token_type()),
            _ => Err(format!(
                "expected (activation, scalar token), got {} inputs",
                inputs.len()
            )),
        }
    }
    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        self.link.send(inputs[0])?;
        Ok(scalar_zero())
    }
    fn vjp(&self, inputs: &[Tensor], _: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let back = GradRecv {
            link: Link {
                tag: self.grad_tag,
                ..self.link.clone()
            },
            ty: inputs[0].tensor_type().clone(),
        };
        // The received gradient is made after `grad` (the later micro-batch's token), and
        // the earlier micro-batch's token gradient after it: the chain of receives.
        let g = apply_primitive(back, &[grad])?;
        let token = apply_primitive(Token, &[&g])?;
        Ok(vec![Some(g), Some(token)])
    }
    fn has_side_effect(&self) -> bool {
        true
    }
}

/// Receives an activation's gradient from the next stage (the backward of [`StageSend`]).
#[derive(Debug, Clone)]
struct GradRecv {
    link: Link,
    ty: TensorType,
}

impl CustomPrimitive for GradRecv {
    fn name(&self) -> &str {
        "StageGradRecv"
    }
    fn attributes(&self) -> String {
        format!("{}, type={}", self.link.attributes("src"), self.ty)
    }
    fn infer(&self, _: &[&TensorType]) -> std::result::Result<TensorType, String> {
        Ok(self.ty.clone())
    }
    fn eval(&self, _: &[&Tensor]) -> std::result::Result<Tensor, String> {
        self.link.recv(&self.ty)
    }
    fn vjp(&self, _: &[Tensor], _: &Tensor, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![None])
    }
    fn has_side_effect(&self) -> bool {
        true
    }
}

/// Receives an activation from the previous stage; its gradient goes back there.
#[derive(Debug, Clone)]
pub(crate) struct StageRecv {
    pub(crate) link: Link,
    pub(crate) grad_tag: i32,
    pub(crate) ty: TensorType,
}

impl CustomPrimitive for StageRecv {
    fn name(&self) -> &str {
        "StageRecv"
    }
    fn attributes(&self) -> String {
        format!(
            "{}, grad_tag={}, type={}",
            self.link.attributes("src"),
            self.grad_tag,
            self.ty
        )
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        match inputs {
            [token] if token.shape.is_empty() => Ok(self.ty.clone()),
            _ => Err(format!(
                "expected one scalar token, got {} inputs",
                inputs.len()
            )),
        }
    }
    fn eval(&self, _: &[&Tensor]) -> std::result::Result<Tensor, String> {
        self.link.recv(&self.ty)
    }
    fn vjp(&self, _: &[Tensor], _: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let back = GradSend(Link {
            tag: self.grad_tag,
            ..self.link.clone()
        });
        Ok(vec![Some(apply_primitive(back, &[grad])?)])
    }
    fn has_side_effect(&self) -> bool {
        true
    }
}

/// Sends an activation's gradient back to the previous stage (the backward of
/// [`StageRecv`]); returns a token, the gradient of the receive's own token.
#[derive(Debug, Clone)]
struct GradSend(Link);

impl CustomPrimitive for GradSend {
    fn name(&self) -> &str {
        "StageGradSend"
    }
    fn attributes(&self) -> String {
        self.0.attributes("dest")
    }
    fn infer(&self, _: &[&TensorType]) -> std::result::Result<TensorType, String> {
        Ok(token_type())
    }
    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        self.0.send(inputs[0])?;
        Ok(scalar_zero())
    }
    fn vjp(&self, _: &[Tensor], _: &Tensor, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![None])
    }
    fn has_side_effect(&self) -> bool {
        true
    }
}

/// A scalar zero computed after its inputs: orders one boundary after another. A
/// second input (a received activation) gets a zero gradient, so that the gradient sent
/// back for it always exists.
#[derive(Debug, Clone)]
pub(crate) struct Token;

impl CustomPrimitive for Token {
    fn name(&self) -> &str {
        "Token"
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        match inputs {
            [_] | [_, _] => Ok(token_type()),
            _ => Err(format!("expected 1 or 2 inputs, got {}", inputs.len())),
        }
    }
    fn eval(&self, _: &[&Tensor]) -> std::result::Result<Tensor, String> {
        Ok(scalar_zero())
    }
    fn vjp(&self, inputs: &[Tensor], _: &Tensor, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Ok(match inputs {
            [_, received] => vec![None, Some(received.zeros_like())],
            _ => vec![None],
        })
    }
    fn has_side_effect(&self) -> bool {
        // Never folded into a constant, merged or removed: it exists for its order.
        true
    }
}

/// Its first input, made after its second: orders a micro-batch after the previous one.
#[derive(Debug, Clone)]
pub(crate) struct After;

impl CustomPrimitive for After {
    fn name(&self) -> &str {
        "After"
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        match inputs {
            [x, _] => Ok((*x).clone()),
            _ => Err(format!(
                "expected (value, token), got {} inputs",
                inputs.len()
            )),
        }
    }
    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        Ok(inputs[0].clone())
    }
    fn vjp(&self, _: &[Tensor], _: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![Some(grad.clone()), None])
    }
    fn has_side_effect(&self) -> bool {
        // Kept where it is: it exists for its order.
        true
    }
}

/// The last stage's loss (averaged over its data-parallel replicas) on every stage of
/// its pipeline (so that `LossMonitor` on rank 0 prints it). Its gradient is the identity: each stage's backward starts from its
/// own part (the last stage's loss, the other stages' last send).
#[derive(Debug, Clone)]
pub(crate) struct StageLoss {
    /// World ranks of the pipeline's other stages (on the last stage), or the last stage
    /// (on the others).
    pub(crate) peers: Vec<usize>,
    pub(crate) is_last: bool,
    pub(crate) tag: i32,
    pub(crate) group: GroupInfo,
    /// The last stage's data-parallel replicas, whose losses are averaged.
    pub(crate) replicas: Option<GroupInfo>,
}

impl CustomPrimitive for StageLoss {
    fn name(&self) -> &str {
        "StageLoss"
    }
    fn attributes(&self) -> String {
        format!(
            "peers={:?}, last={}, tag={}",
            self.peers, self.is_last, self.tag
        )
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        match inputs {
            [x] if x.shape.is_empty() => Ok((*x).clone()),
            _ => Err("expected one scalar (the loss, or the stage's token)".to_string()),
        }
    }
    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        let x = inputs[0];
        let link = |peer| Link {
            peer,
            tag: self.tag,
            group: self.group.clone(),
        };
        if self.is_last {
            let mean = match &self.replicas {
                Some(g) => {
                    let data =
                        collective::all_reduce(g, shared_buffer(x)?, x.shape(), ReduceOp::Mean)
                            .map_err(|e| e.to_string())?;
                    result_tensor(data, x.shape())?
                }
                None => x.clone(),
            };
            for &p in &self.peers {
                link(p).send(&mean)?;
            }
            return Ok(mean);
        }
        match self.peers.first() {
            Some(&last) => link(last).recv(x.tensor_type()),
            None => Ok(x.clone()),
        }
    }
    fn vjp(&self, _: &[Tensor], _: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![Some(grad.clone())])
    }
    fn has_side_effect(&self) -> bool {
        true
    }
}
