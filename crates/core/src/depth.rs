//! The autodiff state of a thread: grad mode (whether new operations record autodiff
//! links: `no_grad`) and the nesting counters ("am I inside a gradient pass / a function
//! being differentiated?"), counted so that nested calls work and restored even on panic.
//!
//! ```
//! use spore_core::{is_grad_enabled, no_grad};
//! assert!(is_grad_enabled());
//! no_grad(|| assert!(!is_grad_enabled()));
//! assert!(is_grad_enabled());
//! ```

use std::cell::Cell;
use std::thread::LocalKey;

/// A counter's key.
pub(crate) type Depth = LocalKey<Cell<u32>>;

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
    /// Gradient passes running on this thread: their ops are named under `Gradients/`.
    pub(crate) static IN_GRADIENT: Cell<u32> = const { Cell::new(0) };
    /// How many `value_and_grad` functions are being evaluated on this thread: gradients
    /// taken inside one of them must themselves be differentiable.
    pub(crate) static DIFFERENTIATING: Cell<u32> = const { Cell::new(0) };
}

/// Whether new operations record autodiff links on this thread.
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get())
}

/// Runs `f` with gradient recording switched on or off, restoring the previous state after
/// (also when `f` panics).
pub fn with_grad_enabled<R>(enabled: bool, f: impl FnOnce() -> R) -> R {
    crate::scoped::with_cell(&GRAD_ENABLED, enabled, f)
}

/// Runs `f` without recording gradients (PyTorch's `torch.no_grad()`).
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    with_grad_enabled(false, f)
}

/// Runs `f` with `counter` one higher, lowering it again after (also when `f` panics).
pub(crate) fn within<R>(counter: &'static Depth, f: impl FnOnce() -> R) -> R {
    struct Leave(&'static Depth);
    impl Drop for Leave {
        fn drop(&mut self) {
            self.0.with(|d| d.set(d.get().saturating_sub(1)));
        }
    }
    counter.with(|d| d.set(d.get() + 1));
    let _leave = Leave(counter);
    f()
}

/// The counter's current value on this thread.
pub(crate) fn depth(counter: &'static Depth) -> u32 {
    counter.with(Cell::get)
}
