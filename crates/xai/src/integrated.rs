//! Integrated Gradients (Captum's definition): `(x - x0) · ∫₀¹ ∇f(x0 + α (x - x0)) dα`,
//! the integral by Gauss-Legendre quadrature (50 nodes by default, Captum's `gausslegendre`
//! method), all nodes of one input in one batch. Attributions sum to `f(x) - f(x0)` up to
//! the quadrature's error (completeness); the map sums them over channels.
//!
//! ```
//! use spore_xai::integrated::gauss_legendre;
//! let (nodes, weights) = gauss_legendre(3);
//! // Exact for polynomials of degree 5 on [0, 1]: ∫ x^5 = 1/6.
//! let integral: f64 = nodes.iter().zip(&weights).map(|(x, w)| w * x.powi(5)).sum();
//! assert!((integral - 1.0 / 6.0).abs() < 1e-12);
//! ```

use std::sync::Arc;

use spore_core::autodiff::grad;
use spore_core::{Error, Result, Tensor};
use spore_nn::cell::Cell;

use crate::common::{Explainer, check, eagerly, forward, target_score};

/// Nodes and weights of `n`-point Gauss-Legendre quadrature on [0, 1] (weights sum to 1).
pub fn gauss_legendre(n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut nodes = vec![0.0; n];
    let mut weights = vec![0.0; n];
    for i in 0..n {
        // Newton's method on P_n from Chebyshev's estimate of the i-th root.
        let mut x = (std::f64::consts::PI * (i as f64 + 0.75) / (n as f64 + 0.5)).cos();
        let mut dp = 1.0;
        for _ in 0..100 {
            let (mut p0, mut p1) = (1.0, x);
            for k in 2..=n {
                let p2 = ((2 * k - 1) as f64 * x * p1 - (k - 1) as f64 * p0) / k as f64;
                p0 = p1;
                p1 = p2;
            }
            let pn = if n == 0 {
                1.0
            } else if n == 1 {
                x
            } else {
                p1
            };
            let pn1 = if n == 1 { 1.0 } else { p0 };
            dp = n as f64 * (x * pn - pn1) / (x * x - 1.0);
            let step = pn / dp;
            x -= step;
            if step.abs() < 1e-15 {
                break;
            }
        }
        nodes[i] = (1.0 - x) / 2.0;
        weights[i] = 1.0 / ((1.0 - x * x) * dp * dp);
    }
    (nodes, weights)
}

/// Integrated Gradients from a baseline (zeros by default).
pub struct IntegratedGradients {
    net: Arc<dyn Cell>,
    steps: usize,
    baseline: Option<Tensor>,
}

impl IntegratedGradients {
    /// 50 Gauss-Legendre nodes, a zero baseline.
    pub fn new(net: Arc<dyn Cell>) -> IntegratedGradients {
        IntegratedGradients {
            net,
            steps: 50,
            baseline: None,
        }
    }

    pub fn steps(mut self, n: usize) -> IntegratedGradients {
        self.steps = n.max(1);
        self
    }

    /// A baseline of one input's shape `[1, C, H, W]`.
    pub fn baseline(mut self, b: Tensor) -> IntegratedGradients {
        self.baseline = Some(b);
        self
    }

    /// Attributions `[N, C, H, W]`.
    pub fn attribute(&self, inputs: &Tensor, targets: &[usize]) -> Result<Tensor> {
        let targets = check("IntegratedGradients", inputs, targets)?;
        let s = inputs.shape().to_vec();
        let per: usize = s[1..].iter().product();
        let x = inputs.to_vec::<f32>()?;
        let base = match &self.baseline {
            Some(b) if b.numel() == per => b.to_vec::<f32>()?,
            Some(b) => {
                return Err(Error::invalid(format!(
                    "IntegratedGradients: the baseline must hold one input ({:?}), got {:?}",
                    &s[1..],
                    b.shape()
                )));
            }
            None => vec![0.0; per],
        };
        let (nodes, weights) = gauss_legendre(self.steps);
        let m = self.steps;
        let mut out = vec![0f32; x.len()];
        for (n, &target) in targets.iter().enumerate() {
            let xn = &x[n * per..(n + 1) * per];
            let mut batch = Vec::with_capacity(m * per);
            for a in &nodes {
                batch.extend(xn.iter().zip(&base).map(|(v, b)| b + *a as f32 * (v - b)));
            }
            let mut bs = s.clone();
            bs[0] = m;
            let points = Tensor::from_vec(batch, &bs)?;
            let t = vec![target; m];
            let net = self.net.clone();
            let g = eagerly(&self.net, || {
                let f = |x: &[Tensor]| target_score(&forward(&net, &x[0])?, &t);
                grad(f, &[0])(std::slice::from_ref(&points))
            })?;
            let g = g
                .first()
                .ok_or_else(|| Error::invalid("IntegratedGradients: no gradient"))?
                .to_vec::<f32>()?;
            for (i, o) in out[n * per..(n + 1) * per].iter_mut().enumerate() {
                let avg: f64 = (0..m).map(|k| weights[k] * g[k * per + i] as f64).sum();
                *o = ((xn[i] - base[i]) as f64 * avg) as f32;
            }
        }
        Tensor::from_vec(out, &s)
    }
}

impl Explainer for IntegratedGradients {
    fn name(&self) -> String {
        "IntegratedGradients".into()
    }

    fn explain(&self, inputs: &Tensor, targets: &[usize]) -> Result<Tensor> {
        self.attribute(inputs, targets)?.sum(&[1], true)
    }
}
