//! Operations built from primitives rather than being primitives: softmax, log-softmax,
//! ReLU6 and dropout. Their gradients come from the primitives' rules.
//!
//! ```
//! use spore_core::Tensor;
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[1, 3]).unwrap();
//! let p = x.softmax(-1).unwrap().to_vec::<f32>().unwrap();
//! assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
//! ```

use crate::error::{Error, Result};
use crate::tensor::Tensor;

impl Tensor {
    /// `min(max(x, 0), 6)` (MindSpore's `ReLU6`): `Maximum` then `Minimum`, so the
    /// gradient is 1 strictly inside (0, 6) and the graph compiler and the C code
    /// generator see it as one clamp.
    ///
    /// ```
    /// use spore_core::{autodiff::grad, Tensor};
    /// let x = Tensor::from_vec(vec![-1.0f32, 3.0, 7.0], &[3]).unwrap();
    /// assert_eq!(x.relu6().unwrap().to_vec::<f32>().unwrap(), vec![0.0, 3.0, 6.0]);
    /// let g = grad(|x: &[Tensor]| x[0].relu6()?.sum(&[0], false), &[0])(&[x]).unwrap();
    /// assert_eq!(g[0].to_vec::<f32>().unwrap(), vec![0.0, 1.0, 0.0]);
    /// ```
    #[track_caller]
    pub fn relu6(&self) -> Result<Tensor> {
        let zero = Tensor::scalar_of(0.0, self.dtype());
        let six = Tensor::scalar_of(6.0, self.dtype());
        self.maximum(&zero)?.minimum(&six)
    }

    /// `exp(x) / sum(exp(x))` along `axis`, computed stably (the max is subtracted first).
    #[track_caller]
    pub fn softmax(&self, axis: isize) -> Result<Tensor> {
        let rank = self.rank() as isize;
        let last = rank > 0 && (axis == -1 || axis == rank - 1);
        if last && self.numel() > 0 && crate::eager::applies_traced(&[self]) {
            return crate::eager::softmax_last_axis(self);
        }
        let shifted = self.sub(&self.max(&[axis], true)?.stop_gradient()?)?;
        let e = shifted.exp()?;
        e.div(&e.sum(&[axis], true)?)
    }

    /// `x - log(sum(exp(x)))` along `axis`, computed stably.
    #[track_caller]
    pub fn log_softmax(&self, axis: isize) -> Result<Tensor> {
        let shifted = self.sub(&self.max(&[axis], true)?.stop_gradient()?)?;
        shifted.sub(&shifted.exp()?.sum(&[axis], true)?.log()?)
    }

    /// Zeroes each element with probability `p` and scales the rest by `1 / (1 - p)`; the
    /// identity when not `training`. Draws its mask from the global seeded generator (a fresh
    /// key per call, and per run inside a compiled graph).
    #[track_caller]
    pub fn dropout(&self, p: f64, training: bool) -> Result<Tensor> {
        // No key is drawn when nothing is dropped: evaluation must not shift the seeded
        // sequence of keys, nor put a random input into an eval graph.
        if !training || p == 0.0 {
            if !(0.0..1.0).contains(&p) {
                return Err(Error::invalid_here(format!(
                    "dropout: p must be in [0, 1), got {p}"
                )));
            }
            return Ok(self.clone());
        }
        self.dropout_with_key(p, training, &crate::trace::random_key())
    }

    /// [`Tensor::dropout`] with an explicit Int64 key (reproducible, traceable).
    #[track_caller]
    pub fn dropout_with_key(&self, p: f64, training: bool, key: &Tensor) -> Result<Tensor> {
        if !(0.0..1.0).contains(&p) {
            return Err(Error::invalid_here(format!(
                "dropout: p must be in [0, 1), got {p}"
            )));
        }
        if !training || p == 0.0 {
            return Ok(self.clone());
        }
        let u = Tensor::uniform_from_key(key, self.shape())?;
        let keep = u.greater_equal(&Tensor::scalar(p as f32))?;
        let scaled = self.mul_scalar(1.0 / (1.0 - p))?;
        Tensor::select(&keep, &scaled, &Tensor::scalar_of(0.0, self.dtype()))
    }
}
