//! The machine's f32 multiply-add ceiling: how many FLOP/s `threads` threads reach when they
//! do nothing but independent 8-lane FMAs in registers. A GEMM or a convolution can only
//! approach it; the benchmarks state every workload's useful FLOP rate as a share of it.
//!
//! ```
//! use spore_kernels::peak::fma_flops;
//! if let Some(flop) = fma_flops(1, 1000) {
//!     assert_eq!(flop, 1000.0 * 12.0 * 8.0 * 2.0);
//! }
//! ```
//!
//! Why twelve accumulators: an FMA has a latency of 4-5 cycles and two issue ports, so
//! ten or more independent chains keep both ports busy every cycle (the GEMM microkernel
//! uses twelve too). Why OS threads and not the rayon pool: the point is exactly
//! `threads` loops running at once, which a work-stealing pool does not promise.

/// Independent accumulators per thread (each one 8-lane vector).
const CHAINS: usize = 12;

/// Runs `iterations` rounds of `CHAINS` 8-lane FMAs on each of `threads` threads at once
/// and returns the FLOP done (2 per lane per FMA), or `None` where the CPU has no AVX2 and
/// FMA or `SPORE_MAX_ISA` rules them out (the rate is then not measurable this way).
pub fn fma_flops(threads: usize, iterations: u64) -> Option<f64> {
    if !available() {
        return None;
    }
    let threads = threads.max(1);
    std::thread::scope(|s| {
        for _ in 0..threads {
            // SAFETY: `available()` checked AVX2 and FMA.
            s.spawn(move || std::hint::black_box(unsafe { fma_loop(iterations) }));
        }
    });
    Some(threads as f64 * iterations as f64 * (CHAINS * 8 * 2) as f64)
}

fn available() -> bool {
    crate::isa::allows(crate::isa::Isa::Avx2)
}

/// `iterations` rounds of `CHAINS` dependent-free FMAs; returns a value that depends on
/// all of them, so that the compiler keeps the loop.
///
/// # Safety
/// The CPU supports AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_loop(iterations: u64) -> f32 {
    use std::arch::x86_64::*;
    // Multiplier just below 1 and a small addend: the values stay finite for any count.
    let (a, b) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
    let mut acc = [_mm256_set1_ps(1.0); CHAINS];
    for _ in 0..iterations {
        for v in acc.iter_mut() {
            *v = _mm256_fmadd_ps(*v, a, b);
        }
    }
    let mut sum = _mm256_setzero_ps();
    for v in acc {
        sum = _mm256_add_ps(sum, v);
    }
    let mut lanes = [0.0f32; 8];
    // SAFETY: `lanes` holds 8 floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
    lanes.iter().sum()
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn fma_loop(_iterations: u64) -> f32 {
    0.0
}

/// The CPU's model name as Linux reports it (`/proc/cpuinfo`), for benchmark reports;
/// empty where it cannot be read. Where `SPORE_MAX_ISA` keeps the kernels below what the
/// CPU has, the name says so (`AMD EPYC, kernels capped at avx2`), so that a figure
/// measured that way is not taken for the CPU's own.
pub fn cpu_model() -> String {
    let name = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|n| n.trim().to_owned())
        })
        .unwrap_or_default();
    let (level, detected) = (crate::isa::level(), crate::isa::detected());
    if level < detected {
        format!("{name}, kernels capped at {}", level.name())
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_loop_stays_finite_and_depends_on_its_count() {
        if !super::available() {
            eprintln!("SKIPPED the_loop_stays_finite: no AVX2 and FMA here (or SPORE_MAX_ISA)");
            return;
        }
        // SAFETY: checked above.
        let (short, long) = unsafe { (super::fma_loop(1), super::fma_loop(1_000_000)) };
        // x -> 0.999999 x + 1e-7 moves every lane from 1 towards 0.1: both sums are finite
        // and differ, so the loop's work reaches the result.
        assert!(
            short.is_finite() && long.is_finite() && long < short,
            "{short} {long}"
        );
    }
}
