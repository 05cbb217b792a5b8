//! Loss cells (`construct(logits, labels) -> [loss]`): `SoftmaxCrossEntropyWithLogits`
//! (MindSpore's, sparse or one-hot labels), `CrossEntropyLoss` and `NLLLoss` (class
//! weights, `ignore_index`, label smoothing, PyTorch's normalisation), `MSELoss`, `L1Loss`
//! and `BCEWithLogitsLoss` (stable log-sigmoid, `weight`, `pos_weight`).
//!
//! ```
//! use spore_core::Tensor;
//! use spore_nn::prelude::*;
//! let logits = Tensor::from_vec(vec![0.0f32, 0.0, 0.0, 0.0], &[2, 2]).unwrap();
//! let labels = Tensor::from_vec(vec![0i32, 1], &[2]).unwrap();
//! let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
//! let l = loss.call(&[logits, labels]).unwrap()[0].item().unwrap();
//! assert!((l - 2f64.ln()).abs() < 1e-6);
//! ```

use std::sync::Arc;

use spore_core::{DType, Error, Result, Tensor};

use crate::cell::{Cell, CellBase};

/// How per-element losses are combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    None,
    Mean,
    Sum,
}

impl Reduction {
    /// `"none"`, `"mean"` or `"sum"`.
    pub fn parse(s: &str) -> Result<Reduction> {
        match s {
            "none" => Ok(Reduction::None),
            "mean" => Ok(Reduction::Mean),
            "sum" => Ok(Reduction::Sum),
            _ => Err(Error::invalid(format!(
                "reduction must be one of none, mean, sum; got {s:?}"
            ))),
        }
    }
    fn apply(self, loss: Tensor) -> Result<Tensor> {
        match self {
            Reduction::None => Ok(loss),
            Reduction::Mean => loss.mean(&[], false),
            Reduction::Sum => loss.sum(&[], false),
        }
    }
}

fn two<'a>(who: &str, inputs: &'a [Tensor]) -> Result<(&'a Tensor, &'a Tensor)> {
    match inputs {
        [a, b] => Ok((a, b)),
        _ => Err(Error::invalid(format!(
            "{who}: expected 2 inputs (logits, labels), got {}",
            inputs.len()
        ))),
    }
}

fn float_logits(who: &str, logits: &Tensor) -> Result<usize> {
    if logits.rank() != 2 || !logits.dtype().is_float() {
        return Err(Error::invalid(format!(
            "{who}: expected float logits of shape (N, C), got {} {:?}",
            logits.dtype(),
            logits.shape()
        )));
    }
    Ok(logits.shape()[1])
}

/// Integer class labels of shape `(N,)` for `(N, C)` logits.
fn check_sparse(who: &str, logits: &Tensor, labels: &Tensor) -> Result<()> {
    if !matches!(labels.dtype(), DType::I32 | DType::I64) || labels.shape() != [logits.shape()[0]] {
        return Err(Error::invalid(format!(
            "{who}: expected Int32/Int64 class labels of shape [{}] for logits {:?}, got {} {:?}",
            logits.shape()[0],
            logits.shape(),
            labels.dtype(),
            labels.shape()
        )));
    }
    Ok(())
}

macro_rules! loss_cell_boilerplate {
    ($class:literal) => {
        fn base(&self) -> &CellBase {
            &self.base
        }
        fn class_name(&self) -> &'static str {
            $class
        }
    };
}

/// MindSpore's `SoftmaxCrossEntropyWithLogits(sparse, reduction)`: `-sum(y * log_softmax(x))`
/// per sample; `sparse` takes integer labels. MindSpore's defaults are `sparse=false`,
/// `reduction="none"`.
pub struct SoftmaxCrossEntropyWithLogits {
    base: CellBase,
    pub sparse: bool,
    pub reduction: Reduction,
}

