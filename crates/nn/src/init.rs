//! Weight initializers (MindSpore's `mindspore.common.initializer`), drawing from the
//! global seeded generator (`spore_core::rng::set_seed`) unless a seed is given, so a
//! seed reproduces a network's initial weights.
//!
//! ```
//! use spore_core::{rng, DType};
//! use spore_nn::init::Initializer;
//! rng::set_seed(3);
//! let a = Initializer::he_uniform(5f64.sqrt()).init(&[4, 9], DType::F32).unwrap();
//! rng::set_seed(3);
//! let b = Initializer::he_uniform(5f64.sqrt()).init(&[4, 9], DType::F32).unwrap();
//! assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
//! // HeUniform(sqrt 5) is bounded by 1/sqrt(fan_in) = 1/3.
//! assert!(a.to_vec::<f32>().unwrap().iter().all(|v| v.abs() <= 1.0 / 3.0));
//! ```

use spore_core::{DType, Error, Result, Tensor};

/// Which fan the He initializers scale by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FanMode {
    FanIn,
    FanOut,
}

/// The nonlinearity that follows, which sets the He gain (`calculate_gain`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Nonlinearity {
    Linear,
    Sigmoid,
    Tanh,
    Relu,
    /// Leaky ReLU with the initializer's `negative_slope`.
    LeakyRelu,
}

/// How to fill a new parameter.
#[derive(Clone, Debug)]
pub enum Initializer {
    /// Normal(0, sigma) truncated to two standard deviations.
    TruncatedNormal {
        sigma: f64,
    },
    Normal {
        sigma: f64,
        mean: f64,
    },
    /// Uniform in `[-scale, scale]`.
    Uniform {
        scale: f64,
    },
    /// Uniform in `[-b, b]`, `b = gain * sqrt(3 / fan)`.
    HeUniform {
        negative_slope: f64,
        mode: FanMode,
        nonlinearity: Nonlinearity,
    },
    /// Normal with `std = gain / sqrt(fan)`.
    HeNormal {
        negative_slope: f64,
        mode: FanMode,
        nonlinearity: Nonlinearity,
    },
    /// Uniform in `[-b, b]`, `b = gain * sqrt(6 / (fan_in + fan_out))`.
    XavierUniform {
        gain: f64,
    },
    Zero,
    One,
    Constant(f64),
    /// A given tensor (its shape must match; it is cast to the parameter's dtype).
    Tensor(Tensor),
}

impl Initializer {
    /// MindSpore's `TruncatedNormal(sigma)`.
    pub fn truncated_normal(sigma: f64) -> Self {
        Initializer::TruncatedNormal { sigma }
    }
    /// MindSpore's `Normal(sigma, mean=0)`.
    pub fn normal(sigma: f64) -> Self {
        Initializer::Normal { sigma, mean: 0.0 }
    }
    pub fn uniform(scale: f64) -> Self {
        Initializer::Uniform { scale }
    }
    /// MindSpore's `HeUniform(negative_slope)` (fan_in, leaky_relu).
    pub fn he_uniform(negative_slope: f64) -> Self {
        Initializer::HeUniform {
            negative_slope,
            mode: FanMode::FanIn,
            nonlinearity: Nonlinearity::LeakyRelu,
        }
    }
    /// MindSpore's `HeNormal(negative_slope)` (fan_in, leaky_relu).
    pub fn he_normal(negative_slope: f64) -> Self {
        Initializer::HeNormal {
            negative_slope,
            mode: FanMode::FanIn,
            nonlinearity: Nonlinearity::LeakyRelu,
        }
    }
    pub fn xavier_uniform(gain: f64) -> Self {
        Initializer::XavierUniform { gain }
    }
    pub fn zero() -> Self {
        Initializer::Zero
    }
    pub fn one() -> Self {
        Initializer::One
    }
    pub fn constant(v: f64) -> Self {
        Initializer::Constant(v)
    }

    /// The default weight of `Dense` and `Conv2d` in MindSpore 2.x:
    /// `HeUniform(negative_slope=sqrt(5))`, i.e. uniform in `±1/sqrt(fan_in)`.
    pub fn default_weight() -> Self {
        Initializer::he_uniform(5f64.sqrt())
    }

