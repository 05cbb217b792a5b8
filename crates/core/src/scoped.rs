//! A thread-local setting held for the length of one call, as `no_grad` holds gradient
//! recording off: the previous value comes back when the call ends, also when it panics.
//!
//! ```
//! use std::cell::Cell;
//! use spore_core::scoped::with_cell;
//! thread_local! { static FLAG: Cell<bool> = const { Cell::new(false) }; }
//! with_cell(&FLAG, true, || assert!(FLAG.with(Cell::get)));
//! assert!(!FLAG.with(Cell::get));
//! ```

use std::cell::Cell;
use std::thread::LocalKey;

/// Runs `f` with `key` set to `value`, restoring the previous value after.
pub fn with_cell<T: Copy + 'static, R>(
    key: &'static LocalKey<Cell<T>>,
    value: T,
    f: impl FnOnce() -> R,
) -> R {
    /// Puts `previous` back however `f` ends.
    struct Restore<T: Copy + 'static> {
        key: &'static LocalKey<Cell<T>>,
        previous: T,
    }
    impl<T: Copy + 'static> Drop for Restore<T> {
        fn drop(&mut self) {
            let previous = self.previous;
            self.key.with(|c| c.set(previous));
        }
    }
    let previous = key.with(|c| c.replace(value));
    let _restore = Restore { key, previous };
    f()
}
