//! float16 ↔ float32 conversions of whole slices on the CPU's conversion instructions:
//! AVX-512F's 16-lane `vcvtph2ps` / `vcvtps2ph`, or F16C's 8-lane forms on AVX2 CPUs,
//! chosen by [`crate::isa`]; below AVX2, the `half` crate's software conversions (which
//! `SPORE_MAX_ISA=baseline` thus tests on any machine). The bits are those
//! of `half`'s `f16::from_f32` and `f16::to_f32`: widening is exact, narrowing rounds to
//! nearest with ties to even (overflow to infinity, subnormals kept, a NaN made quiet
//! with its sign and upper payload).
//!
//! ```
//! use spore_kernels::{f16, f16_convert};
//! let wide = [1.0f32, 0.1, 65520.0, -0.0, 6.0e-8];
//! let mut narrow = [f16::ZERO; 5];
//! f16_convert::narrow(&wide, &mut narrow);
//! assert_eq!(narrow.map(f16::to_bits), wide.map(|v| f16::from_f32(v).to_bits()));
//! let mut back = [0.0f32; 5];
//! f16_convert::widen(&narrow, &mut back);
//! assert_eq!(back, narrow.map(f16::to_f32));
//! ```
//!
//! Why not `half`'s slice conversions: they call a function per eight values, and its
//! per-value conversions test the CPU on every call, which keeps any loop over them
//! scalar. Every float16 value of a mixed-precision step passes through these loops (in
//! and out of each kernel that computes in float32, and after each step of a float16
//! fused loop), where they cost more than the bfloat16 ones' shifts.

use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::isa::{Isa, allows};

/// `dst[i] = src[i]` as float32 (exact). The slices have equal lengths (checked in debug
/// builds; a release build converts the shorter length).
pub fn widen(src: &[f16], dst: &mut [f32]) {
    debug_assert_eq!(src.len(), dst.len(), "f16_convert::widen: lengths");
    let len = src.len().min(dst.len());
    let (src, dst) = (&src[..len], &mut dst[..len]);
    if !allows(Isa::Avx2) {
        dst.iter_mut()
            .zip(src)
            .for_each(|(d, s)| *d = s.to_f32_const());
        return;
    }
    let done = vector::widen(src, dst);
    src[done..].convert_to_f32_slice(&mut dst[done..]);
}

/// `dst[i] = src[i]` rounded to float16; lengths as in [`widen`].
pub fn narrow(src: &[f32], dst: &mut [f16]) {
    debug_assert_eq!(src.len(), dst.len(), "f16_convert::narrow: lengths");
    let len = src.len().min(dst.len());
    let (src, dst) = (&src[..len], &mut dst[..len]);
    if !allows(Isa::Avx2) {
        dst.iter_mut()
            .zip(src)
            .for_each(|(d, &s)| *d = f16::from_f32_const(s));
        return;
    }
    let done = vector::narrow(src, dst);
    dst[done..].convert_from_f32_slice(&src[done..]);
}

/// Each value rounded to the nearest float16 value, kept as float32: what storing it in
/// a float16 tensor and reading it back gives.
pub fn round_in_place(values: &mut [f32]) {
    if !allows(Isa::Avx2) {
        values
            .iter_mut()
            .for_each(|v| *v = f16::from_f32_const(*v).to_f32_const());
        return;
    }
    let done = vector::round_in_place(values);
    for v in &mut values[done..] {
        *v = f16::from_f32(*v).to_f32();
    }
}

/// The vector loops: each converts a prefix of whole vectors and returns its length,
/// leaving the rest to the caller (`half`'s per-value conversions, which use F16C where
/// the CPU has it: the same bits). Callers run them only where [`Isa::Avx2`] is allowed.
mod vector {
    use half::f16;

    use super::{Isa, allows};

    /// `$name(args)`: the 16-lane loop where AVX-512 is allowed, else the 8-lane one.
    macro_rules! widest_of {
        ($name:ident($($arg:ident: $ty:ty),*) => $wide:ident, $narrow:ident) => {
            pub(super) fn $name($($arg: $ty),*) -> usize {
                #[cfg(target_arch = "x86_64")]
                {
                    debug_assert!(allows(Isa::Avx2));
                    // SAFETY: the callers checked `Isa::Avx2` (AVX2, FMA and F16C); the
                    // 16-lane loop runs only where `Isa::Avx512` (AVX-512F) is allowed.
                    return unsafe {
                        if allows(Isa::Avx512) { x86::$wide($($arg),*) } else { x86::$narrow($($arg),*) }
                    };
                }
                #[allow(unreachable_code)]
                {
                    let _ = ($($arg),*);
                    0
                }
            }
        };
    }

    widest_of!(widen(src: &[f16], dst: &mut [f32]) => widen_512, widen_256);
    widest_of!(narrow(src: &[f32], dst: &mut [f16]) => narrow_512, narrow_256);
    widest_of!(round_in_place(values: &mut [f32]) => round_512, round_256);

    /// The loops themselves. Each reads and writes only whole vectors inside both slices
    /// (`len / LANES * LANES` values), with unaligned loads and stores.
    #[cfg(target_arch = "x86_64")]
    mod x86 {
        use std::arch::x86_64::*;

        use half::f16;

        /// Round to nearest (ties to even), as `half` and IEEE 754 do; AVX-512's form
        /// also raises no floating-point exceptions (F16C's immediate has no such bit).
        const NEAREST_512: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        const NEAREST_256: i32 = _MM_FROUND_TO_NEAREST_INT;

