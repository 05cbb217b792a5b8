//! How a cell is called ([`CellCall`]): a call inside a trace runs `construct` inline; in
//! Graph mode (or on a jit-decorated cell) it runs the cell's compiled graph, unless
//! `compiled::prefer_eager` says a gradient would be wrong there; otherwise it runs
//! eagerly. Nested calls name their scopes after the attribute that holds the child.
//!
//! ```
//! use spore_nn::prelude::*;
//! use spore_core::{DType, Tensor};
//! let dense = Dense::new(3, 2).unwrap();
//! let y = dense.call1(&Tensor::ones(&[4, 3], DType::F32).unwrap()).unwrap();
//! assert_eq!(y.shape(), &[4, 2]);
//! ```

use std::cell::Cell as StdCell;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use spore_compile::Jit;
use spore_core::context::Mode;
use spore_core::{Error, Result, Tensor, trace};

use crate::cell::{Cell, CellCall, CellExt};
use crate::compiled::{compile, prefer_eager};

thread_local! {
    /// How many cell calls are active on this thread: a call at depth 0 is a root call
    /// (no scope of its own), deeper calls push their attribute name.
    static DEPTH: StdCell<usize> = const { StdCell::new(0) };
    /// Inside [`run_eagerly`]: cells run `construct` op by op whatever the mode.
    static FORCE_EAGER: StdCell<bool> = const { StdCell::new(false) };
}

/// Runs `f` with every cell call on this thread executed op by op (as in PyNative mode),
/// whatever the context's mode and jit flags: for code that needs eager values, hooks
/// and the thread's autodiff rules, without changing the process-wide mode other threads
/// see. Restored after `f`, also when it panics.
///
/// ```
/// use spore_core::{DType, Tensor};
/// use spore_nn::call::run_eagerly;
/// use spore_nn::prelude::*;
/// let d = Dense::new(2, 1).unwrap();
/// let y = run_eagerly(|| d.call1(&Tensor::ones(&[1, 2], DType::F32).unwrap())).unwrap();
/// assert_eq!(y.shape(), &[1, 1]);
/// ```
pub fn run_eagerly<R>(f: impl FnOnce() -> R) -> R {
    spore_core::scoped::with_cell(&FORCE_EAGER, true, f)
}

/// Runs `cell`'s `construct` as a root call (no scope of its own) whose children name
/// their scopes (`Default/conv1/...`), without compiling: for code that traces a cell
/// itself (export, code generation). Calling `construct` directly would leave the
/// children at depth 0, each a root without a scope.
pub fn construct_as_root<C: Cell + ?Sized>(cell: &C, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
    cell.parameters_and_names();
    within_call(None, || cell.construct(inputs))
}

fn within_call<R>(scope: Option<String>, f: impl FnOnce() -> R) -> R {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
        }
    }
    DEPTH.with(|d| d.set(d.get() + 1));
    let _leave = Leave;
    match scope {
        Some(s) => trace::with_scope(&s, f),
        None => f(),
    }
}

impl<C: Cell + ?Sized> CellCall for Arc<C> {
    fn call(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        dispatch(self, inputs, Ok, |jit| jit.call(inputs))
    }

    fn call_first(&self, inputs: &[Tensor]) -> Result<Tensor> {
        let first = |out: Vec<Tensor>| {
            out.into_iter().next().ok_or_else(|| {
                Error::invalid(format!(
                    "{}: construct returned no outputs",
                    self.class_name()
                ))
            })
        };
        dispatch(self, inputs, first, |jit| jit.call_first(inputs))
    }

    fn call1(&self, x: &Tensor) -> Result<Tensor> {
        let one = |out: Vec<Tensor>| match <[Tensor; 1]>::try_from(out) {
            Ok([y]) => Ok(y),
            Err(out) => Err(Error::invalid(format!(
                "{}: call1 expects one output, construct returned {}",
                self.class_name(),
                out.len()
            ))),
        };
        let inputs = std::slice::from_ref(x);
        dispatch(self, inputs, one, |jit| jit.call_single(inputs))
    }
}

/// How a cell call runs: `eager` finishes an inline or eager `construct`'s outputs,
/// `compiled` runs the cell's jit (Graph mode, or a jit-decorated cell).
fn dispatch<C: Cell + ?Sized, R>(
    cell: &Arc<C>,
    inputs: &[Tensor],
    eager: impl FnOnce(Vec<Tensor>) -> Result<R>,
    compiled: impl FnOnce(&Jit) -> Result<R>,
) -> Result<R> {
    let base = cell.base();
    let nested = DEPTH.with(|d| d.get()) > 0;
    if !nested && !base.named.swap(true, Ordering::Relaxed) {
        // Names parameters and children before the first compile, so that graphs and
        // errors show `conv1.weight` and `Default/conv1/...`.
        cell.parameters_and_names();
    }
    if !nested && !base.prepared.load(Ordering::Acquire) && !trace::is_tracing() {
        cell.before_first_call()?;
        base.prepared.store(true, Ordering::Release);
    }
    let scope = if nested { base.scope_name() } else { None };
    let hooks = base.forward_hooks();
    let run = |inputs: &[Tensor]| -> Result<Vec<Tensor>> {
        let out = cell.construct(inputs)?;
        for h in &hooks {
            h(&out);
        }
        Ok(out)
    };
    let call = || {
        if trace::is_tracing() || !hooks.is_empty() || FORCE_EAGER.with(|e| e.get()) {
            return eager(run(inputs)?);
        }
        if (base.is_jit() || spore_core::context::mode() == Mode::Graph) && cell.compiles() {
            let training = base.training();
            if prefer_eager(cell, training, inputs)? {
                return eager(cell.construct(inputs)?);
            }
            let jit = base.compiled[training as usize].get_or_init(|| compile(cell, training));
            return compiled(jit);
        }
        eager(cell.construct(inputs)?)
    };
    // A cell given `to_float` computes in that dtype (its children inherit it).
    let call = || spore_core::autocast::with_compute_dtype(base.float_type(), call);
    // A root call in evaluation mode keeps its weights: convolutions may reuse their
    // prepared filters (`spore_core::prims::filter_cache`).
    if !nested && !base.training() {
        return within_call(scope, || {
            spore_core::prims::filter_cache::with_frozen_weights(call)
        });
    }
    within_call(scope, call)
}
