//! `Dense`: a fully connected layer, `y = x W^T + b` (weight `(out, in)`, MindSpore's
//! layout), with MindSpore 2.x's default initialisation (weight `HeUniform(sqrt 5)`, bias
//! `Uniform(1/sqrt(in))`) and an optional activation cell.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_nn::{init::Initializer, prelude::*};
//! let fc = Dense::config(3, 2).weight_init(Initializer::one()).bias_init(Initializer::zero()).build().unwrap();
//! let y = fc.call1(&Tensor::ones(&[4, 3], DType::F32).unwrap()).unwrap();
//! assert_eq!(y.to_vec::<f32>().unwrap(), vec![3.0; 8]);
//! ```

use std::sync::Arc;

use spore_core::{DType, Error, Parameter, Result, Tensor};

use super::{label, positive, single};
use crate::cell::{Cell, CellBase, CellCall};
use crate::init::Initializer;

/// A fully connected layer.
pub struct Dense {
    base: CellBase,
    pub weight: Parameter,
    pub bias: Option<Parameter>,
    pub in_channels: usize,
    pub out_channels: usize,
    activation: Option<Arc<dyn Cell>>,
}

/// `Dense`'s arguments with MindSpore's defaults.
#[derive(Clone)]
pub struct DenseConfig {
    in_channels: usize,
    out_channels: usize,
    weight_init: Option<Initializer>,
    bias_init: Option<Initializer>,
    has_bias: bool,
    activation: Option<Arc<dyn Cell>>,
    dtype: DType,
}

impl DenseConfig {
    pub fn weight_init(mut self, init: Initializer) -> Self {
        self.weight_init = Some(init);
        self
    }
    pub fn bias_init(mut self, init: Initializer) -> Self {
        self.bias_init = Some(init);
        self
    }
    pub fn has_bias(mut self, on: bool) -> Self {
        self.has_bias = on;
        self
    }
    /// A cell applied to the output (MindSpore's `activation='relu'`), e.g. `ReLU::new()`.
    pub fn activation(mut self, cell: Arc<dyn Cell>) -> Self {
        self.activation = Some(cell);
        self
    }
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }
    pub fn build(self) -> Result<Arc<Dense>> {
        positive(
            "Dense",
            &[
                ("in_channels", self.in_channels),
                ("out_channels", self.out_channels),
            ],
        )?;
        let shape = [self.out_channels, self.in_channels];
        let (weight, bias) = super::weight_and_bias(
            &shape,
            self.out_channels,
            self.weight_init,
            self.bias_init,
            self.has_bias,
            self.dtype,
        )?;
        Ok(Arc::new(Dense {
            base: CellBase::new(),
            weight,
            bias,
            in_channels: self.in_channels,
            out_channels: self.out_channels,
            activation: self.activation,
        }))
    }
}

impl Dense {
    /// `Dense(in_channels, out_channels)` with the default initialisation and a bias.
    pub fn new(in_channels: usize, out_channels: usize) -> Result<Arc<Dense>> {
        Dense::config(in_channels, out_channels).build()
    }

    pub fn config(in_channels: usize, out_channels: usize) -> DenseConfig {
        DenseConfig {
            in_channels,
            out_channels,
            weight_init: None,
            bias_init: None,
            has_bias: true,
            activation: None,
            dtype: DType::F32,
        }
    }
}

impl Cell for Dense {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let x = single(&self.base, "Dense", inputs)?;
        let shape = x.shape().to_vec();
        if shape.len() < 2 || shape[shape.len() - 1] != self.in_channels {
            return Err(Error::invalid(format!(
                "{}: expected an input of rank >= 2 whose last dimension is in_channels={}, got shape {shape:?}",
                label(&self.base, "Dense"),
                self.in_channels
            )));
        }
        // Higher-rank inputs are flattened to a matrix and reshaped back (MindSpore does too).
        let rows = shape[..shape.len() - 1].iter().product();
        let x2 = if shape.len() > 2 {
            x.reshape(&[rows, self.in_channels])?
        } else {
            x.clone()
        };
        let mut y = x2.matmul(&self.weight.value().transpose()?)?;
        if let Some(b) = &self.bias {
            y = y.add(&b.value())?;
        }
        if let Some(act) = &self.activation {
            y = act.call1(&y)?;
        }
        if shape.len() > 2 {
            let mut out = shape[..shape.len() - 1].to_vec();
            out.push(self.out_channels);
            y = y.reshape(&out)?;
        }
        Ok(vec![y])
    }
    fn params(&self) -> Vec<(String, Parameter)> {
        super::weight_and_bias_params(&self.weight, self.bias.as_ref())
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        self.activation
            .iter()
            .map(|a| ("activation".to_string(), a.clone()))
            .collect()
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "Dense"
    }
}
