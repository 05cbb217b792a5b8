//! SmoothGrad (Smilkov et al., 2017; Captum's `NoiseTunnel`): the mean of an explainer's
//! maps over copies of the input with Gaussian noise added, of standard deviation
//! `noise_level · (max - min)` of each input (0.15 by default, the paper's choice).
//!
//! ```
//! use std::sync::Arc;
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! use spore_xai::{Explainer, Gradient, SmoothGrad};
//! let net: Arc<dyn Cell> = LeNet5::new(10).unwrap();
//! let sg = SmoothGrad::new(Box::new(Gradient::new(net))).samples(4);
//! assert_eq!(sg.name(), "SmoothGrad(Gradient)");
//! ```

use spore_core::{DType, Result, Tensor};

use crate::common::{Explainer, check};

pub struct SmoothGrad {
    inner: Box<dyn Explainer>,
    samples: usize,
    noise_level: f64,
    seed: u64,
}

impl SmoothGrad {
    /// 10 noisy copies at noise level 0.15.
    pub fn new(inner: Box<dyn Explainer>) -> SmoothGrad {
        SmoothGrad {
            inner,
            samples: 10,
            noise_level: 0.15,
            seed: 0,
        }
    }

    pub fn samples(mut self, n: usize) -> SmoothGrad {
        self.samples = n.max(1);
        self
    }

    pub fn noise_level(mut self, level: f64) -> SmoothGrad {
        self.noise_level = level;
        self
    }

    /// The noise's seed (the same seed gives the same maps).
    pub fn seed(mut self, seed: u64) -> SmoothGrad {
        self.seed = seed;
        self
    }
}

impl Explainer for SmoothGrad {
    fn name(&self) -> String {
        format!("SmoothGrad({})", self.inner.name())
    }

    fn explain(&self, inputs: &Tensor, targets: &[usize]) -> Result<Tensor> {
        check("SmoothGrad", inputs, targets)?;
        let s = inputs.shape().to_vec();
        let per: usize = s[1..].iter().product();
        let x = inputs.to_vec::<f32>()?;
        let sigma: Vec<f32> = x
            .chunks(per.max(1))
            .map(|c| {
                let (lo, hi) = c
                    .iter()
                    .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
                (self.noise_level * (hi - lo).max(0.0) as f64) as f32
            })
            .collect();
        let mut total: Option<Tensor> = None;
        for k in 0..self.samples {
            let noise = Tensor::randn(&s, DType::F32, Some(self.seed.wrapping_add(k as u64)))?
                .to_vec::<f32>()?;
            let noisy: Vec<f32> = x
                .iter()
                .zip(&noise)
                .enumerate()
                .map(|(i, (v, e))| v + sigma[i / per.max(1)] * e)
                .collect();
            let map = self.inner.explain(&Tensor::from_vec(noisy, &s)?, targets)?;
            total = Some(match total {
                Some(t) => t.add(&map)?,
                None => map,
            });
        }
        match total {
            Some(t) => t.div_scalar(self.samples as f64),
            None => Err(spore_core::Error::invalid("SmoothGrad: no samples")),
        }
    }
}
