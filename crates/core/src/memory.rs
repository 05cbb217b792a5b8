//! Resource checks before allocation: a tensor whose element count or byte size overflows,
//! or that needs more memory than the machine has available, is an error naming the
//! shape and the bytes asked, instead of an abort inside the allocator.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! let err = Tensor::zeros(&[1 << 40, 1 << 40], DType::F32).unwrap_err();
//! assert!(err.to_string().contains("overflows"), "{err}");
//! let err = Tensor::zeros(&[1 << 50], DType::F32).unwrap_err();
//! assert!(err.to_string().contains("4503599627370496 bytes"), "{err}");
//! ```
//!
//! Every operator's output passes [`check`] right after shape inference (in eager
//! execution, while tracing, and in compiled graphs), and so do the creation functions.
//! Why check against available memory rather than wait for the allocation to fail: on
//! Linux a large allocation usually succeeds (memory is overcommitted) and the process
//! is killed later when the pages are touched; and when it does fail, Rust's allocator
//! aborts the process. The check costs a few multiplications per op; the system's
//! figures are read only for outputs of [`CHECKED_FROM`] bytes or more.

use std::sync::atomic::{AtomicU64, Ordering};

use spore_kernels::DType;

/// Outputs this large (256 MiB) or larger are compared with the memory available.
pub const CHECKED_FROM: usize = 256 << 20;

/// A cap set with `set_context(max_device_memory=...)`; 0 = none.
static CAP: AtomicU64 = AtomicU64::new(0);

/// Sets (or, with `None`, clears) the most memory one tensor may take.
pub fn set_cap(bytes: Option<u64>) {
    CAP.store(bytes.unwrap_or(0), Ordering::Relaxed);
}

/// The cap set by [`set_cap`], if any.
pub fn cap() -> Option<u64> {
    Some(CAP.load(Ordering::Relaxed)).filter(|&c| c > 0)
}

/// Bytes in the largest binary unit that leaves at least 1 ("3.5 GiB", "800.0 KiB").
fn gib(bytes: f64) -> String {
    let units = [("GiB", 30), ("MiB", 20), ("KiB", 10)];
    for (unit, shift) in units {
        let size = (1u64 << shift) as f64;
        if bytes >= size {
            return format!("{:.1} {unit}", bytes / size);
        }
    }
    format!("{bytes} B")
}

/// Bytes of a tensor of `shape` and `dtype`, or why it cannot exist.
pub fn bytes_of(shape: &[usize], dtype: DType) -> Result<usize, String> {
    let overflow = || {
        format!(
            "a tensor of shape {shape:?} and dtype {dtype} has more elements or bytes than \
             this machine can address (the size overflows 64 bits)"
        )
    };
    let n = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(overflow)?;
    let bytes = n.checked_mul(dtype.size_in_bytes()).ok_or_else(overflow)?;
    if bytes > isize::MAX as usize {
        return Err(overflow());
    }
    Ok(bytes)
}

thread_local! {
    static GLOBAL_SHAPES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` (a trace for planning) with sizes checked only for overflow: its shapes are
/// a whole cluster's tensors, which no process ever allocates whole.
pub fn with_global_shapes<R>(f: impl FnOnce() -> R) -> R {
    crate::scoped::with_cell(&GLOBAL_SHAPES, true, f)
}

/// Checks that a tensor of `shape` and `dtype` can be allocated: its size does not
/// overflow and it fits in the memory available (and under the configured cap).
pub fn check(shape: &[usize], dtype: DType) -> Result<(), String> {
    let bytes = bytes_of(shape, dtype)?;
    let cap = cap();
    if bytes < CHECKED_FROM && cap.is_none_or(|c| bytes as u64 <= c) {
        return Ok(());
    }
    // Asked only past the fast path above, which every small op takes.
    if GLOBAL_SHAPES.with(|g| g.get()) {
        return Ok(());
    }
    if let Some(c) = cap
        && bytes as u64 > c
    {
        return Err(format!(
            "a tensor of shape {shape:?} and dtype {dtype} needs {bytes} bytes ({}), more than \
             max_device_memory ({})",
            gib(bytes as f64),
            gib(c as f64)
        ));
    }
    match available_bytes() {
        Some(available) if bytes as u64 > available => Err(format!(
            "a tensor of shape {shape:?} and dtype {dtype} needs {bytes} bytes ({}), more than \
             the {} of memory available on this machine",
            gib(bytes as f64),
            gib(available as f64)
        )),
        _ => Ok(()),
    }
}

/// Memory this process can still get: available RAM plus free swap, or what its cgroup
/// allows, whichever is less. `None` where the system does not say (not Linux).
pub fn available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = meminfo.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    };
    let system = field("MemAvailable:")? + field("SwapFree:").unwrap_or(0);
    Some(system.min(cgroup_room().unwrap_or(u64::MAX)))
}

/// Bytes left under the cgroup v2 memory limit, when one is set.
fn cgroup_room() -> Option<u64> {
    let read = |f: &str| std::fs::read_to_string(format!("/sys/fs/cgroup/{f}")).ok();
    let max: u64 = read("memory.max")?.trim().parse().ok()?;
    let current: u64 = read("memory.current")?.trim().parse().ok()?;
    Some(max.saturating_sub(current))
}
