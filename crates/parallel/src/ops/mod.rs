//! Collectives as Spore operators (MindSpore's `ops.AllReduce`, `AllGather`,
//! `ReduceScatter`, `Broadcast`, `AlltoAll`, `Send`, `Receive`). Each is a primitive
//! like any other: it runs eagerly in PyNative mode and as a node of the graph in Graph
//! mode, has a gradient rule, is named by its scope in `save_graphs` output, dumps and
//! the profiler, and fails with an error naming the op, the group and the rank. The
//! compiler never removes, merges or reorders them (they are side effects).
//!
//! ```
//! use spore_core::Tensor;
//! use spore_parallel::{init, ops, ReduceOp};
//! init().unwrap();
//! let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
//! // One process: the sum over one rank.
//! let y = ops::all_reduce(&x, ReduceOp::Sum, None).unwrap();
//! assert_eq!(y.to_vec::<f32>().unwrap(), [1.0, 2.0]);
//! ```

mod all_to_all;
pub mod bucket;
mod gather;
mod point_to_point;
mod reduce;

use std::panic::Location;
use std::sync::Arc;

use spore_core::op::Op;
use spore_core::prims::custom::{CustomOp, CustomPrimitive};
use spore_core::{DType, Result, Tensor};
use spore_kernels::Buffer;

use crate::backend::ReduceOp;
use crate::management::group;

pub use all_to_all::AllToAll;
pub use gather::{AllGather, ReduceScatter};
pub use point_to_point::{Receive, Send};
pub use reduce::{AllReduce, Broadcast};

/// A tensor's elements as one owned contiguous buffer (what the transport sends).
pub(crate) fn contiguous_buffer(x: &Tensor) -> std::result::Result<Buffer, String> {
    // Its own copy: the tensor's buffer when nobody else holds it, else a clone.
    Ok(Arc::try_unwrap(shared_buffer(x)?).unwrap_or_else(|shared| (*shared).clone()))
}

/// A tensor's elements for a collective to read: the tensor's own buffer when it is
/// laid out contiguously from its start (no copy), else a contiguous copy.
pub(crate) fn shared_buffer(x: &Tensor) -> std::result::Result<Arc<Buffer>, String> {
    let s = x
        .storage()
        .ok_or("a collective needs a concrete tensor (internal: eval got a traced one)")?;
    let whole = s.layout.is_contiguous() && s.layout.offset == 0 && s.buffer.len() == x.numel();
    Ok(if whole {
        s.buffer.clone()
    } else {
        Arc::new(spore_kernels::elementwise::copy(&s.buffer, &s.layout))
    })
}

/// A collective's result buffer as a tensor of `shape`, its memory recycled once the
/// tensor is gone.
pub(crate) fn result_tensor(data: Buffer, shape: &[usize]) -> std::result::Result<Tensor, String> {
    Tensor::from_shared_buffer(crate::recycle::track(data), shape).map_err(|e| e.to_string())
}

/// Applies a primitive to `inputs` through Spore's `apply` (validation, tracing, autodiff).
#[track_caller]
pub(crate) fn apply_primitive(
    p: impl CustomPrimitive + 'static,
    inputs: &[&Tensor],
) -> Result<Tensor> {
    spore_core::apply::apply(
        Op::Custom(CustomOp::new(Arc::new(p))),
        inputs,
        Location::caller(),
    )
}

/// Checks a reduction's dtype: Bool cannot be summed, a mean needs floats.
pub(crate) fn check_reducible(op: ReduceOp, dtype: DType) -> std::result::Result<(), String> {
    if dtype == DType::Bool {
        return Err(format!(
            "cannot reduce Bool tensors ({}); cast to Int32 first",
            op.name()
        ));
    }
    if op == ReduceOp::Mean && !dtype.is_float() {
        return Err(format!(
            "a mean needs a floating-point tensor, got {dtype}; use sum"
        ));
    }
    Ok(())
}

/// Every rank's `x` reduced with `op`, on every rank (`group`: `None` is the world).
/// Gradient: the same AllReduce of the output gradient (for max and min, masked to the
/// ranks whose value won).
#[track_caller]
pub fn all_reduce(x: &Tensor, op: ReduceOp, group_name: Option<&str>) -> Result<Tensor> {
    apply_primitive(AllReduce::new(op, group(group_name)?), &[x])
}

/// Every rank's `x` concatenated along axis 0 in rank order. Gradient: ReduceScatter
/// (sum) of the output gradient.
#[track_caller]
pub fn all_gather(x: &Tensor, group_name: Option<&str>) -> Result<Tensor> {
    apply_primitive(AllGather::new(group(group_name)?), &[x])
}

/// The reduction of every rank's `x`, split along axis 0 into group-size blocks; rank r
/// gets block r. Gradient: AllGather of the output gradient.
#[track_caller]
pub fn reduce_scatter(x: &Tensor, op: ReduceOp, group_name: Option<&str>) -> Result<Tensor> {
    apply_primitive(ReduceScatter::new(op, group(group_name)?), &[x])
}

/// `root`'s `x` (a rank of the group) on every rank; the others' `x` gives only the
/// shape and dtype. Gradient: the sum of every rank's output gradient, on the root.
#[track_caller]
pub fn broadcast(x: &Tensor, root: usize, group_name: Option<&str>) -> Result<Tensor> {
    apply_primitive(Broadcast::new(root, group(group_name)?)?, &[x])
}

/// MindSpore's `AlltoAll(split_count, split_dim, concat_dim)` with `split_count` the group
/// size: `x` split along `split_axis` into group-size blocks, block j to rank j, and the
/// blocks received concatenated along `concat_axis` in rank order. Gradient: the AllToAll
/// with the two axes swapped.
#[track_caller]
pub fn all_to_all(
    x: &Tensor,
    split_axis: usize,
    concat_axis: usize,
    group_name: Option<&str>,
) -> Result<Tensor> {
    apply_primitive(
        AllToAll::new(split_axis, concat_axis, group(group_name)?),
        &[x],
    )
}

/// Sends `x` to `dest` (a rank of the group) with `tag`; returns `x`, so that later ops
/// can be ordered after the send. Not differentiable (pipeline parallelism adds that).
#[track_caller]
pub fn send(x: &Tensor, dest: usize, tag: i32, group_name: Option<&str>) -> Result<Tensor> {
    apply_primitive(Send::new(dest, tag, group(group_name)?)?, &[x])
}

/// Receives the tensor `src` sent with `tag`, which must have `shape` and `dtype` (an
/// error names both otherwise). `after` orders the receive after the op that made it
/// (any tensor; its value is not used). Not differentiable.
#[track_caller]
pub fn recv(
    after: &Tensor,
    shape: &[usize],
    dtype: DType,
    src: usize,
    tag: i32,
    group_name: Option<&str>,
) -> Result<Tensor> {
    apply_primitive(
        Receive::new(shape, dtype, src, tag, group(group_name)?)?,
        &[after],
    )
}
