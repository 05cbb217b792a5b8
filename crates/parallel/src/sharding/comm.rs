//! The collectives a sharded graph inserts, with the gradients its layouts need.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_parallel::sharding::Layout;
//! spore_parallel::init().unwrap();
//! // One rank: redistribution has nothing to move.
//! let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
//! let whole = Layout::replicated(1, 1);
//! let y = spore_parallel::sharding::redistribute(&x, &[2], &whole, &whole).unwrap();
//! assert_eq!(y.to_vec::<f32>().unwrap(), [1.0, 2.0]);
//! ```
//!
//! In a sharded network every rank computes the same loss, and the gradient of a value
//! is held in the value's own layout: a replicated value's gradient is whole and equal
//! on every rank. The plain collectives' rules assume instead that each rank's loss is
//! a separate summand (data parallelism), so each redistribution step here is one
//! [`Move`] of one primitive, whose gradient is the step back (Megatron's conjugate
//! pairs):
//!
//! | [`Move`] | forward | backward |
//! |---|---|---|
//! | `PartialSum` | AllReduce of summands into the whole value | identity (`GradSum`) |
//! | `GradSum` | identity, where an op uses a value that is whole across ranks computing different parts | AllReduce of the gradient's summands (`PartialSum`) |
//! | `Gather` | AllGather of blocks into the whole | take this rank's block (`Slice`) |
//! | `Slice` | take this rank's block of a whole value | AllGather (`Gather`) |
//! | `ReduceScatter` | sum of summands, this rank's block kept | AllGather (`Gather`) |
//!
//! Each works along axis 0; `redistribute` moves other axes there with views.

use spore_core::prims::custom::CustomPrimitive;
use spore_core::{Result, Tensor, TensorType};

use crate::backend::ReduceOp;
use crate::collective;
use crate::management::GroupInfo;
use crate::ops::{apply_primitive, contiguous_buffer, result_tensor, shared_buffer};

/// One step of moving a value between layouts (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Move {
    PartialSum,
    GradSum,
    Gather,
    Slice,
    ReduceScatter,
}

impl Move {
    /// The step its gradient takes.
    fn conjugate(self) -> Move {
        match self {
            Move::PartialSum => Move::GradSum,
            Move::GradSum => Move::PartialSum,
            Move::Gather => Move::Slice,
            Move::Slice | Move::ReduceScatter => Move::Gather,
        }
    }
}

/// A [`Move`] on a group of ranks, as a Spore primitive.
#[derive(Debug, Clone)]
pub(crate) struct Redistribution {
    pub(crate) kind: Move,
    pub(crate) group: GroupInfo,
}

/// `x`'s shape with axis 0 multiplied (`grow`) or divided by the group's size.
fn resized(x: &TensorType, n: usize, grow: bool) -> std::result::Result<TensorType, String> {
    if x.shape.is_empty() {
        return Err(
            "expected a tensor with at least one axis (blocks are cut along axis 0), got a scalar"
                .into(),
        );
    }
    let mut shape = x.shape.to_vec();
    if grow {
        shape[0] = shape[0]
            .checked_mul(n)
            .ok_or("the gathered shape overflows")?;
    } else {
        if !shape[0].is_multiple_of(n) {
            return Err(format!(
                "axis 0 ({}) must divide evenly among the group's {n} ranks",
                shape[0]
            ));
        }
        shape[0] /= n;
    }
    Ok(TensorType::new(&shape, x.dtype))
}

fn float_only(x: &TensorType) -> std::result::Result<(), String> {
    if x.dtype.is_float() {
        Ok(())
    } else {
        Err(format!(
            "sums need a floating-point tensor, got {}",
            x.dtype
        ))
    }
}

impl Redistribution {
    /// This rank's block of `x` along axis 0 (the group rank's).
    fn block(&self, x: &Tensor) -> std::result::Result<Tensor, String> {
        let s = x
            .storage()
            .ok_or("a block needs a concrete tensor (internal: eval got a traced one)")?;
        let mut len = x.shape().to_vec();
        len[0] /= self.group.size();
        let mut start = vec![0; len.len()];
        start[0] = self.group.rank * len[0];
        let view = s.layout.slice(&start, &vec![1; len.len()], &len);
        let block = spore_kernels::elementwise::copy(&s.buffer, &view);
        Tensor::from_buffer(block, &len).map_err(|e| e.to_string())
    }
}

impl CustomPrimitive for Redistribution {
    fn name(&self) -> &str {
        match self.kind {
            Move::PartialSum => "AllReduce",
            Move::GradSum => "GradAllReduce",
            Move::Gather => "AllGather",
            Move::Slice => "SliceBlock",
            Move::ReduceScatter => "ReduceScatter",
        }
    }
    fn attributes(&self) -> String {
        let what = match self.kind {
            Move::PartialSum => "op=sum, summands->whole".to_string(),
            Move::GradSum => "identity; gradient summed".to_string(),
            Move::Gather => "blocks->whole".to_string(),
            Move::Slice => format!("block {} of {}", self.group.rank, self.group.size()),
            Move::ReduceScatter => "op=sum, summands->block".to_string(),
        };
        format!("group={}, {what}", self.group.name)
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        let [x] = inputs else {
            return Err(format!("expected 1 input, got {}", inputs.len()));
        };
        let n = self.group.size();
        match self.kind {
            Move::PartialSum => float_only(x).map(|_| (*x).clone()),
            Move::GradSum => Ok((*x).clone()),
            Move::Gather => resized(x, n, true),
            Move::Slice => resized(x, n, false),
            Move::ReduceScatter => float_only(x).and_then(|_| resized(x, n, false)),
        }
    }
    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        let x = inputs[0];
        let n = self.group.size();
        let mut shape = x.shape().to_vec();
        let out = match self.kind {
            Move::GradSum => return Ok(x.detach()),
            Move::Slice => return self.block(x),
            Move::PartialSum => {
                let sum = collective::all_reduce(
                    &self.group,
                    shared_buffer(x)?,
                    x.shape(),
                    ReduceOp::Sum,
                );
                return result_tensor(sum.map_err(|e| e.to_string())?, x.shape());
            }
            Move::Gather => {
                shape[0] *= n;
                collective::all_gather(&self.group, contiguous_buffer(x)?, x.shape())
            }
            Move::ReduceScatter => {
                shape[0] /= n;
                collective::reduce_scatter(
                    &self.group,
                    contiguous_buffer(x)?,
                    x.shape(),
                    ReduceOp::Sum,
                )
            }
        };
        Tensor::from_buffer(out.map_err(|e| e.to_string())?, &shape).map_err(|e| e.to_string())
    }
    fn vjp(&self, _: &[Tensor], _: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let back = Redistribution {
            kind: self.kind.conjugate(),
            group: self.group.clone(),
        };
        Ok(vec![Some(apply_primitive(back, &[grad])?)])
    }
    fn has_side_effect(&self) -> bool {
        // Each is, or has as its gradient, a collective every rank must reach: never
        // merged or removed.
        true
    }
}