impl SoftmaxCrossEntropyWithLogits {
    pub fn new(sparse: bool, reduction: Reduction) -> Arc<Self> {
        Arc::new(SoftmaxCrossEntropyWithLogits {
            base: CellBase::new(),
            sparse,
            reduction,
        })
    }
}

impl Cell for SoftmaxCrossEntropyWithLogits {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let who = "SoftmaxCrossEntropyWithLogits";
        let (logits, labels) = two(who, inputs)?;
        let c = float_logits(who, logits)?;
        let target = if self.sparse {
            check_sparse(who, logits, labels)?;
            labels.one_hot(c, logits.dtype())?
        } else {
            if labels.shape() != logits.shape() || labels.dtype() != logits.dtype() {
                return Err(Error::invalid(format!(
                    "{who}: with sparse=false the labels must match the logits ({} {:?}), got {} {:?}",
                    logits.dtype(),
                    logits.shape(),
                    labels.dtype(),
                    labels.shape()
                )));
            }
            labels.clone()
        };
        let per_sample = logits
            .log_softmax(-1)?
            .mul(&target)?
            .sum(&[-1], false)?
            .neg()?;
        Ok(vec![self.reduction.apply(per_sample)?])
    }
    loss_cell_boilerplate!("SoftmaxCrossEntropyWithLogits");
}

/// Class weights, ignore_index and normalisation shared by `NLLLoss` and
/// `CrossEntropyLoss` for integer targets: returns (per-sample loss, per-sample weight
/// `w[y]` with ignored samples zeroed, the validity mask).
fn nll_parts(
    logp: &Tensor,
    labels: &Tensor,
    weight: Option<&Tensor>,
    ignore_index: i64,
) -> Result<(Tensor, Tensor, Tensor)> {
    let c = logp.shape()[1];
    let dt = logp.dtype();
    let ignore = Tensor::scalar_of(ignore_index as f64, labels.dtype());
    let valid = labels.not_equal(&ignore)?.cast(dt)?;
    let oh = labels.one_hot(c, dt)?;
    let w_target = match weight {
        Some(w) => oh.mul(w)?.sum(&[-1], false)?,
        None => oh.sum(&[-1], false)?,
    }
    .mul(&valid)?;
    let per = logp.mul(&oh)?.sum(&[-1], false)?.neg()?.mul(&w_target)?;
    Ok((per, w_target, valid))
}

fn check_weight(who: &str, weight: &Option<Tensor>, c: usize, dt: DType) -> Result<()> {
    if let Some(w) = weight
        && (w.shape() != [c] || w.dtype() != dt)
    {
        return Err(Error::invalid(format!(
            "{who}: weight must be {dt} of shape [{c}] (one per class), got {} {:?}",
            w.dtype(),
            w.shape()
        )));
    }
    Ok(())
}

/// Negative log-likelihood of log-probabilities `(N, C)` and class labels `(N,)`; `mean`
/// divides by the summed weights of the non-ignored samples (PyTorch's rule).
pub struct NLLLoss {
    base: CellBase,
    pub weight: Option<Tensor>,
    pub ignore_index: i64,
    pub reduction: Reduction,
}

impl NLLLoss {
    pub fn new(reduction: Reduction) -> Arc<Self> {
        NLLLoss::with_options(None, -100, reduction)
    }
    pub fn with_options(
        weight: Option<Tensor>,
        ignore_index: i64,
        reduction: Reduction,
    ) -> Arc<Self> {
        Arc::new(NLLLoss {
            base: CellBase::new(),
            weight,
            ignore_index,
            reduction,
        })
    }
}

impl Cell for NLLLoss {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let who = "NLLLoss";
        let (logp, labels) = two(who, inputs)?;
        let c = float_logits(who, logp)?;
        check_sparse(who, logp, labels)?;
        check_weight(who, &self.weight, c, logp.dtype())?;
        let (per, w, _) = nll_parts(logp, labels, self.weight.as_ref(), self.ignore_index)?;
        let out = match self.reduction {
            Reduction::Mean => per.sum(&[], false)?.div(&w.sum(&[], false)?)?,
            r => r.apply(per)?,
        };
        Ok(vec![out])
    }
    loss_cell_boilerplate!("NLLLoss");
}

