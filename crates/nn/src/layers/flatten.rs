//! `Flatten`: collapses axes `start_dim..=end_dim` into one (MindSpore 2.x defaults:
//! `start_dim=1`, `end_dim=-1`, so NCHW becomes N x CHW).
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! let y = Flatten::new().call1(&Tensor::ones(&[2, 3, 4, 5], DType::F32).unwrap()).unwrap();
//! assert_eq!(y.shape(), &[2, 60]);
//! let z = Flatten::with_dims(1, 2).call1(&Tensor::ones(&[2, 3, 4, 5], DType::F32).unwrap()).unwrap();
//! assert_eq!(z.shape(), &[2, 12, 5]);
//! ```

use std::sync::Arc;

use spore_core::{Error, Result, Tensor};

use super::{label, single};
use crate::cell::{Cell, CellBase};

/// Flattens a range of axes.
pub struct Flatten {
    base: CellBase,
    pub start_dim: isize,
    pub end_dim: isize,
}

impl Flatten {
    pub fn new() -> Arc<Flatten> {
        Flatten::with_dims(1, -1)
    }
    pub fn with_dims(start_dim: isize, end_dim: isize) -> Arc<Flatten> {
        Arc::new(Flatten {
            base: CellBase::new(),
            start_dim,
            end_dim,
        })
    }
}

impl Cell for Flatten {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let x = single(&self.base, "Flatten", inputs)?;
        let rank = x.rank() as isize;
        let norm = |d: isize| if d < 0 { d + rank } else { d };
        let (s, e) = (norm(self.start_dim), norm(self.end_dim));
        if rank == 0 {
            return Ok(vec![x.reshape(&[1])?]);
        }
        if s < 0 || e >= rank || s > e {
            return Err(Error::invalid(format!(
                "{}: start_dim={} and end_dim={} do not select a range of axes of a rank-{rank} input (shape {:?})",
                label(&self.base, "Flatten"),
                self.start_dim,
                self.end_dim,
                x.shape()
            )));
        }
        let (s, e) = (s as usize, e as usize);
        let shape = x.shape();
        let mut out = shape[..s].to_vec();
        out.push(shape[s..=e].iter().product());
        out.extend_from_slice(&shape[e + 1..]);
        Ok(vec![x.reshape(&out)?])
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "Flatten"
    }
}