        #[target_feature(enable = "avx512f")]
        pub(super) fn widen_512(src: &[f16], dst: &mut [f32]) -> usize {
            let done = src.len().min(dst.len()) / 16 * 16;
            for i in (0..done).step_by(16) {
                // SAFETY: values i..i + 16 lie inside both slices (i + 16 <= done).
                unsafe {
                    let h = _mm256_loadu_si256(src.as_ptr().add(i).cast());
                    _mm512_storeu_ps(dst.as_mut_ptr().add(i), _mm512_cvtph_ps(h));
                }
            }
            done
        }

        #[target_feature(enable = "avx,f16c")]
        pub(super) fn widen_256(src: &[f16], dst: &mut [f32]) -> usize {
            let done = src.len().min(dst.len()) / 8 * 8;
            for i in (0..done).step_by(8) {
                // SAFETY: values i..i + 8 lie inside both slices.
                unsafe {
                    let h = _mm_loadu_si128(src.as_ptr().add(i).cast());
                    _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
                }
            }
            done
        }

        #[target_feature(enable = "avx512f")]
        pub(super) fn narrow_512(src: &[f32], dst: &mut [f16]) -> usize {
            let done = src.len().min(dst.len()) / 16 * 16;
            for i in (0..done).step_by(16) {
                // SAFETY: values i..i + 16 lie inside both slices.
                unsafe {
                    let v = _mm512_loadu_ps(src.as_ptr().add(i));
                    let h = _mm512_cvtps_ph::<NEAREST_512>(v);
                    _mm256_storeu_si256(dst.as_mut_ptr().add(i).cast(), h);
                }
            }
            done
        }

        #[target_feature(enable = "avx,f16c")]
        pub(super) fn narrow_256(src: &[f32], dst: &mut [f16]) -> usize {
            let done = src.len().min(dst.len()) / 8 * 8;
            for i in (0..done).step_by(8) {
                // SAFETY: values i..i + 8 lie inside both slices.
                unsafe {
                    let v = _mm256_loadu_ps(src.as_ptr().add(i));
                    let h = _mm256_cvtps_ph::<NEAREST_256>(v);
                    _mm_storeu_si128(dst.as_mut_ptr().add(i).cast(), h);
                }
            }
            done
        }

        #[target_feature(enable = "avx512f")]
        pub(super) fn round_512(values: &mut [f32]) -> usize {
            let done = values.len() / 16 * 16;
            for i in (0..done).step_by(16) {
                // SAFETY: values i..i + 16 lie inside the slice.
                unsafe {
                    let at = values.as_mut_ptr().add(i);
                    let h = _mm512_cvtps_ph::<NEAREST_512>(_mm512_loadu_ps(at));
                    _mm512_storeu_ps(at, _mm512_cvtph_ps(h));
                }
            }
            done
        }

        #[target_feature(enable = "avx,f16c")]
        pub(super) fn round_256(values: &mut [f32]) -> usize {
            let done = values.len() / 8 * 8;
            for i in (0..done).step_by(8) {
                // SAFETY: values i..i + 8 lie inside the slice.
                unsafe {
                    let at = values.as_mut_ptr().add(i);
                    let h = _mm256_cvtps_ph::<NEAREST_256>(_mm256_loadu_ps(at));
                    _mm256_storeu_ps(at, _mm256_cvtph_ps(h));
                }
            }
            done
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every float16 bit pattern widens as `half` widens it, whole vectors and tail.
    #[test]
    fn widening_every_float16_equals_half() {
        let all: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let mut wide = vec![0.0f32; all.len() + 3];
        // An odd length, so that a tail follows the vectors.
        widen(&all[3..], &mut wide[..all.len() - 3]);
        for (i, (&h, w)) in all[3..].iter().zip(&wide).enumerate() {
            assert_eq!(w.to_bits(), h.to_f32().to_bits(), "pattern {:#06x}", i + 3);
        }
    }

    /// float32 values of every class (normal, halfway cases, overflow, float16
    /// subnormals, float32 subnormals, infinities, NaNs with payloads) round as `half`
    /// rounds them, narrowed and in place.
    #[test]
    fn narrowing_equals_half_for_every_class() {
        let mut values: Vec<f32> = Vec::new();
        // Every 16th float32 exponent-and-mantissa pattern near float16's range and
        // below it, both signs: covers ties (low 13 bits 0x1000), overflow and subnormals.
        for high in (0x3000_0000u32..0x4800_0000).step_by(4093) {
            values.push(f32::from_bits(high));
            values.push(f32::from_bits(high | 0x8000_0000));
            values.push(f32::from_bits((high & !0x1fff) | 0x1000)); // a tie
        }
        values.extend([
            65504.0, 65519.99, 65520.0, 1e10, 5.96e-8, 2.98e-8, 2.99e-8, 1e-40, -1e-40,
        ]);
        values.extend([f32::INFINITY, f32::NEG_INFINITY, f32::MIN_POSITIVE]);
        values.extend([0x7fc0_0001u32, 0x7f80_2001, 0xffa0_0000].map(f32::from_bits));
        let want: Vec<u16> = values.iter().map(|&v| f16::from_f32(v).to_bits()).collect();
        let mut narrowed = vec![f16::ZERO; values.len()];
        narrow(&values, &mut narrowed);
        let mut rounded = values.clone();
        round_in_place(&mut rounded);
        for (i, (&v, &w)) in values.iter().zip(&want).enumerate() {
            assert_eq!(
                narrowed[i].to_bits(),
                w,
                "narrow {v:e} ({:#010x})",
                v.to_bits()
            );
            assert_eq!(
                rounded[i].to_bits(),
                f16::from_bits(w).to_f32().to_bits(),
                "round {v:e} ({:#010x})",
                v.to_bits()
            );
        }
    }
}