/// `CrossEntropyLoss(weight, ignore_index=-100, reduction="mean", label_smoothing=0)`:
/// log-softmax then NLL for integer labels `(N,)`, or `-sum(w * p * log_softmax)` for
/// class probabilities `(N, C)`.
pub struct CrossEntropyLoss {
    base: CellBase,
    pub weight: Option<Tensor>,
    pub ignore_index: i64,
    pub reduction: Reduction,
    pub label_smoothing: f64,
}

impl CrossEntropyLoss {
    pub fn new() -> Arc<Self> {
        Arc::new(CrossEntropyLoss {
            base: CellBase::new(),
            weight: None,
            ignore_index: -100,
            reduction: Reduction::Mean,
            label_smoothing: 0.0,
        })
    }
    pub fn with_options(
        weight: Option<Tensor>,
        ignore_index: i64,
        reduction: Reduction,
        label_smoothing: f64,
    ) -> Result<Arc<Self>> {
        if !(0.0..=1.0).contains(&label_smoothing) {
            return Err(Error::invalid(format!(
                "CrossEntropyLoss: label_smoothing must be in [0, 1], got {label_smoothing}"
            )));
        }
        Ok(Arc::new(CrossEntropyLoss {
            base: CellBase::new(),
            weight,
            ignore_index,
            reduction,
            label_smoothing,
        }))
    }
}

impl Cell for CrossEntropyLoss {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let who = "CrossEntropyLoss";
        let (logits, labels) = two(who, inputs)?;
        let c = float_logits(who, logits)?;
        check_weight(who, &self.weight, c, logits.dtype())?;
        let logp = logits.log_softmax(-1)?;
        let eps = self.label_smoothing;
        if labels.dtype().is_float() {
            if labels.shape() != logits.shape() || labels.dtype() != logits.dtype() {
                return Err(Error::invalid(format!(
                    "{who}: probability targets must match the logits ({} {:?}), got {} {:?}",
                    logits.dtype(),
                    logits.shape(),
                    labels.dtype(),
                    labels.shape()
                )));
            }
            let target = labels.mul_scalar(1.0 - eps)?.add_scalar(eps / c as f64)?;
            let mut wl = logp.mul(&target)?;
            if let Some(w) = &self.weight {
                wl = wl.mul(w)?;
            }
            return Ok(vec![self.reduction.apply(wl.sum(&[-1], false)?.neg()?)?]);
        }
        check_sparse(who, logits, labels)?;
        let (per, w_target, valid) =
            nll_parts(&logp, labels, self.weight.as_ref(), self.ignore_index)?;
        let nll = match self.reduction {
            Reduction::Mean => per.sum(&[], false)?.div(&w_target.sum(&[], false)?)?,
            r => r.apply(per)?,
        };
        if eps == 0.0 {
            return Ok(vec![nll]);
        }
        // PyTorch's label smoothing: (1 - eps) * nll + eps / C * smooth, where smooth sums
        // -w_c * log p_c over classes and is normalised like nll.
        let weighted = match &self.weight {
            Some(w) => logp.mul(w)?,
            None => logp.clone(),
        };
        let smooth = weighted.sum(&[-1], false)?.neg()?.mul(&valid)?;
        let smooth = match self.reduction {
            Reduction::Mean => {
                let denom = if self.weight.is_some() {
                    &w_target
                } else {
                    &valid
                };
                smooth.sum(&[], false)?.div(&denom.sum(&[], false)?)?
            }
            r => r.apply(smooth)?,
        };
        let out = nll
            .mul_scalar(1.0 - eps)?
            .add(&smooth.mul_scalar(eps / c as f64)?)?;
        Ok(vec![out])
    }
    loss_cell_boilerplate!("CrossEntropyLoss");
}

