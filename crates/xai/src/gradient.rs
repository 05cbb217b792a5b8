//! Gradient, Deconvolution and GuidedBackprop (MindSpore XAI's definitions): the
//! gradient of the target's score with respect to the input, aggregated over channels by
//! the largest absolute value. Deconvolution passes only positive gradients back through
//! ReLU; GuidedBackprop also keeps ReLU's forward mask.
//!
//! ```
//! use std::sync::Arc;
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! use spore_xai::{Explainer, Gradient};
//! let net: Arc<dyn Cell> = LeNet5::new(10).unwrap();
//! let map = Gradient::new(net).explain(&Tensor::ones(&[2, 1, 32, 32], DType::F32).unwrap(), &[3]).unwrap();
//! assert_eq!(map.shape(), &[2, 1, 32, 32]);
//! ```

use std::sync::Arc;

use spore_core::autodiff::grad;
use spore_core::relu_rule::{ReluBackward, with_relu_backward};
use spore_core::{Result, Tensor};
use spore_nn::cell::Cell;

use crate::common::{Explainer, abs_max_over_channels, check, eagerly, forward, target_score};

/// The input gradient of the target's score, under a ReLU backward rule.
pub struct Backprop {
    net: Arc<dyn Cell>,
    rule: ReluBackward,
}

/// `∂ score / ∂ input`.
pub type Gradient = Backprop;

impl Backprop {
    /// Gradient.
    pub fn new(net: Arc<dyn Cell>) -> Backprop {
        Backprop {
            net,
            rule: ReluBackward::Standard,
        }
    }

    /// Deconvolution: ReLU passes back `max(g, 0)`.
    pub fn deconvolution(net: Arc<dyn Cell>) -> Backprop {
        Backprop {
            net,
            rule: ReluBackward::Deconvolution,
        }
    }

    /// GuidedBackprop: ReLU passes back `max(g, 0)` where its input was positive.
    pub fn guided(net: Arc<dyn Cell>) -> Backprop {
        Backprop {
            net,
            rule: ReluBackward::Guided,
        }
    }

    /// The raw input gradient `[N, C, H, W]` (before aggregation).
    pub fn input_gradient(&self, inputs: &Tensor, targets: &[usize]) -> Result<Tensor> {
        let targets = check(&self.name(), inputs, targets)?;
        let net = self.net.clone();
        eagerly(&self.net, || {
            with_relu_backward(self.rule, || {
                let f = |x: &[Tensor]| target_score(&forward(&net, &x[0])?, &targets);
                let g = grad(f, &[0])(std::slice::from_ref(inputs))?;
                g.into_iter()
                    .next()
                    .ok_or_else(|| spore_core::Error::invalid("explainer: no input gradient"))
            })
        })
    }
}

impl Explainer for Backprop {
    fn name(&self) -> String {
        match self.rule {
            ReluBackward::Standard => "Gradient",
            ReluBackward::Deconvolution => "Deconvolution",
            ReluBackward::Guided => "GuidedBackprop",
        }
        .into()
    }

    fn explain(&self, inputs: &Tensor, targets: &[usize]) -> Result<Tensor> {
        abs_max_over_channels(&self.input_gradient(inputs, targets)?)
    }
}
