//! `Dropout` (MindSpore 2.x's `p`, the probability of zeroing): active only in training
//! mode (`set_train(true)`); the identity in evaluation. Masks come from the global seeded
//! generator, and inside a compiled graph from fresh keys fed at every run.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! let drop = Dropout::new(0.5).unwrap();
//! let x = Tensor::ones(&[1000], DType::F32).unwrap();
//! assert_eq!(drop.call1(&x).unwrap().to_vec::<f32>().unwrap(), vec![1.0; 1000]); // eval
//! drop.set_train(true);
//! let y = drop.call1(&x).unwrap().to_vec::<f32>().unwrap();
//! let kept = y.iter().filter(|&&v| v == 2.0).count();
//! assert!(kept > 400 && kept < 600 && y.iter().all(|&v| v == 0.0 || v == 2.0));
//! ```

use std::sync::Arc;

use spore_core::{Error, Result, Tensor};

use super::single;
use crate::cell::{Cell, CellBase};

/// Randomly zeroes elements with probability `p` and scales the rest by `1 / (1 - p)`.
pub struct Dropout {
    base: CellBase,
    pub p: f64,
}

impl Dropout {
    /// `p` in `[0, 1)`; MindSpore's default is 0.5.
    pub fn new(p: f64) -> Result<Arc<Dropout>> {
        if !(0.0..1.0).contains(&p) {
            return Err(Error::invalid(format!(
                "Dropout: p (the drop probability) must be in [0, 1), got {p}"
            )));
        }
        Ok(Arc::new(Dropout {
            base: CellBase::new(),
            p,
        }))
    }
}

impl Cell for Dropout {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let x = single(&self.base, "Dropout", inputs)?;
        // Only draw a random key when dropping: `Tensor::dropout` draws one even in
        // evaluation, which would shift the seeded sequence and make eval graphs impure.
        if !self.base.training() || self.p == 0.0 {
            return Ok(vec![x.clone()]);
        }
        Ok(vec![x.dropout(self.p, true)?])
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "Dropout"
    }
}
