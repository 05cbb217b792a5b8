//! The 12x16 microkernel for CPUs with AVX-512: two row panels of A against one B panel,
//! twelve 16-lane accumulators updated by one load of B and twelve broadcasts of A per
//! step of the depth.
//!
//! ```text
//! for p in 0..kc:  b = B[p, 0..16]
//!                  for r in 0..6:  acc[r] += A0[r, p] * b;  acc[6 + r] += A1[r, p] * b
//! ```
//!
//! Why: a CPU with two 512-bit FMA units (Intel's Xeons since Skylake-SP) can do twice
//! the multiply-adds per cycle in 16-lane vectors that it does in the 8-lane ones of the
//! 6x16 kernel (Spore's BERT step ran at 0.6x PyTorch on a Sapphire Rapids host:
//! BENCHMARKS.md, "Performance II"). The panels' layout is the 6x16 kernel's, so packing
//! and every path that packs stay as they are; only full pairs of tiles take this
//! kernel, and only where it is asked for ([`chosen`]: it is not yet shown to pay).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[cfg(target_arch = "x86_64")]
use super::kernel::{PREFETCH_A, store_tile};
use super::{MR, NR, TileEpilogue};

/// Whether the blocked GEMM takes [`tile_pair`] for full pairs of tiles: only where
/// `SPORE_AVX512_GEMM=on` asks for it (read once) or after [`force_pairs`], and the CPU
/// runs it ([`runs_here`]).
///
/// Why not by default: on the one CPU with full-width 512-bit FMA units measured so far
/// (a 16-core Sapphire Rapids host), the kernel made one-thread products 1.5x faster but
/// a two-thread 2048³ product 11 % slower, and whole training steps moved both ways
/// within that host's noise; on Zen 4, which splits each 512-bit multiply-add in two, it
/// measured 2 to 4 % slower (BENCHMARKS.md, "Performance II").
pub(crate) fn chosen() -> bool {
    use std::sync::OnceLock;
    static ASKED: OnceLock<bool> = OnceLock::new();
    let asked = FORCED.load(std::sync::atomic::Ordering::Relaxed)
        || *ASKED.get_or_init(|| std::env::var("SPORE_AVX512_GEMM").as_deref() == Ok("on"));
    asked && runs_here()
}

static FORCED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes [`chosen`] true from now on wherever the CPU runs the kernel: for the tests that
/// check the 12x16 kernel's products (it is off by default).
#[doc(hidden)]
pub fn force_pairs() {
    FORCED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether [`tile_pair`]'s instructions may run here ([`crate::isa`]: the CPU has them and
/// `SPORE_MAX_ISA` does not rule them out).
pub fn runs_here() -> bool {
    crate::isa::allows(crate::isa::Isa::Avx512)
}

/// `C[12 x 16] (+)= [A0; A1] * B_panel`, then each half's epilogue: `a0` and `a1` are two
/// packed row panels (`MR` values per step), `b` holds `kc` rows of `NR` values, `ldb`
/// elements apart; C rows are `ldc` apart, the second panel's six rows from `c + 6 * ldc`.
///
/// # Safety
/// The CPU supports AVX-512 F and DQ, AVX2 and FMA ([`runs_here`]); `a0` and `a1` have
/// `MR * kc` readable values, `b` `kc` rows of `NR`, and `c` (and each epilogue's
/// operands) twelve rows of sixteen.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile_pair(
    kc: usize,
    (a0, a1): (*const f32, *const f32),
    b: *const f32,
    ldb: isize,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
    epilogues: [Option<&TileEpilogue>; 2],
) {
    // SAFETY (whole body): pointer arithmetic stays inside the ranges the caller promised.
    unsafe {
        for r in 0..2 * MR {
            _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc).cast::<i8>());
            _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc + NR - 1).cast::<i8>());
        }
        for e in epilogues.iter().flatten() {
            for r in 0..MR {
                e.prefetch(r, ldc);
            }
        }
        let mut acc = [_mm512_setzero_ps(); 2 * MR];
        let (mut a0, mut a1, mut b) = (a0, a1, b);
        for _ in 0..kc {
            // A's lines asked for ahead, as in the 6x16 kernel (whose measurement this
            // follows; not measured with this kernel).
            _mm_prefetch::<_MM_HINT_T0>(a0.wrapping_add(PREFETCH_A).cast::<i8>());
            _mm_prefetch::<_MM_HINT_T0>(a1.wrapping_add(PREFETCH_A).cast::<i8>());
            let bv = _mm512_loadu_ps(b);
            for r in 0..MR {
                acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(*a0.add(r)), bv, acc[r]);
                acc[MR + r] = _mm512_fmadd_ps(_mm512_set1_ps(*a1.add(r)), bv, acc[MR + r]);
            }
            a0 = a0.add(MR);
            a1 = a1.add(MR);
            b = b.offset(ldb);
        }
        // Each half as the 6x16 kernel's accumulators (two 8-lane halves per row), stored
        // through its epilogue code.
        for (half, epilogue) in epilogues.into_iter().enumerate() {
            let rows: [[__m256; 2]; MR] = std::array::from_fn(|r| {
                let v = acc[half * MR + r];
                [_mm512_castps512_ps256(v), _mm512_extractf32x8_ps::<1>(v)]
            });
            store_tile(&rows, c.add(half * MR * ldc), ldc, accumulate, epilogue);
        }
    }
}
