//! Explainable AI, MindInsight's explanation features: saliency maps for any
//! classification [`Cell`](spore_nn::cell::Cell) that returns class scores. Gradient,
//! Deconvolution and GuidedBackprop ([`Backprop`]), [`GradCam`], [`IntegratedGradients`]
//! and [`SmoothGrad`] go through Spore's autodiff (op by op: the modified ReLU rules and
//! the layer hooks they use apply there); [`Occlusion`] and [`Rise`] score batches of
//! perturbed inputs with the network as it runs (compiled in Graph mode). Every explainer
//! maps `[N, C, H, W]` inputs and one target class each to `[N, 1, H, W]` saliency.
//!
//! ```
//! use std::sync::Arc;
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! use spore_xai::{Explainer, GradCam, Gradient};
//! let net: Arc<dyn Cell> = LeNet5::new(10).unwrap();
//! let x = Tensor::ones(&[1, 1, 32, 32], DType::F32).unwrap();
//! for e in [Box::new(Gradient::new(net.clone())) as Box<dyn Explainer>, Box::new(GradCam::new(net, "conv2").unwrap())] {
//!     assert_eq!(e.explain(&x, &[7]).unwrap().shape(), &[1, 1, 32, 32]);
//! }
//! ```

#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod common;
pub mod counterfactual;
pub mod gradcam;
pub mod gradient;
pub mod integrated;
pub mod metrics;
pub mod perturbation;
pub mod runner;
pub mod sanity;
pub mod smoothgrad;

pub use common::Explainer;
pub use counterfactual::HierarchicalOcclusion;
pub use gradcam::GradCam;
pub use gradient::{Backprop, Gradient};
pub use integrated::IntegratedGradients;
pub use perturbation::{Activation, Occlusion, Rise};
pub use smoothgrad::SmoothGrad;
