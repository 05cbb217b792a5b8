//! `AllFinite(g1, .., gn)`: one operator that checks every gradient of a loss-scaled step
//! for an infinity or a NaN (MindSpore's `amp.all_finite`), a boolean scalar that is true
//! when all of them are finite. It runs in PyNative mode and inside compiled graphs.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_nn::amp::all_finite_tensor;
//! let a = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
//! let b = Tensor::from_vec(vec![f32::INFINITY], &[1]).unwrap();
//! assert_eq!(all_finite_tensor(&[a.clone()]).unwrap().item().unwrap(), 1.0);
//! assert_eq!(all_finite_tensor(&[a, b]).unwrap().item().unwrap(), 0.0);
//! ```
//!
//! Why one operator over all the gradients: a check per gradient (a sum of `g * 0`, NaN
//! when some value is not) was an operator and a pass per parameter, plus the sums' sum;
//! one operator reads each gradient once, stops at the first overflow, and splits large
//! gradients among the threads (`spore_kernels::finite`).

use std::sync::Arc;

use spore_core::prims::custom::{CustomOp, CustomPrimitive};
use spore_core::{DType, Error, Result, Tensor, TensorType};

/// The primitive (no attributes: every instance is the same operator).
#[derive(Debug)]
struct AllFinite;

impl CustomPrimitive for AllFinite {
    fn name(&self) -> &str {
        "AllFinite"
    }

    fn infer(&self, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
        if inputs.is_empty() {
            return Err("expected at least one tensor to check, got none".into());
        }
        Ok(TensorType::new(&[], DType::Bool))
    }

    fn eval(&self, inputs: &[&Tensor]) -> std::result::Result<Tensor, String> {
        Ok(Tensor::scalar(values_finite(inputs)?))
    }

    /// A check has no gradient.
    fn vjp(&self, inputs: &[Tensor], _: &Tensor, _: &Tensor) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![None; inputs.len()])
    }

    /// Any values of accepted types can be checked.
    fn may_fail_on_values(&self) -> bool {
        false
    }

    /// Widening is exact: a 16-bit value is finite exactly when its float32 widening is,
    /// so a compiled step checks a widened 16-bit gradient in place (half the bytes, and
    /// no float32 copy).
    fn same_on_widened_inputs(&self) -> bool {
        true
    }
}

/// A boolean scalar, true when every value of every tensor is finite; an operator in
/// PyNative mode and in compiled graphs alike.
pub fn all_finite_tensor(tensors: &[Tensor]) -> Result<Tensor> {
    let Some((first, rest)) = tensors.split_first() else {
        return Err(Error::invalid(
            "all_finite: expected at least one tensor to check, got none",
        ));
    };
    let op = CustomOp::new(Arc::new(AllFinite));
    first.custom(&op, &rest.iter().collect::<Vec<_>>())
}

/// Whether every value of these concrete tensors is finite: each contiguous one read in
/// place (in parallel where large), a strided view through its values.
pub(super) fn values_finite(tensors: &[&Tensor]) -> std::result::Result<bool, String> {
    for t in tensors {
        let Some(s) = t.storage() else {
            return Err("all_finite: a traced value has no numbers to check".into());
        };
        let finite = if s.layout.is_contiguous() {
            let start = s.layout.offset;
            spore_kernels::finite::all_finite(&s.buffer, start..start + t.numel())
        } else {
            let values = t.to_f64_vec().map_err(|e| e.to_string())?;
            values.iter().all(|x| x.is_finite())
        };
        if !finite {
            return Ok(false);
        }
    }
    Ok(true)
}
