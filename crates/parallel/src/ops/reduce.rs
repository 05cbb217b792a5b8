//! AllReduce and Broadcast: same shape in, same shape out.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_parallel::{init, ops};
//! init().unwrap();
//! let x = Tensor::from_vec(vec![3.0f64], &[1]).unwrap();
//! assert_eq!(ops::broadcast(&x, 0, None).unwrap().item().unwrap(), 3.0);
//! ```

use spore_core::prims::custom::CustomPrimitive;
use spore_core::{Error, Result, Tensor, TensorType};

use super::{apply_primitive, check_reducible, contiguous_buffer, result_tensor, shared_buffer};
use crate::backend::ReduceOp;
use crate::collective;
use crate::management::GroupInfo;

/// MindSpore's `ops.AllReduce(op, group)`.
#[derive(Debug, Clone)]
pub struct AllReduce {
    op: ReduceOp,
    group: GroupInfo,
}

impl AllReduce {
    pub(crate) fn new(op: ReduceOp, group: GroupInfo) -> AllReduce {
        AllReduce { op, group }
    }
}

impl CustomPrimitive for AllReduce {
    fn name(&self) -> &str {
        "AllReduce"
    }
    fn attributes(&self) -> String {
        format!("op={}, group={}", self.op.name(), self.group.name)
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        let [x] = inputs else {
            return Err(format!("expected 1 input, got {}", inputs.len()));
        };
        check_reducible(self.op, x.dtype)?;
        Ok((*x).clone())
    }
    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        let x = inputs[0];
        let out = collective::all_reduce(&self.group, shared_buffer(x)?, x.shape(), self.op)
            .map_err(|e| e.to_string())?;
        result_tensor(out, x.shape())
    }
    fn vjp(&self, inputs: &[Tensor], out: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let dx = match self.op {
            // d/dx_r of sum_k L_k(sum_i x_i): the sum of every rank's gradient.
            ReduceOp::Sum | ReduceOp::Mean => {
                apply_primitive(AllReduce::new(self.op, self.group.clone()), &[grad])?
            }
            // Only the ranks holding the winning value receive the summed gradient.
            ReduceOp::Max | ReduceOp::Min => {
                let total =
                    apply_primitive(AllReduce::new(ReduceOp::Sum, self.group.clone()), &[grad])?;
                let won = inputs[0].equal(out)?.cast(grad.dtype())?;
                total.mul(&won)?
            }
            ReduceOp::Prod => {
                return Err(Error::invalid(format!(
                    "{}: the product reduction has no gradient rule",
                    self.group.describe("AllReduce")
                )));
            }
        };
        Ok(vec![Some(dx)])
    }
    fn has_side_effect(&self) -> bool {
        true
    }
}

/// MindSpore's `ops.Broadcast(root_rank, group)`.
#[derive(Debug, Clone)]
pub struct Broadcast {
    root: usize,
    group: GroupInfo,
}

impl Broadcast {
    pub(crate) fn new(root: usize, group: GroupInfo) -> Result<Broadcast> {
        if root >= group.size() {
            return Err(Error::invalid_here(format!(
                "Broadcast: root {root} is not a rank of group '{}' ({} ranks)",
                group.name,
                group.size()
            )));
        }
        Ok(Broadcast { root, group })
    }
}

impl CustomPrimitive for Broadcast {
    fn name(&self) -> &str {
        "Broadcast"
    }
    fn attributes(&self) -> String {
        format!("root={}, group={}", self.root, self.group.name)
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        let [x] = inputs else {
            return Err(format!("expected 1 input, got {}", inputs.len()));
        };
        Ok((*x).clone())
    }
    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        let x = inputs[0];
        let data = contiguous_buffer(x)?;
        let out = collective::broadcast(&self.group, data, x.shape(), self.root)
            .map_err(|e| e.to_string())?;
        Tensor::from_buffer(out, x.shape()).map_err(|e| e.to_string())
    }
    fn vjp(&self, _inputs: &[Tensor], _out: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        // Every rank's output is the root's input: the root's gradient is the sum of all
        // ranks' output gradients; the others' inputs were not used.
        let total = apply_primitive(AllReduce::new(ReduceOp::Sum, self.group.clone()), &[grad])?;
        let dx = if self.group.rank == self.root {
            total
        } else {
            // The AllReduce above still ran: every rank takes part in it.
            total.zeros_like()
        };
        Ok(vec![Some(dx)])
    }
    fn has_side_effect(&self) -> bool {
        true
    }
}
