//! Which gradient ReLU passes back on this thread: its derivative (the default), or the
//! modified rules of two explanation methods (MindSpore XAI's Deconvolution and
//! GuidedBackprop). Scoped like `no_grad`: the rule in force when a backward pass runs
//! (eagerly) or is traced decides.
//!
//! ```
//! use spore_core::autodiff::grad;
//! use spore_core::relu_rule::{ReluBackward, with_relu_backward};
//! use spore_core::Tensor;
//! let x = Tensor::from_vec(vec![-1.0f32, 2.0], &[2]).unwrap();
//! // d/dx of relu(x) * c with c = [-3, -3]: the upstream gradient is negative.
//! let c = Tensor::from_vec(vec![-3.0f32, -3.0], &[2]).unwrap();
//! let f = |x: &[Tensor]| x[0].relu()?.mul(&c)?.sum(&[0], false);
//! let standard = grad(f, &[0])(&[x.clone()]).unwrap();
//! assert_eq!(standard[0].to_vec::<f32>().unwrap(), vec![0.0, -3.0]);
//! let guided = with_relu_backward(ReluBackward::Guided, || grad(f, &[0])(&[x.clone()])).unwrap();
//! assert_eq!(guided[0].to_vec::<f32>().unwrap(), vec![0.0, 0.0]); // negative gradients stop
//! ```

use std::cell::Cell;

/// The gradient ReLU passes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReluBackward {
    /// `g · [x > 0]`.
    Standard,
    /// `max(g, 0)`: positive gradients, whatever the forward value (Deconvolution).
    Deconvolution,
    /// `max(g, 0) · [x > 0]` (GuidedBackprop).
    Guided,
}

thread_local! {
    static RULE: Cell<ReluBackward> = const { Cell::new(ReluBackward::Standard) };
}

/// The rule in force on this thread.
pub fn relu_backward() -> ReluBackward {
    RULE.with(|r| r.get())
}

/// Runs `f` with `rule`, restoring the previous rule after (also when `f` panics).
pub fn with_relu_backward<R>(rule: ReluBackward, f: impl FnOnce() -> R) -> R {
    crate::scoped::with_cell(&RULE, rule, f)
}
