//! The layers (MindSpore's `mindspore.nn` cells): dense and convolution, pooling,
//! normalisation, activations, dropout, embedding and containers.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_nn::prelude::*;
//! let net = SequentialCell::new(vec![
//!     Flatten::new() as std::sync::Arc<dyn Cell>,
//!     Dense::new(12, 4).unwrap(),
//!     ReLU::new(),
//! ]);
//! let y = net.call1(&Tensor::ones(&[2, 3, 2, 2], DType::F32)).unwrap();
//! assert_eq!(y.shape(), &[2, 4]);
//! ```

pub mod activation;
pub mod container;
pub mod conv;
pub mod dense;
pub mod dropout;
pub mod embedding;
pub mod flatten;
pub mod norm;
pub mod pool;

pub use activation::{GELU, ReLU, Sigmoid, Softmax, Tanh};
pub use container::{CellList, SequentialCell};
pub use conv::{Conv2d, Conv2dConfig};
pub use dense::{Dense, DenseConfig};
pub use dropout::Dropout;
pub use embedding::{Embedding, EmbeddingConfig};
pub use flatten::Flatten;
pub use norm::{BatchNorm1d, BatchNorm2d, BatchNormConfig, LayerNorm};
pub use pool::{AvgPool2d, MaxPool2d};

use spore_core::{Error, Result, Tensor};

use crate::cell::CellBase;

/// `Conv2d 'conv1'`: the class and, once registered, the attribute name, for errors.
pub(crate) fn label(base: &CellBase, class: &str) -> String {
    match base.scope_name() {
        Some(s) => format!("{class} '{s}'"),
        None => class.to_string(),
    }
}

/// The single input of a one-input layer.
pub(crate) fn single<'a>(base: &CellBase, class: &str, inputs: &'a [Tensor]) -> Result<&'a Tensor> {
    match inputs {
        [x] => Ok(x),
        _ => Err(Error::invalid(format!(
            "{}: expected 1 input, got {}",
            label(base, class),
            inputs.len()
        ))),
    }
}

/// Checks that a layer's size arguments are positive.
pub(crate) fn positive(class: &str, what: &[(&str, usize)]) -> Result<()> {
    for (name, v) in what {
        if *v == 0 {
            return Err(Error::invalid(format!(
                "{class}: {name} must be at least 1, got 0"
            )));
        }
    }
    Ok(())
}
