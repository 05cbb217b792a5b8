//! Transforms that are not about images (`mindspore.dataset.transforms`): [`TypeCast`],
//! [`OneHot`], and [`Compose`] (a list of transforms used as one).
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_data::rng::Rng;
//! use spore_data::transforms::{OneHot, TensorOp, TypeCast};
//! let label = Tensor::from_vec(vec![2u8], &[]).unwrap();
//! let x = TypeCast::new(DType::I32).apply(vec![label], &mut Rng::new(0)).unwrap();
//! let y = OneHot::new(4).apply(x, &mut Rng::new(0)).unwrap();
//! assert_eq!(y[0].to_vec::<i32>().unwrap(), vec![0, 0, 1, 0]);
//! ```

use spore_core::{DType, Error, Result, Tensor};

use super::{TensorOp, Transform, single};
use crate::rng::Rng;
use crate::tensors::{cast, elements, with_dtype};

/// Casts each input tensor to `dtype` (truncating floats toward zero, wrapping integers).
#[derive(Clone, Debug)]
pub struct TypeCast {
    dtype: DType,
}

impl TypeCast {
    pub fn new(dtype: DType) -> TypeCast {
        TypeCast { dtype }
    }
}

impl TensorOp for TypeCast {
    fn name(&self) -> String {
        "TypeCast".into()
    }
    // Like MindSpore, TypeCast accepts several columns and casts each.
    fn apply(&self, inputs: Vec<Tensor>, _: &mut Rng) -> Result<Vec<Tensor>> {
        inputs.iter().map(|t| cast(t, self.dtype)).collect()
    }
}

/// Integer labels to one-hot vectors: shape `[..., num_classes]`, the label's dtype (or
/// Float32 with label smoothing: `1 - rate + rate / n` for the class, `rate / n` elsewhere).
#[derive(Clone, Debug)]
pub struct OneHot {
    num_classes: usize,
    smoothing_rate: f64,
}

impl OneHot {
    pub fn new(num_classes: usize) -> OneHot {
        OneHot {
            num_classes,
            smoothing_rate: 0.0,
        }
    }

    pub fn smoothing_rate(mut self, rate: f64) -> OneHot {
        self.smoothing_rate = rate;
        self
    }
}

impl TensorOp for OneHot {
    fn name(&self) -> String {
        "OneHot".into()
    }
    fn apply(&self, inputs: Vec<Tensor>, _: &mut Rng) -> Result<Vec<Tensor>> {
        let t = single("OneHot", inputs)?;
        let n = self.num_classes;
        if n == 0 || !(0.0..=1.0).contains(&self.smoothing_rate) {
            return Err(Error::invalid(format!(
                "OneHot: expected num_classes > 0 and smoothing_rate in [0, 1], got {n} and {}",
                self.smoothing_rate
            )));
        }
        if !t.dtype().is_int() {
            return Err(Error::invalid(format!(
                "OneHot: expected integer labels, got {} (cast them with TypeCast first)",
                t.dtype()
            )));
        }
        let labels: Vec<i64> = with_dtype!(t.dtype(), T => {
            elements::<T>(&t)?.iter().map(|&v| spore_core::Element::to_f64(v) as i64).collect()
        });
        if labels
            .len()
            .checked_mul(n)
            .is_none_or(|total| total > isize::MAX as usize / 8)
        {
            return Err(Error::invalid(format!(
                "OneHot: {} labels x {n} classes is too large to allocate",
                labels.len()
            )));
        }
        let mut hot = vec![0usize; labels.len()];
        for (slot, &l) in hot.iter_mut().zip(&labels) {
            if l < 0 || l as usize >= n {
                return Err(Error::invalid(format!(
                    "OneHot: label {l} is outside 0..{n} (num_classes = {n})"
                )));
            }
            *slot = l as usize;
        }
        let mut shape = t.shape().to_vec();
        shape.push(n);
        if self.smoothing_rate > 0.0 {
            let r = self.smoothing_rate;
            let (on, off) = ((1.0 - r + r / n as f64) as f32, (r / n as f64) as f32);
            let mut v = vec![off; labels.len() * n];
            for (i, &c) in hot.iter().enumerate() {
                v[i * n + c] = on;
            }
            return Ok(vec![Tensor::from_vec(v, &shape)?]);
        }
        with_dtype!(t.dtype(), T => {
            let mut v = vec![<T as spore_core::Element>::zero(); labels.len() * n];
            for (i, &c) in hot.iter().enumerate() {
                v[i * n + c] = <T as spore_core::Element>::one();
            }
            Ok(vec![Tensor::from_vec(v, &shape)?])
        })
    }
}

/// Several transforms applied in order, usable wherever one transform is.
#[derive(Clone, Debug)]
pub struct Compose {
    ops: Vec<Transform>,
}

impl Compose {
    pub fn new(ops: Vec<Transform>) -> Compose {
        Compose { ops }
    }
}

impl TensorOp for Compose {
    fn name(&self) -> String {
        let names: Vec<String> = self.ops.iter().map(|o| o.name()).collect();
        format!("Compose[{}]", names.join(", "))
    }
    fn apply(&self, inputs: Vec<Tensor>, rng: &mut Rng) -> Result<Vec<Tensor>> {
        self.ops.iter().try_fold(inputs, |x, op| op.apply(x, rng))
    }
}
