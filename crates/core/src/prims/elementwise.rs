//! Elementwise primitives: unary math, broadcasting binary arithmetic, comparisons,
//! `select`, `cast`, and the identity/stop-gradient pass-throughs.
//!
//! ```
//! use spore_core::Tensor;
//! let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap();
//! let b = Tensor::from_vec(vec![10.0f32], &[1]).unwrap();
//! assert_eq!(a.add(&b).unwrap().to_vec::<f32>().unwrap(), vec![11.0, 12.0, 13.0]);
//! ```

use crate::relu_rule::ReluBackward;
use std::panic::Location;

use spore_kernels::{BinaryFn, CompareFn, DType, UnaryFn, elementwise as k};

use super::{broadcast_shapes, require_float, require_same_dtype, sum_to_shape};
use crate::apply::apply;
use crate::error::Result;
use crate::op::Op;
use crate::tensor::{Storage, Tensor, TensorType};

pub(crate) fn infer(op: &Op, inputs: &[&TensorType]) -> Result<TensorType, String> {
    match op {
        Op::Identity | Op::StopGradient => Ok(inputs[0].clone()),
        Op::Unary(f) => {
            let x = inputs[0];
            if x.dtype == DType::Bool {
                return Err("input must be numeric, got Bool".into());
            }
            if f.needs_float() {
                require_float(x, "input")?;
            }
            Ok(x.clone())
        }
        Op::Binary(f) => {
            let (a, b) = (inputs[0], inputs[1]);
            require_same_dtype(a, b)?;
            if a.dtype == DType::Bool {
                return Err("inputs must be numeric, got Bool".into());
            }
            if *f == BinaryFn::Pow {
                require_float(a, "input")?;
            }
            Ok(TensorType::new(
                &broadcast_shapes(&a.shape, &b.shape)?,
                a.dtype,
            ))
        }
        Op::Compare(_) => {
            require_same_dtype(inputs[0], inputs[1])?;
            let shape = broadcast_shapes(&inputs[0].shape, &inputs[1].shape)?;
            Ok(TensorType::new(&shape, DType::Bool))
        }
        Op::Select => {
            let (c, a, b) = (inputs[0], inputs[1], inputs[2]);
            if c.dtype != DType::Bool {
                return Err(format!("condition must be Bool, got {}", c.dtype));
            }
            require_same_dtype(a, b)?;
            let shape = broadcast_shapes(&broadcast_shapes(&c.shape, &a.shape)?, &b.shape)?;
            Ok(TensorType::new(&shape, a.dtype))
        }
        Op::Cast(d) => Ok(TensorType::new(&inputs[0].shape, *d)),
        _ => Err(format!("{} is not elementwise", op.name())),
    }
}

pub(crate) fn eval(op: &Op, inputs: &[&Tensor], out: &TensorType) -> Result<Storage, String> {
    let s = |i: usize| inputs[i].buf();
    let bl = |i: usize| s(i).layout.broadcast_to(&out.shape);
    let buffer = match op {
        Op::Identity | Op::StopGradient => return Ok(s(0).clone()),
        Op::Unary(f) => k::unary(*f, &s(0).buffer, &s(0).layout)?,
        Op::Binary(f) => k::binary(*f, &s(0).buffer, &bl(0), &s(1).buffer, &bl(1), &out.shape)?,
        Op::Compare(f) => k::compare(*f, &s(0).buffer, &bl(0), &s(1).buffer, &bl(1), &out.shape)?,
        Op::Select => k::select(
            &s(0).buffer,
            &bl(0),
            &s(1).buffer,
            &bl(1),
            &s(2).buffer,
            &bl(2),
            &out.shape,
        )?,
        Op::Cast(d) => {
            if inputs[0].dtype() == *d {
                return Ok(s(0).clone());
            }
            k::cast(&s(0).buffer, &s(0).layout, *d)
        }
        _ => return Err(format!("{} is not elementwise", op.name())),
    };
    Ok(Storage::contiguous(buffer, &out.shape))
}

