//! AllGather and ReduceScatter along axis 0; each is the other's gradient.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_parallel::{init, ops};
//! init().unwrap();
//! let x = Tensor::from_vec(vec![1i32, 2], &[2, 1]).unwrap();
//! assert_eq!(ops::all_gather(&x, None).unwrap().shape(), &[2, 1]); // one rank
//! ```

use spore_core::prims::custom::CustomPrimitive;
use spore_core::{Result, Tensor, TensorType};

use super::{apply_primitive, check_reducible, contiguous_buffer};
use crate::backend::ReduceOp;
use crate::collective;
use crate::management::GroupInfo;

/// MindSpore's `ops.AllGather(group)`.
#[derive(Debug, Clone)]
pub struct AllGather {
    group: GroupInfo,
}

impl AllGather {
    pub(crate) fn new(group: GroupInfo) -> AllGather {
        AllGather { group }
    }
}

fn one_input<'a>(inputs: &[&'a TensorType]) -> std::result::Result<&'a TensorType, String> {
    match inputs {
        [x] if !x.shape.is_empty() => Ok(x),
        [_] => Err("expected a tensor with at least one axis (it is split or joined along axis 0), got a scalar".into()),
        _ => Err(format!("expected 1 input, got {}", inputs.len())),
    }
}

impl CustomPrimitive for AllGather {
    fn name(&self) -> &str {
        "AllGather"
    }
    fn attributes(&self) -> String {
        format!("group={}", self.group.name)
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        let x = one_input(inputs)?;
        let mut shape = x.shape.to_vec();
        shape[0] = shape[0]
            .checked_mul(self.group.size())
            .ok_or("the gathered shape overflows")?;
        Ok(TensorType::new(&shape, x.dtype))
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
        let dx = apply_primitive(
            ReduceScatter::new(ReduceOp::Sum, self.group.clone()),
            &[grad],
        )?;
        Ok(vec![Some(dx)])
    }
    fn has_side_effect(&self) -> bool {
        true
    }
}

/// MindSpore's `ops.ReduceScatter(op, group)`.
#[derive(Debug, Clone)]
pub struct ReduceScatter {
    op: ReduceOp,
    group: GroupInfo,
}

impl ReduceScatter {
    pub(crate) fn new(op: ReduceOp, group: GroupInfo) -> ReduceScatter {
        ReduceScatter { op, group }
    }
}

impl CustomPrimitive for ReduceScatter {
    fn name(&self) -> &str {
        "ReduceScatter"
    }
    fn attributes(&self) -> String {
        format!("op={}, group={}", self.op.name(), self.group.name)
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        let x = one_input(inputs)?;
        check_reducible(self.op, x.dtype)?;
        let n = self.group.size();
        if x.shape[0] % n != 0 {
            return Err(format!(
                "axis 0 ({}) must divide evenly among the group's {n} ranks",
                x.shape[0]
            ));
        }
        let mut shape = x.shape.to_vec();
        shape[0] /= n;
        Ok(TensorType::new(&shape, x.dtype))
    }
    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        let x = inputs[0];
        let out =
            collective::reduce_scatter(&self.group, contiguous_buffer(x)?, x.shape(), self.op)
                .map_err(|e| e.to_string())?;
        let mut shape = x.shape().to_vec();
        shape[0] /= self.group.size();
        Tensor::from_buffer(out, &shape).map_err(|e| e.to_string())
    }
    fn vjp(&self, _: &[Tensor], _: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let gathered = apply_primitive(AllGather::new(self.group.clone()), &[grad])?;
        let dx = match self.op {
            ReduceOp::Mean => gathered.div_scalar(self.group.size() as f64)?,
            ReduceOp::Sum => gathered,
            other => {
                return Err(spore_core::Error::invalid(format!(
                    "{}: the {} reduction has no gradient rule",
                    self.group.describe("ReduceScatter"),
                    other.name()
                )));
            }
        };
        Ok(vec![Some(dx)])
    }
    fn has_side_effect(&self) -> bool {
        true
    }
}
