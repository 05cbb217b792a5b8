//! Thread-local nesting counters: "am I inside a gradient pass / a function being
//! differentiated?", counted so that nested calls work and restored even on panic.
//!
//! ```ignore
//! thread_local! { static DEPTH: Cell<u32> = const { Cell::new(0) }; }
//! within(&DEPTH, || assert!(depth(&DEPTH) > 0));
//! assert_eq!(depth(&DEPTH), 0);
//! ```

use std::cell::Cell;
use std::thread::LocalKey;

/// A counter's key.
pub(crate) type Depth = LocalKey<Cell<u32>>;

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
