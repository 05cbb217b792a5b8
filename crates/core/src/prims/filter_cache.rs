//! Convolution filters prepared once per weight for networks in evaluation mode: the
//! packed or Winograd-transformed filters a forward pass otherwise makes on every call
//! (see `spore_kernels::conv::prepared`). Cells mark their evaluation-mode calls with
//! [`with_frozen_weights`]; inside them a convolution looks its weight buffer up here.
//!
//! ```
//! use spore_core::prims::filter_cache::{frozen_weights, with_frozen_weights};
//! assert!(!frozen_weights());
//! with_frozen_weights(|| assert!(frozen_weights()));
//! ```
//!
//! Why an entry cannot go stale: it holds a `Weak` to the weight's buffer. Every write
//! into a shared buffer first takes it as the only handle (`Arc::get_mut`, which a
//! `Weak` refuses), so while the entry exists the buffer keeps its values, and its
//! address is not reused; a training step that meets such a buffer writes a new one
//! instead, and the entry dies with the old one.

use std::cell::Cell;
use std::sync::{Arc, Mutex, Weak};

use spore_kernels::Buffer;
use spore_kernels::conv::prepared::{PreparedFilters, conv2d_prepared_finished, prepare_filters};
use spore_kernels::conv::{ChannelEpilogue, ConvGeometry};

thread_local! {
    static FROZEN: Cell<bool> = const { Cell::new(false) };
}

/// Most bytes of prepared filters kept; the oldest entries go first.
const LIMIT_BYTES: usize = 1 << 30;

struct Entry {
    weight: Weak<Buffer>,
    prepared: Arc<PreparedFilters>,
}

static CACHE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// Runs `f` with convolutions on this thread treating their weights as fixed (a cell in
/// evaluation mode); restored after `f`, also when it panics.
pub fn with_frozen_weights<R>(f: impl FnOnce() -> R) -> R {
    crate::scoped::with_cell(&FROZEN, true, f)
}

/// Whether this thread is inside [`with_frozen_weights`].
pub fn frozen_weights() -> bool {
    FROZEN.with(|c| c.get())
}

/// Whether this machine's convolution paths prepare filters at all (they run on
/// Spore's own AVX2 GEMM; elsewhere nothing is cached).
pub fn prepares_filters() -> bool {
    spore_kernels::matmul::own_f32_gemm()
}

/// How many weights have prepared filters that are still in use (for tests and
/// reports).
pub fn cached_weights() -> usize {
    CACHE
        .lock()
        .map(|c| c.iter().filter(|e| e.weight.strong_count() > 0).count())
        .unwrap_or(0)
}

/// `conv2d(x, w)` (with `relu`, its ReLU) from the cached filters of `weight`, preparing
/// them on first use; `None` outside [`with_frozen_weights`], for a weight that is not
/// shared (a copy made for this call), or where the path prepares nothing.
pub(crate) fn forward(
    x: &[f32],
    weight: &Arc<Buffer>,
    g: &ConvGeometry,
    relu: bool,
) -> Option<Vec<f32>> {
    let e = ChannelEpilogue {
        relu,
        ..Default::default()
    };
    forward_finished(x, weight, g, &e)
}

/// [`forward`] through a convolution epilogue (operands checked by the caller).
pub(crate) fn forward_finished(
    x: &[f32],
    weight: &Arc<Buffer>,
    g: &ConvGeometry,
    e: &ChannelEpilogue,
) -> Option<Vec<f32>> {
    if !frozen_weights() || Arc::strong_count(weight) < 2 {
        return None;
    }
    let Buffer::F32(w) = &**weight else {
        return None;
    };
    let prepared = match lookup(weight, g) {
        Some(p) => p,
        None => {
            let p = Arc::new(prepare_filters(w, g)?);
            insert(weight, p.clone());
            p
        }
    };
    Some(conv2d_prepared_finished(x, &prepared, g, e))
}

fn lookup(weight: &Arc<Buffer>, g: &ConvGeometry) -> Option<Arc<PreparedFilters>> {
    let cache = CACHE.lock().ok()?;
    cache
        .iter()
        .find(|e| {
            e.weight.strong_count() > 0
                && std::ptr::eq(e.weight.as_ptr(), Arc::as_ptr(weight))
                && e.prepared.serves(g)
        })
        .map(|e| e.prepared.clone())
}

fn insert(weight: &Arc<Buffer>, prepared: Arc<PreparedFilters>) {
    let Ok(mut cache) = CACHE.lock() else {
        return;
    };
    // Entries whose weight is gone go first, then the oldest while over the limit.
    cache.retain(|e| e.weight.strong_count() > 0);
    let mut bytes: usize =
        cache.iter().map(|e| e.prepared.bytes()).sum::<usize>() + prepared.bytes();
    while bytes > LIMIT_BYTES && !cache.is_empty() {
        bytes -= cache.remove(0).prepared.bytes();
    }
    cache.push(Entry {
        weight: Arc::downgrade(weight),
        prepared,
    });
}
