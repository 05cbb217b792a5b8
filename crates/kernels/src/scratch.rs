//! Per-thread scratch vectors for the GEMMs' packed blocks: a thread keeps the vectors it
//! used, so steady state allocates nothing.
//!
//! ```ignore
//! thread_local! { static SLOT: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) }; }
//! let sum = with_scratch(&SLOT, 8, Keep { min: 64, max: usize::MAX }, |s| s.len());
//! assert_eq!(sum, 8);
//! ```
//!
//! A slot is a stack of vectors: a rayon worker that waits inside one product may run a
//! task of another product on the same thread, and that nested call takes a second
//! vector, which stays for the next time.

use std::cell::RefCell;
use std::thread::LocalKey;

/// Sizes a slot's vectors take: new ones grow to a power of two, at least `min` values;
/// one longer than `max` goes back to the allocator after use.
#[derive(Clone, Copy)]
pub(crate) struct Keep {
    pub(crate) min: usize,
    pub(crate) max: usize,
}

/// Runs `f` on at least `len` values of this thread's scratch `slot` (contents
/// unspecified).
pub(crate) fn with_scratch<T: Copy + Default + 'static, R>(
    slot: &'static LocalKey<RefCell<Vec<Vec<T>>>>,
    len: usize,
    keep: Keep,
    f: impl FnOnce(&mut [T]) -> R,
) -> R {
    let mut held = slot
        .try_with(|stack| stack.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default();
    if held.len() < len {
        held = vec![T::default(); len.next_power_of_two().max(keep.min)];
    }
    let result = f(&mut held[..len]);
    // `try_with`: during thread teardown the slot may be gone; the vector is then freed.
    if held.len() <= keep.max {
        let _ = slot.try_with(|stack| stack.borrow_mut().push(held));
    }
    result
}
