//! Buffers for collectives' results, recycled. A fresh buffer of tens of megabytes costs
//! more in page faults than its AllReduce costs on the wire, so results come from here:
//! every result buffer is handed out behind an `Arc` of which this pool keeps a clone,
//! and once every tensor over it is gone (only the pool's clone is left) the next
//! collective of that size reuses it. The pool keeps a few buffers; the oldest go first.
//!
//! ```ignore
//! let b = take(DType::F32, 1 << 20);       // a recycled buffer, or a new one
//! let shared = track(b);                    // the result, still known to the pool
//! drop(shared);                             // the caller's tensor is gone
//! let again = take(DType::F32, 1 << 20);    // the same memory, no page faults
//! ```

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use spore_core::DType;
use spore_kernels::Buffer;

/// Why 8: a training step's buckets plus a result or two the caller still holds.
const KEPT: usize = 8;

static POOL: Mutex<VecDeque<Arc<Buffer>>> = Mutex::new(VecDeque::new());

/// A buffer of `len` elements of `dtype` whose contents will be overwritten.
pub(crate) fn take(dtype: DType, len: usize) -> Buffer {
    let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
    let free = pool
        .iter()
        .position(|b| Arc::strong_count(b) == 1 && b.dtype() == dtype && b.len() == len);
    if let Some(i) = free
        && let Some(arc) = pool.remove(i)
    {
        match Arc::try_unwrap(arc) {
            Ok(buffer) => return buffer,
            // Not reachable (the count was 1 under the lock and only the pool clones
            // these); keep it and allocate.
            Err(arc) => pool.push_back(arc),
        }
    }
    Buffer::zeros(dtype, len)
}

/// `buffer` as a shared result the pool will take back when the caller lets it go.
pub(crate) fn track(buffer: Buffer) -> Arc<Buffer> {
    let shared = Arc::new(buffer);
    let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
    pool.push_back(shared.clone());
    while pool.len() > KEPT {
        pool.pop_front();
    }
    shared
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_comes_back_only_when_nobody_holds_it() {
        let len = 12_345; // a length no other test uses
        let held = track(take(DType::F32, len));
        let ptr = |b: &Buffer| match b {
            Buffer::F32(v) => v.as_ptr() as usize,
            _ => 0,
        };
        let other = take(DType::F32, len);
        assert_ne!(ptr(&other), ptr(&held), "a held buffer is never reused");
        let held_at = ptr(&held);
        drop(held);
        let again = take(DType::F32, len);
        assert_eq!(ptr(&again), held_at, "a released buffer is reused");
    }
}
