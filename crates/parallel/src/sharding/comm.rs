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
//! a separate summand (data parallelism), so each redistribution step here is its own
//! primitive whose gradient is the step back (Megatron's conjugate pairs):
//!
//! | forward | backward |
//! |---|---|
//! | `PartialSum`: AllReduce of summands into the whole value | identity (`GradSum`) |
//! | `GradSum`: identity where an op uses a value that is whole across ranks computing different parts | AllReduce of the gradient's summands (`PartialSum`) |
//! | `GatherBlocks`: AllGather of blocks into the whole | take this rank's block (`SliceBlock`) |
//! | `SliceBlock`: take this rank's block of a whole value | AllGather (`GatherBlocks`) |
//! | `ReduceScatterBlocks`: sum of summands, this rank's block kept | AllGather (`GatherBlocks`) |
//!
//! Each works along axis 0; `redistribute` moves other axes there with views.

use spore_core::prims::custom::CustomPrimitive;
use spore_core::{Result, Tensor, TensorType};

use crate::backend::ReduceOp;
use crate::collective;
use crate::management::GroupInfo;
use crate::ops::{apply_primitive, contiguous_buffer, result_tensor, shared_buffer};

/// The AllReduce of summands into the whole value; gradient: identity.
#[derive(Debug, Clone)]
pub(crate) struct PartialSum {
    pub(crate) group: GroupInfo,
}

/// Identity; gradient: the AllReduce of the gradient's summands.
#[derive(Debug, Clone)]
pub(crate) struct GradSum {
    pub(crate) group: GroupInfo,
}

/// AllGather of axis-0 blocks; gradient: this rank's block.
#[derive(Debug, Clone)]
pub(crate) struct GatherBlocks {
    pub(crate) group: GroupInfo,
}

/// This rank's axis-0 block (the group rank's); gradient: AllGather.
#[derive(Debug, Clone)]
pub(crate) struct SliceBlock {
    pub(crate) group: GroupInfo,
}

/// The sum of summands, this rank's axis-0 block kept; gradient: AllGather.
#[derive(Debug, Clone)]
pub(crate) struct ReduceScatterBlocks {
    pub(crate) group: GroupInfo,
}

fn one<'a>(inputs: &[&'a TensorType]) -> std::result::Result<&'a TensorType, String> {
    match inputs {
        [x] => Ok(x),
        _ => Err(format!("expected 1 input, got {}", inputs.len())),
    }
}

fn rows<'a>(inputs: &[&'a TensorType]) -> std::result::Result<&'a TensorType, String> {
    let x = one(inputs)?;
    if x.shape.is_empty() {
        return Err(
            "expected a tensor with at least one axis (blocks are cut along axis 0), got a scalar"
                .into(),
        );
    }
    Ok(x)
}

/// `x`'s shape with axis 0 multiplied (`grow`) or divided by the group's size.
fn resized(x: &TensorType, n: usize, grow: bool) -> std::result::Result<TensorType, String> {
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

impl CustomPrimitive for PartialSum {
    fn name(&self) -> &str {
        "AllReduce"
    }
    fn attributes(&self) -> String {
        format!("op=sum, group={}, summands->whole", self.group.name)
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        let x = one(inputs)?;
        float_only(x)?;
        Ok(x.clone())
    }
    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        let x = inputs[0];
        let out = collective::all_reduce(&self.group, shared_buffer(x)?, x.shape(), ReduceOp::Sum)
            .map_err(|e| e.to_string())?;
        result_tensor(out, x.shape())
    }
    fn vjp(&self, _: &[Tensor], _: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let g = GradSum {
            group: self.group.clone(),
        };
        Ok(vec![Some(apply_primitive(g, &[grad])?)])
    }
    fn has_side_effect(&self) -> bool {
        true
    }
}

impl CustomPrimitive for GradSum {
    fn name(&self) -> &str {
        "GradAllReduce"
    }
    fn attributes(&self) -> String {
        format!("group={}, identity; gradient summed", self.group.name)
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        Ok(one(inputs)?.clone())
    }
    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        Ok(inputs[0].detach())
    }
    fn vjp(&self, _: &[Tensor], _: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let g = PartialSum {
            group: self.group.clone(),
        };
        Ok(vec![Some(apply_primitive(g, &[grad])?)])
    }
    fn has_side_effect(&self) -> bool {
        // Its gradient is a collective every rank must reach: never merged away.
        true
    }
}

impl CustomPrimitive for GatherBlocks {
    fn name(&self) -> &str {
        "AllGather"
    }
    fn attributes(&self) -> String {
        format!("group={}, blocks->whole", self.group.name)
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        resized(rows(inputs)?, self.group.size(), true)
    }
    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        let x = inputs[0];
        let out = collective::all_gather(&self.group, contiguous_buffer(x)?, x.shape())
            .map_err(|e| e.to_string())?;
        let mut shape = x.shape().to_vec();
        shape[0] *= self.group.size();
        Tensor::from_buffer(out, &shape).map_err(|e| e.to_string())
    }
    fn vjp(&self, _: &[Tensor], _: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let g = SliceBlock {
            group: self.group.clone(),
        };
        Ok(vec![Some(apply_primitive(g, &[grad])?)])
    }
    fn has_side_effect(&self) -> bool {
        true
    }
}

impl CustomPrimitive for SliceBlock {
    fn name(&self) -> &str {
        "SliceBlock"
    }
    fn attributes(&self) -> String {
        format!(
            "block {} of {} (group={}), whole->block",
            self.group.rank,
            self.group.size(),
            self.group.name
        )
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        resized(rows(inputs)?, self.group.size(), false)
    }
    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        let x = inputs[0];
        let s = x
            .storage()
            .ok_or("SliceBlock needs a concrete tensor (internal: eval got a traced one)")?;
        let mut len = x.shape().to_vec();
        len[0] /= self.group.size();
        let mut start = vec![0; len.len()];
        start[0] = self.group.rank * len[0];
        let view = s.layout.slice(&start, &vec![1; len.len()], &len);
        let block = spore_kernels::elementwise::copy(&s.buffer, &view);
        Tensor::from_buffer(block, &len).map_err(|e| e.to_string())
    }
    fn vjp(&self, _: &[Tensor], _: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let g = GatherBlocks {
            group: self.group.clone(),
        };
        Ok(vec![Some(apply_primitive(g, &[grad])?)])
    }
    fn has_side_effect(&self) -> bool {
        // Its gradient is a collective: kept like one.
        true
    }
}

impl CustomPrimitive for ReduceScatterBlocks {
    fn name(&self) -> &str {
        "ReduceScatter"
    }
    fn attributes(&self) -> String {
        format!("op=sum, group={}, summands->block", self.group.name)
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        let x = rows(inputs)?;
        float_only(x)?;
        resized(x, self.group.size(), false)
    }
    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        let x = inputs[0];
        let out = collective::reduce_scatter(
            &self.group,
            contiguous_buffer(x)?,
            x.shape(),
            ReduceOp::Sum,
        )
        .map_err(|e| e.to_string())?;
        let mut shape = x.shape().to_vec();
        shape[0] /= self.group.size();
        Tensor::from_buffer(out, &shape).map_err(|e| e.to_string())
    }
    fn vjp(&self, _: &[Tensor], _: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let g = GatherBlocks {
            group: self.group.clone(),
        };
        Ok(vec![Some(apply_primitive(g, &[grad])?)])
    }
    fn has_side_effect(&self) -> bool {
        true
    }
}
