//! Scope names: cells push theirs (`network`, `conv1`) so that every op, traced or eager,
//! gets MindSpore's full name (`Default/network/conv1/Conv2D-op3`; backward ops under
//! `Gradients/`), which IR, dumps and the profiler print.
//!
//! ```
//! use spore_core::trace::{current_scope, with_scope};
//! with_scope("network", || with_scope("conv1", || {
//!     assert_eq!(current_scope(), "Default/network/conv1");
//! }));
//! assert_eq!(current_scope(), "Default");
//! ```

use std::cell::RefCell;

use crate::op::Op;

thread_local! {
    static SCOPES: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    static EAGER_COUNTER: RefCell<usize> = const { RefCell::new(0) };
}

/// Runs `f` with op names under `Gradients/` (MindSpore names backward ops that way; the
/// profiler's iteration trace uses it to tell the backward pass apart).
pub fn with_gradient_scope<R>(f: impl FnOnce() -> R) -> R {
    crate::depth::within(&crate::depth::IN_GRADIENT, f)
}

/// Runs `f` inside the named scope (`network`, `conv1`, ...).
pub fn with_scope<R>(name: &str, f: impl FnOnce() -> R) -> R {
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            SCOPES.with(|s| s.borrow_mut().pop());
        }
    }
    SCOPES.with(|s| s.borrow_mut().push(name.to_string()));
    let _pop = Pop;
    f()
}

/// The current scope path, e.g. `Default/network/conv1`.
pub fn current_scope() -> String {
    let root = if crate::depth::depth(&crate::depth::IN_GRADIENT) > 0 {
        "Gradients/Default"
    } else {
        "Default"
    };
    SCOPES.with(|s| {
        let s = s.borrow();
        if s.is_empty() {
            root.to_string()
        } else {
            format!("{root}/{}", s.join("/"))
        }
    })
}

/// A fresh full name for an eager (PyNative) operation, used by dumps and the profiler.
pub fn eager_op_name(op: &Op) -> String {
    let n = EAGER_COUNTER.with(|c| {
        let mut c = c.borrow_mut();
        *c += 1;
        *c - 1
    });
    format!("{}/{}-op{n}", current_scope(), op.name())
}
