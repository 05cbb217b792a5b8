//! AlltoAll: each rank splits its tensor into group-size blocks along one axis, sends
//! block j to rank j, and joins the blocks it receives along another axis.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_parallel::{init, ops};
//! init().unwrap();
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
//! assert_eq!(ops::all_to_all(&x, 0, 1, None).unwrap().shape(), &[2, 2]); // one rank
//! ```

use spore_core::prims::custom::CustomPrimitive;
use spore_core::{Result, Tensor, TensorType, no_grad};

use super::{apply_primitive, contiguous_buffer};
use crate::collective;
use crate::management::GroupInfo;

/// MindSpore's `ops.AlltoAll(split_count, split_dim, concat_dim, group)`, with
/// `split_count` the group size.
#[derive(Debug, Clone)]
pub struct AllToAll {
    split_axis: usize,
    concat_axis: usize,
    group: GroupInfo,
}

impl AllToAll {
    pub(crate) fn new(split_axis: usize, concat_axis: usize, group: GroupInfo) -> AllToAll {
        AllToAll {
            split_axis,
            concat_axis,
            group,
        }
    }

    fn out_shape(&self, shape: &[usize]) -> std::result::Result<Vec<usize>, String> {
        let n = self.group.size();
        let rank = shape.len();
        if self.split_axis >= rank || self.concat_axis >= rank {
            return Err(format!(
                "split axis {} and concat axis {} must be axes of a rank-{rank} tensor",
                self.split_axis, self.concat_axis
            ));
        }
        if !shape[self.split_axis].is_multiple_of(n) {
            return Err(format!(
                "the split axis ({}, size {}) must divide evenly among the group's {n} ranks",
                self.split_axis, shape[self.split_axis]
            ));
        }
        let mut out = shape.to_vec();
        out[self.split_axis] /= n;
        out[self.concat_axis] = out[self.concat_axis]
            .checked_mul(n)
            .ok_or("the joined shape overflows")?;
        Ok(out)
    }

    /// The exchange on concrete tensors: blocks stacked on a new leading axis so that
    /// block j is contiguous for the transport, and the received blocks joined.
    fn exchange(&self, x: &Tensor) -> Result<Tensor> {
        let n = self.group.size();
        let block = x.shape()[self.split_axis] / n;
        let blocks: Vec<Tensor> = (0..n)
            .map(|j| x.narrow(self.split_axis as isize, j * block, block))
            .collect::<Result<_>>()?;
        let stacked = Tensor::stack(&blocks.iter().collect::<Vec<_>>(), 0)?;
        let data = contiguous_buffer(&stacked).map_err(spore_core::Error::invalid)?;
        let axes = (self.split_axis * 64 + self.concat_axis) as i64;
        let received = collective::all_to_all(&self.group, data, stacked.shape(), axes)?;
        let received = Tensor::from_buffer(received, stacked.shape())?;
        let parts: Vec<Tensor> = (0..n)
            .map(|i| received.narrow(0, i, 1)?.reshape(&received.shape()[1..]))
            .collect::<Result<_>>()?;
        Tensor::concat(&parts.iter().collect::<Vec<_>>(), self.concat_axis as isize)
    }
}

impl CustomPrimitive for AllToAll {
    fn name(&self) -> &str {
        "AllToAll"
    }
    fn attributes(&self) -> String {
        format!(
            "split_axis={}, concat_axis={}, group={}",
            self.split_axis, self.concat_axis, self.group.name
        )
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        let [x] = inputs else {
            return Err(format!("expected 1 input, got {}", inputs.len()));
        };
        Ok(TensorType::new(&self.out_shape(&x.shape)?, x.dtype))
    }
    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        // Plain data movement: no autodiff record for the pieces.
        no_grad(|| self.exchange(inputs[0])).map_err(|e| e.to_string())
    }
    fn vjp(&self, _: &[Tensor], _: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let back = AllToAll::new(self.concat_axis, self.split_axis, self.group.clone());
        Ok(vec![Some(apply_primitive(back, &[grad])?)])
    }
    fn has_side_effect(&self) -> bool {
        true
    }
}
