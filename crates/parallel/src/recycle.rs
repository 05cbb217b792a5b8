//! Buffers for collectives' results, recycled. A fresh buffer of tens of megabytes costs
//! more in page faults than its AllReduce costs on the wire, so results come from here:
//! AllReduce results (and flattened gradient buckets) are handed out behind an `Arc` of
//! which this pool keeps a clone, and once every tensor over it is gone (only the pool's
//! clone is left) the next collective of that size reuses it. The pool keeps at most 256
//! handles and 512 MB of buffers nobody holds; the oldest free ones go first.
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

/// Why these bounds: a step of a network with one bucket per parameter (ResNet-18 has 62)
/// must find last step's buffers again, while memory nobody uses stays bounded.
const KEPT: usize = 256;
const FREE_BYTES: usize = 512 << 20;

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
    let bytes = |b: &Buffer| b.len() * b.dtype().size_in_bytes();
    let mut free: usize = pool
        .iter()
        .filter(|b| Arc::strong_count(b) == 1)
        .map(|b| bytes(b))
        .sum();
    while pool.len() > KEPT || free > FREE_BYTES {
        // The oldest free buffer goes; if none is free, the oldest handle (its holder
        // keeps the memory; it is just not recycled).
        let i = pool
            .iter()
            .position(|b| Arc::strong_count(b) == 1)
            .unwrap_or(0);
        match pool.remove(i) {
            Some(b) if Arc::strong_count(&b) == 1 => free -= bytes(&b).min(free),
            Some(_) => {}
            None => break,
        }
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
