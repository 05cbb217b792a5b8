//! `UniformReal`: uniform Float32 samples drawn from an explicit Int64 key input, so that
//! random ops are pure functions (a compiled graph takes a fresh key per step).
//!
//! ```
//! use spore_core::{Tensor, DType};
//! let key = Tensor::scalar(7i64);
//! let a = Tensor::uniform_from_key(&key, &[4]).unwrap();
//! assert_eq!(a.to_vec::<f32>().unwrap(), Tensor::uniform_from_key(&key, &[4]).unwrap().to_vec::<f32>().unwrap());
//! ```

use std::panic::Location;

use spore_kernels::{Buffer, DType, random};

use crate::apply::apply;
use crate::error::Result;
use crate::op::Op;
use crate::tensor::{Storage, Tensor, TensorType};

pub(crate) fn infer(op: &Op, inputs: &[&TensorType]) -> Result<TensorType, String> {
    let Op::RandomUniform { shape } = op else {
        return Err(format!("{} is not a random op", op.name()));
    };
    let key = inputs[0];
    if key.dtype != DType::I64 || key.numel() != 1 {
        return Err(format!("key must be one Int64 element, got {key}"));
    }
    Ok(TensorType::new(shape, DType::F32))
}

pub(crate) fn eval(_op: &Op, inputs: &[&Tensor], out: &TensorType) -> Result<Storage, String> {
    // The one element, read in place (no vector: a compiled step allocates nothing).
    let k = inputs[0].buf();
    let key = k
        .buffer
        .as_slice::<i64>()
        .and_then(|v| v.get(k.layout.offset))
        .copied()
        .ok_or("key must be one Int64 element")? as u64;
    Ok(Storage::contiguous(
        Buffer::F32(random::uniform(key, out.numel())),
        &out.shape,
    ))
}

impl Tensor {
    /// Uniform [0, 1) Float32 samples of `shape` determined by `key` (an Int64 scalar).
    #[track_caller]
    pub fn uniform_from_key(key: &Tensor, shape: &[usize]) -> Result<Tensor> {
        apply(
            Op::RandomUniform {
                shape: shape.to_vec(),
            },
            &[key],
            Location::caller(),
        )
    }
}