pub(crate) fn vjp(
    op: &Op,
    inputs: &[Tensor],
    out: &Tensor,
    g: &Tensor,
) -> Result<Vec<Option<Tensor>>> {
    let x = &inputs[0];
    Ok(match op {
        Op::Identity => vec![Some(g.clone())],
        Op::StopGradient | Op::Compare(_) => vec![None; inputs.len()],
        Op::Unary(f) => {
            let dx = match f {
                UnaryFn::Neg => g.neg()?,
                UnaryFn::Exp => g.mul(out)?,
                UnaryFn::Log => g.div(x)?,
                UnaryFn::Log1p => g.div(&x.add_scalar(1.0)?)?,
                UnaryFn::Sqrt => g.mul(&out.reciprocal()?)?.mul_scalar(0.5)?,
                // d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 out^3
                UnaryFn::Rsqrt => g.mul(&out.mul(out)?.mul(out)?)?.mul_scalar(-0.5)?,
                UnaryFn::Abs => g.mul(&x.sign()?)?,
                UnaryFn::Sign => g.zeros_like(),
                UnaryFn::Tanh => g.mul(&out.mul(out)?.neg()?.add_scalar(1.0)?)?,
                UnaryFn::Sigmoid => g.mul(&out.mul(&out.neg()?.add_scalar(1.0)?)?)?,
                UnaryFn::Relu => {
                    // From the output (out > 0 exactly where x > 0), as PyTorch does: the
                    // backward pass then keeps no reference to x, so a compiled graph can
                    // fuse the op producing x (BatchNorm's affine, a residual add) with
                    // this ReLU into one pass, and x never reaches memory.
                    let zero = Tensor::scalar_of(0.0, out.dtype());
                    match crate::relu_rule::relu_backward() {
                        // One pass in a backward pass not recorded (PyNative's).
                        ReluBackward::Standard
                            if !crate::is_grad_enabled() && crate::eager::applies(&[out, g]) =>
                        {
                            crate::eager::relu_grad(g, out)?
                        }
                        ReluBackward::Standard => Tensor::select(&out.greater(&zero)?, g, &zero)?,
                        ReluBackward::Deconvolution => g.relu()?,
                        ReluBackward::Guided => {
                            Tensor::select(&out.greater(&zero)?, &g.relu()?, &zero)?
                        }
                    }
                }
                UnaryFn::Sin => g.mul(&x.cos()?)?,
                UnaryFn::Cos => g.mul(&x.sin()?)?.neg()?,
                // d/dx erf(x) = 2/sqrt(pi) exp(-x^2)
                UnaryFn::Erf => g
                    .mul(&x.mul(x)?.neg()?.exp()?)?
                    .mul_scalar(std::f64::consts::FRAC_2_SQRT_PI)?,
            };
            vec![Some(dx)]
        }
        Op::Binary(f) => {
            let (a, b) = (&inputs[0], &inputs[1]);
            // Only inputs that take part in differentiation get a gradient computed.
            let (na, nb) = (a.requires_grad(), b.requires_grad());
            let (ga, gb) = match f {
                BinaryFn::Add => (na.then(|| g.clone()), nb.then(|| g.clone())),
                BinaryFn::Sub => (na.then(|| g.clone()), when(nb, || g.neg())?),
                BinaryFn::Mul => (when(na, || g.mul(b))?, when(nb, || g.mul(a))?),
                BinaryFn::Div => (
                    when(na, || g.div(b))?,
                    when(nb, || g.mul(out)?.div(b)?.neg())?,
                ),
                BinaryFn::Pow => {
                    // d/da = b a^(b-1); d/db = out ln(a), taken as 0 where a <= 0.
                    let ga = when(na, || g.mul(&b.mul(&a.pow(&b.add_scalar(-1.0)?)?)?))?;
                    let gb = when(nb, || {
                        let zero = Tensor::scalar_of(0.0, a.dtype());
                        let positive = a.greater(&zero)?;
                        let safe_a =
                            Tensor::select(&positive, a, &Tensor::scalar_of(1.0, a.dtype()))?;
                        Tensor::select(&positive, &g.mul(out)?.mul(&safe_a.log()?)?, &zero)
                    })?;
                    (ga, gb)
                }
                BinaryFn::Maximum | BinaryFn::Minimum => {
                    // The winner takes the gradient; ties split it 0.5 / 0.5 (MindSpore).
                    let wins = if *f == BinaryFn::Maximum {
                        a.greater(b)?
                    } else {
                        a.less(b)?
                    };
                    let ties = a.equal(b)?;
                    let wa = wins
                        .cast(a.dtype())?
                        .add(&ties.cast(a.dtype())?.mul_scalar(0.5)?)?;
                    let ga = g.mul(&wa)?;
                    (na.then(|| ga.clone()), when(nb, || g.sub(&ga))?)
                }
            };
            vec![
                ga.map(|t| sum_to_shape(&t, a.shape())).transpose()?,
                gb.map(|t| sum_to_shape(&t, b.shape())).transpose()?,
            ]
        }
        Op::Select => {
            let zero = Tensor::scalar_of(0.0, g.dtype());
            let (c, a, b) = (&inputs[0], &inputs[1], &inputs[2]);
            let ga = when(a.requires_grad(), || {
                sum_to_shape(&Tensor::select(c, g, &zero)?, a.shape())
            })?;
            let gb = when(b.requires_grad(), || {
                sum_to_shape(&Tensor::select(c, &zero, g)?, b.shape())
            })?;
            vec![None, ga, gb]
        }
        Op::Cast(_) => {
            if x.dtype().is_float() && g.dtype().is_float() {
                vec![Some(g.cast(x.dtype())?)]
            } else {
                vec![None]
            }
        }
        _ => vec![None; inputs.len()],
    })
}

