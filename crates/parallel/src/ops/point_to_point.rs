//! Send and Receive between two ranks of a group. Each message is preceded by its
//! signature, so a receive that expected another shape or dtype is an error naming both.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_parallel::{init, ops};
//! init().unwrap();
//! let x = Tensor::from_vec(vec![5i64], &[1]).unwrap();
//! ops::send(&x, 0, 7, None).unwrap(); // to oneself, in a one-process job
//! let y = ops::recv(&x, &[1], DType::I64, 0, 7, None).unwrap();
//! assert_eq!(y.to_vec::<i64>().unwrap(), [5]);
//! ```

use spore_core::prims::custom::CustomPrimitive;
use spore_core::{DType, Error, Result, Tensor, TensorType};

use super::contiguous_buffer;
use crate::collective;
use crate::management::GroupInfo;

fn check_peer(op: &str, peer: usize, group: &GroupInfo) -> Result<()> {
    if peer >= group.size() {
        return Err(Error::invalid_here(format!(
            "{op}: rank {peer} is not a rank of group '{}' ({} ranks)",
            group.name,
            group.size()
        )));
    }
    Ok(())
}

fn not_differentiable(op: &str) -> Result<Vec<Option<Tensor>>> {
    Err(Error::invalid(format!(
        "{op} has no gradient rule yet: differentiate through a collective (AllReduce, AllGather, ...) instead"
    )))
}

/// MindSpore's `ops.Send(sr_tag, dest_rank, group)`; returns its input.
#[derive(Debug, Clone)]
pub struct Send {
    dest: usize,
    tag: i32,
    group: GroupInfo,
}

impl Send {
    pub(crate) fn new(dest: usize, tag: i32, group: GroupInfo) -> Result<Send> {
        check_peer("Send", dest, &group)?;
        Ok(Send { dest, tag, group })
    }
}

impl CustomPrimitive for Send {
    fn name(&self) -> &str {
        "Send"
    }
    fn attributes(&self) -> String {
        format!(
            "dest={}, tag={}, group={}",
            self.dest, self.tag, self.group.name
        )
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        let [x] = inputs else {
            return Err(format!("expected 1 input, got {}", inputs.len()));
        };
        Ok((*x).clone())
    }
    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        let x = inputs[0];
        collective::send(
            &self.group,
            contiguous_buffer(x)?,
            x.shape(),
            self.dest,
            self.tag,
        )
        .map_err(|e| e.to_string())?;
        Ok(x.clone())
    }
    fn vjp(&self, _: &[Tensor], _: &Tensor, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        not_differentiable("Send")
    }
    fn has_side_effect(&self) -> bool {
        true
    }
}

/// MindSpore's `ops.Receive(sr_tag, src_rank, shape, dtype, group)`.
#[derive(Debug, Clone)]
pub struct Receive {
    shape: Vec<usize>,
    dtype: DType,
    src: usize,
    tag: i32,
    group: GroupInfo,
}

impl Receive {
    pub(crate) fn new(
        shape: &[usize],
        dtype: DType,
        src: usize,
        tag: i32,
        group: GroupInfo,
    ) -> Result<Receive> {
        check_peer("Receive", src, &group)?;
        Ok(Receive {
            shape: shape.to_vec(),
            dtype,
            src,
            tag,
            group,
        })
    }
}

impl CustomPrimitive for Receive {
    fn name(&self) -> &str {
        "Receive"
    }
    fn attributes(&self) -> String {
        format!(
            "src={}, tag={}, shape={:?}, dtype={}, group={}",
            self.src, self.tag, self.shape, self.dtype, self.group.name
        )
    }
    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        if inputs.len() != 1 {
            return Err(format!(
                "expected 1 input (the tensor to receive after), got {}",
                inputs.len()
            ));
        }
        Ok(TensorType::new(&self.shape, self.dtype))
    }
    fn eval(&self, _: &[&Tensor]) -> std::result::Result<Tensor, String> {
        let data = collective::recv(&self.group, &self.shape, self.dtype, self.src, self.tag)
            .map_err(|e| e.to_string())?;
        Tensor::from_buffer(data, &self.shape).map_err(|e| e.to_string())
    }
    fn vjp(&self, _: &[Tensor], _: &Tensor, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        not_differentiable("Receive")
    }
    fn has_side_effect(&self) -> bool {
        true
    }
}