    /// The default bias of `Dense` and `Conv2d` for a weight of `weight_shape`:
    /// `Uniform(1/sqrt(fan_in))`.
    pub fn default_bias(weight_shape: &[usize]) -> Result<Self> {
        let (fan_in, _) = fans(weight_shape)?;
        Ok(Initializer::uniform(1.0 / (fan_in.max(1) as f64).sqrt()))
    }

    /// A new tensor of `shape` from the global generator.
    pub fn init(&self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        self.init_seeded(shape, dtype, None)
    }

    /// A new tensor of `shape`; `seed: Some(s)` makes it independent of the global state.
    pub fn init_seeded(&self, shape: &[usize], dtype: DType, seed: Option<u64>) -> Result<Tensor> {
        let uniform = |bound: f64| -> Result<Tensor> {
            Tensor::rand(shape, dtype, seed)?
                .mul_scalar(2.0 * bound)?
                .sub_scalar(bound)
        };
        match self {
            Initializer::TruncatedNormal { sigma } => {
                Tensor::truncated_normal(shape, *sigma, dtype, seed)
            }
            Initializer::Normal { sigma, mean } => Tensor::randn(shape, dtype, seed)?
                .mul_scalar(*sigma)?
                .add_scalar(*mean),
            Initializer::Uniform { scale } => uniform(*scale),
            Initializer::HeUniform {
                negative_slope,
                mode,
                nonlinearity,
            } => {
                let std = he_std(shape, *negative_slope, *mode, *nonlinearity)?;
                uniform(3f64.sqrt() * std)
            }
            Initializer::HeNormal {
                negative_slope,
                mode,
                nonlinearity,
            } => {
                let std = he_std(shape, *negative_slope, *mode, *nonlinearity)?;
                Tensor::randn(shape, dtype, seed)?.mul_scalar(std)
            }
            Initializer::XavierUniform { gain } => {
                let (fan_in, fan_out) = fans(shape)?;
                uniform(gain * (6.0 / (fan_in + fan_out).max(1) as f64).sqrt())
            }
            Initializer::Zero => Ok(Tensor::zeros(shape, dtype)?),
            Initializer::One => Ok(Tensor::ones(shape, dtype)?),
            Initializer::Constant(v) => Ok(Tensor::full(shape, *v, dtype)?),
            Initializer::Tensor(t) => {
                if t.shape() != shape {
                    return Err(Error::invalid(format!(
                        "initializer tensor has shape {:?} but the parameter needs {shape:?}",
                        t.shape()
                    )));
                }
                t.detach().cast(dtype)
            }
        }
    }
}

fn gain(nonlinearity: Nonlinearity, negative_slope: f64) -> f64 {
    match nonlinearity {
        Nonlinearity::Linear | Nonlinearity::Sigmoid => 1.0,
        Nonlinearity::Tanh => 5.0 / 3.0,
        Nonlinearity::Relu => 2f64.sqrt(),
        Nonlinearity::LeakyRelu => (2.0 / (1.0 + negative_slope * negative_slope)).sqrt(),
    }
}

fn he_std(shape: &[usize], slope: f64, mode: FanMode, nl: Nonlinearity) -> Result<f64> {
    let (fan_in, fan_out) = fans(shape)?;
    let fan = match mode {
        FanMode::FanIn => fan_in,
        FanMode::FanOut => fan_out,
    };
    Ok(gain(nl, slope) / (fan.max(1) as f64).sqrt())
}

/// `(fan_in, fan_out)` of a weight: `(in, out)` for a `(out, in)` matrix, times the
/// receptive field for convolution kernels `(out, in/groups, kh, kw)`.
pub fn fans(shape: &[usize]) -> Result<(usize, usize)> {
    if shape.len() < 2 {
        return Err(Error::invalid(format!(
            "fan in and fan out need a weight of at least 2 dimensions, got shape {shape:?}"
        )));
    }
    let receptive: usize = shape[2..].iter().product();
    Ok((shape[1] * receptive, shape[0] * receptive))
}