/// `Some(f())` when `need`, else `None` (a gradient nobody will use is not computed).
pub(crate) fn when(need: bool, f: impl FnOnce() -> Result<Tensor>) -> Result<Option<Tensor>> {
    if need { f().map(Some) } else { Ok(None) }
}

macro_rules! unary_methods {
    ($($(#[$doc:meta])* $name:ident => $f:ident),* $(,)?) => {
        impl Tensor {
            $(
                $(#[$doc])*
                #[track_caller]
                pub fn $name(&self) -> Result<Tensor> {
                    apply(Op::Unary(UnaryFn::$f), &[self], Location::caller())
                }
            )*
        }
    };
}
unary_methods! {
    /// `-x`
    neg => Neg,
    /// `e^x`
    exp => Exp,
    /// Natural logarithm.
    log => Log,
    /// `ln(1 + x)`, accurate where `x` is near 0.
    log1p => Log1p,
    sqrt => Sqrt,
    /// `1 / sqrt(x)`
    rsqrt => Rsqrt,
    abs => Abs,
    /// -1, 0 or 1.
    sign => Sign,
    tanh => Tanh,
    /// `1 / (1 + e^-x)`
    sigmoid => Sigmoid,
    /// `max(x, 0)`
    relu => Relu,
    sin => Sin,
    cos => Cos,
    /// The Gauss error function.
    erf => Erf,
}

macro_rules! binary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:expr),* $(,)?) => {
        impl Tensor {
            $(
                $(#[$doc])*
                #[track_caller]
                pub fn $name(&self, other: &Tensor) -> Result<Tensor> {
                    apply($op, &[self, other], Location::caller())
                }
            )*
        }
    };
}
binary_methods! {
    /// Broadcasting `self + other` (same dtype).
    add => Op::Binary(BinaryFn::Add),
    sub => Op::Binary(BinaryFn::Sub),
    mul => Op::Binary(BinaryFn::Mul),
    div => Op::Binary(BinaryFn::Div),
    /// `self ^ other` (floats).
    pow => Op::Binary(BinaryFn::Pow),
    maximum => Op::Binary(BinaryFn::Maximum),
    minimum => Op::Binary(BinaryFn::Minimum),
    /// Elementwise `==`, giving Bool.
    equal => Op::Compare(CompareFn::Equal),
    not_equal => Op::Compare(CompareFn::NotEqual),
    less => Op::Compare(CompareFn::Less),
    less_equal => Op::Compare(CompareFn::LessEqual),
    greater => Op::Compare(CompareFn::Greater),
    greater_equal => Op::Compare(CompareFn::GreaterEqual),
}

impl Tensor {
    /// `a` where `cond` is true, else `b` (all three broadcast together).
    #[track_caller]
    pub fn select(cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        apply(Op::Select, &[cond, a, b], Location::caller())
    }

    /// `self` where `cond` is true, else `other` (method form of [`Tensor::select`]).
    #[track_caller]
    pub fn where_(&self, cond: &Tensor, other: &Tensor) -> Result<Tensor> {
        apply(Op::Select, &[cond, self, other], Location::caller())
    }

    /// Converts to `dtype` (a no-op view when it already has it).
    #[track_caller]
    pub fn cast(&self, dtype: DType) -> Result<Tensor> {
        apply(Op::Cast(dtype), &[self], Location::caller())
    }

    /// The same values, with gradients blocked.
    #[track_caller]
    pub fn stop_gradient(&self) -> Result<Tensor> {
        apply(Op::StopGradient, &[self], Location::caller())
    }

    /// The same values through an `Identity` node (a new autodiff handle).
    #[track_caller]
    pub fn identity(&self) -> Result<Tensor> {
        apply(Op::Identity, &[self], Location::caller())
    }

    /// `1 / x`
    #[track_caller]
    pub fn reciprocal(&self) -> Result<Tensor> {
        Tensor::scalar_of(1.0, self.dtype()).div(self)
    }

    /// `x * x`
    #[track_caller]
    pub fn square(&self) -> Result<Tensor> {
        self.mul(self)
    }

    #[track_caller]
    pub fn add_scalar(&self, v: f64) -> Result<Tensor> {
        self.add(&Tensor::scalar_of(v, self.dtype()))
    }

    #[track_caller]
    pub fn sub_scalar(&self, v: f64) -> Result<Tensor> {
        self.sub(&Tensor::scalar_of(v, self.dtype()))
    }

    #[track_caller]
    pub fn mul_scalar(&self, v: f64) -> Result<Tensor> {
        self.mul(&Tensor::scalar_of(v, self.dtype()))
    }

    #[track_caller]
    pub fn div_scalar(&self, v: f64) -> Result<Tensor> {
        self.div(&Tensor::scalar_of(v, self.dtype()))
    }

    #[track_caller]
    pub fn pow_scalar(&self, v: f64) -> Result<Tensor> {
        self.pow(&Tensor::scalar_of(v, self.dtype()))
    }

    /// GELU; `approximate` selects the tanh form (MindSpore's default) over the erf form.
    #[track_caller]
    pub fn gelu(&self, approximate: bool) -> Result<Tensor> {
        if approximate {
            // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            let inner = self
                .add(&self.mul(self)?.mul(self)?.mul_scalar(0.044715)?)?
                .mul_scalar((2.0 / std::f64::consts::PI).sqrt())?;
            self.mul(&inner.tanh()?.add_scalar(1.0)?)?.mul_scalar(0.5)
        } else if self.numel() > 0 && crate::eager::applies_traced(&[self]) {
            crate::eager::gelu_erf(self)
        } else {
            let cdf = self
                .mul_scalar(std::f64::consts::FRAC_1_SQRT_2)?
                .erf()?
                .add_scalar(1.0)?;
            self.mul(&cdf)?.mul_scalar(0.5)
        }
    }
}
