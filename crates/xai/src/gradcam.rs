//! GradCAM (MindSpore XAI's definition): at a named layer with activations `A` (`[N, K,
//! h, w]`), each channel is weighted by the mean of the target score's gradient over its
//! positions, the weighted channels are summed, ReLU keeps the positive evidence, and the
//! map is resized bilinearly to the input.
//!
//! ```
//! use std::sync::Arc;
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! use spore_xai::{Explainer, GradCam};
//! let net: Arc<dyn Cell> = LeNet5::new(10).unwrap();
//! let cam = GradCam::new(net, "conv2").unwrap();
//! let map = cam.explain(&Tensor::ones(&[1, 1, 32, 32], DType::F32).unwrap(), &[0]).unwrap();
//! assert_eq!(map.shape(), &[1, 1, 32, 32]);
//! ```

use std::sync::{Arc, Mutex};

use spore_core::autodiff::gradients;
use spore_core::{Error, Result, Tensor};
use spore_nn::cell::{Cell, CellExt};

use crate::common::{Explainer, check, eagerly, forward, resize_bilinear, target_score};

/// GradCAM on the layer `layer` (a name from `cells_and_names`, like `conv2` or
/// `layer4.1`).
pub struct GradCam {
    net: Arc<dyn Cell>,
    layer_name: String,
    layer: Arc<dyn Cell>,
}

impl GradCam {
    pub fn new(net: Arc<dyn Cell>, layer: &str) -> Result<GradCam> {
        let cells = net.cells_and_names();
        let found = cells
            .iter()
            .find(|(n, _)| n == layer)
            .map(|(_, c)| c.clone());
        let Some(found) = found else {
            let names: Vec<&str> = cells.iter().map(|(n, _)| n.as_str()).collect();
            return Err(Error::invalid(format!(
                "GradCAM: the network has no layer {layer:?}; its layers are {names:?}"
            )));
        };
        Ok(GradCam {
            net,
            layer_name: layer.to_string(),
            layer: found,
        })
    }

    /// The layer's activations and their gradients for `inputs`.
    pub fn activations_and_gradients(
        &self,
        inputs: &Tensor,
        targets: &[usize],
    ) -> Result<(Tensor, Tensor)> {
        let targets = check("GradCAM", inputs, targets)?;
        let seen: Arc<Mutex<Option<Tensor>>> = Arc::new(Mutex::new(None));
        let sink = seen.clone();
        // Only this thread's calls record: another thread running the network meanwhile
        // must not overwrite the activations.
        let thread = std::thread::current().id();
        let id = self
            .layer
            .base()
            .register_forward_hook(Arc::new(move |out: &[Tensor]| {
                if std::thread::current().id() != thread {
                    return;
                }
                if let (Ok(mut s), Some(a)) = (sink.lock(), out.first()) {
                    *s = Some(a.clone());
                }
            }));
        /// Removes the hook however the explanation ends.
        struct Unhook<'a>(&'a Arc<dyn Cell>, u64);
        impl Drop for Unhook<'_> {
            fn drop(&mut self) {
                self.0.base().remove_forward_hook(self.1);
            }
        }
        let _unhook = Unhook(&self.layer, id);
        // The input is watched, so the layer's output is on the tape even when every
        // parameter before it is frozen.
        let x = inputs.detach().with_requires_grad(true);
        eagerly(&self.net, || {
            let score = target_score(&forward(&self.net, &x)?, &targets)?;
            let a = seen.lock().ok().and_then(|mut s| s.take()).ok_or_else(|| {
                Error::invalid(format!(
                    "GradCAM: layer {:?} did not run in the forward pass",
                    self.layer_name
                ))
            })?;
            let g = gradients(
                std::slice::from_ref(&score),
                &[score.ones_like()],
                std::slice::from_ref(&a),
            )?;
            let g = g.into_iter().next().flatten().ok_or_else(|| {
                Error::invalid(format!(
                    "GradCAM: the target score does not depend on layer {:?} (no gradient reaches it)",
                    self.layer_name
                ))
            })?;
            Ok((a, g))
        })
    }
}

impl Explainer for GradCam {
    fn name(&self) -> String {
        "GradCAM".into()
    }

    fn explain(&self, inputs: &Tensor, targets: &[usize]) -> Result<Tensor> {
        let (a, g) = self.activations_and_gradients(inputs, targets)?;
        if a.rank() != 4 {
            return Err(Error::invalid(format!(
                "GradCAM: layer {:?} gives shape {:?}; GradCAM needs [N, K, h, w] activations",
                self.layer_name,
                a.shape()
            )));
        }
        let weights = g.mean(&[2, 3], true)?;
        let cam = a.mul(&weights)?.sum(&[1], true)?.relu()?.detach();
        let s = inputs.shape();
        resize_bilinear(&cam, s[2], s[3])
    }
}