/// Logits and labels of one float dtype; under a mixed-precision compute dtype (a loss
/// kept in float32 behind a float16 network) they may differ, as each op then casts both.
fn same_float(who: &str, x: &Tensor, y: &Tensor) -> Result<()> {
    let both_float = x.dtype().is_float() && y.dtype().is_float();
    let agree = x.dtype() == y.dtype() || spore_core::autocast::compute_dtype().is_some();
    if !both_float || !agree {
        return Err(Error::invalid(format!(
            "{who}: logits and labels must be the same float dtype, got {} {:?} and {} {:?}",
            x.dtype(),
            x.shape(),
            y.dtype(),
            y.shape()
        )));
    }
    Ok(())
}

macro_rules! elementwise_loss {
    ($(#[$doc:meta])* $name:ident, $class:literal, |$d:ident| $body:expr) => {
        $(#[$doc])*
        pub struct $name {
            base: CellBase,
            pub reduction: Reduction,
        }
        impl $name {
            pub fn new(reduction: Reduction) -> Arc<Self> {
                Arc::new($name { base: CellBase::new(), reduction })
            }
        }
        impl Cell for $name {
            fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
                let (x, y) = two($class, inputs)?;
                same_float($class, x, y)?;
                let $d = x.sub(y)?;
                Ok(vec![self.reduction.apply($body)?])
            }
            loss_cell_boilerplate!($class);
        }
    };
}

elementwise_loss!(
    /// Squared error `(x - y)^2` (broadcasting), reduced (MindSpore's default: mean).
    MSELoss,
    "MSELoss",
    |d| d.mul(&d)?
);
elementwise_loss!(
    /// Absolute error `|x - y|`, reduced (default: mean).
    L1Loss,
    "L1Loss",
    |d| d.abs()?
);

/// `softplus(z) = log(1 + e^z)`, computed without overflow.
fn softplus(z: &Tensor) -> Result<Tensor> {
    let zero = Tensor::scalar_of(0.0, z.dtype());
    z.maximum(&zero)?
        .add(&z.abs()?.neg()?.exp()?.add_scalar(1.0)?.log()?)
}

/// Binary cross-entropy on logits:
/// `w * (pos_weight * y * softplus(-x) + (1 - y) * softplus(x))`, reduced.
pub struct BCEWithLogitsLoss {
    base: CellBase,
    pub reduction: Reduction,
    pub weight: Option<Tensor>,
    pub pos_weight: Option<Tensor>,
}

impl BCEWithLogitsLoss {
    pub fn new(reduction: Reduction) -> Arc<Self> {
        BCEWithLogitsLoss::with_weights(reduction, None, None)
    }
    /// `weight` scales each element, `pos_weight` the positive term (both broadcast).
    pub fn with_weights(
        reduction: Reduction,
        weight: Option<Tensor>,
        pos_weight: Option<Tensor>,
    ) -> Arc<Self> {
        Arc::new(BCEWithLogitsLoss {
            base: CellBase::new(),
            reduction,
            weight,
            pos_weight,
        })
    }
}

impl Cell for BCEWithLogitsLoss {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let who = "BCEWithLogitsLoss";
        let (x, y) = two(who, inputs)?;
        same_float(who, x, y)?;
        if x.shape() != y.shape() {
            return Err(Error::invalid(format!(
                "{who}: logits and labels must have the same shape, got {:?} and {:?}",
                x.shape(),
                y.shape()
            )));
        }
        let mut pos = y.mul(&softplus(&x.neg()?)?)?;
        if let Some(pw) = &self.pos_weight {
            pos = pos.mul(pw)?;
        }
        let neg = y.neg()?.add_scalar(1.0)?.mul(&softplus(x)?)?;
        let mut loss = pos.add(&neg)?;
        if let Some(w) = &self.weight {
            loss = loss.mul(w)?;
        }
        Ok(vec![self.reduction.apply(loss)?])
    }
    loss_cell_boilerplate!("BCEWithLogitsLoss");
}
