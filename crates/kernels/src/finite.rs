//! Whether every value of a buffer is finite: the overflow check of a loss-scaled
//! training step, over all of its gradients at once.
//!
//! ```
//! use spore_kernels::{finite::all_finite, Buffer};
//! assert!(all_finite(&Buffer::F32(vec![1.0, -2.5, 0.0]), 0..3));
//! assert!(!all_finite(&Buffer::F32(vec![1.0, f32::NAN]), 0..2));
//! assert!(all_finite(&Buffer::F32(vec![1.0, f32::NAN]), 0..1)); // only the range counts
//! assert!(all_finite(&Buffer::I32(vec![i32::MAX]), 0..1)); // integers have no infinity
//! ```
//!
//! A value is not finite when all its exponent bits are set (an infinity or a NaN). The
//! loops test a block of values without stopping at each one, so that they vectorize,
//! and stop between blocks; large buffers are split among the threads.

use std::ops::Range;

use half::{bf16, f16};
use rayon::prelude::*;

use crate::buffer::Buffer;
use crate::widest::widest;

/// Values tested between two looks at the result: enough for the vector loop to run at
/// speed, few enough that an overflow early in a gradient ends the check soon.
const BLOCK: usize = 4096;

/// Values from which a check is split among the threads.
const PARALLEL_MIN: usize = 1 << 16;

/// Whether the values `range` of `buffer` are all finite (integer and boolean buffers
/// always are). `range` must lie inside the buffer.
pub fn all_finite(buffer: &Buffer, range: Range<usize>) -> bool {
    match buffer {
        Buffer::F32(v) => blocks_finite(&v[range], f32_block),
        Buffer::F64(v) => blocks_finite(&v[range], f64_block),
        Buffer::F16(v) => blocks_finite(&v[range], f16_block),
        Buffer::BF16(v) => blocks_finite(&v[range], bf16_block),
        Buffer::I32(_) | Buffer::I64(_) | Buffer::U8(_) | Buffer::Bool(_) => true,
    }
}

/// `block_has_non_finite` over [`BLOCK`]-sized blocks of `values`, on several threads
/// for large slices; false as soon as a block finds a value that is not finite.
fn blocks_finite<T: Sync>(values: &[T], block_has_non_finite: fn(&[T], &mut bool)) -> bool {
    let finite = |block: &[T]| {
        let mut found = false;
        block_has_non_finite(block, &mut found);
        !found
    };
    if values.len() >= PARALLEL_MIN {
        values.par_chunks(BLOCK).all(finite)
    } else {
        values.chunks(BLOCK).all(finite)
    }
}

/// `$name(values, found)`: whether some value of `values` has all the exponent bits
/// `$exponent` of its `$bits` pattern set, as an OR over the whole block (no early exit,
/// so that it vectorizes), compiled per vector width.
macro_rules! block_check {
    ($name:ident, $t:ty, $bits:ty, $exponent:expr) => {
        widest! {
            fn $name(values: &[$t], found: &mut bool) {
                const EXPONENT: $bits = $exponent;
                let hit = |v: &$t| <$bits>::from(v.to_bits() & EXPONENT == EXPONENT);
                *found = values.iter().fold(0, |any, v| any | hit(v)) != 0;
            }
        }
    };
}

block_check!(f32_block, f32, u32, 0x7f80_0000);
block_check!(f64_block, f64, u64, 0x7ff0_0000_0000_0000);
block_check!(f16_block, f16, u16, 0x7c00);
block_check!(bf16_block, bf16, u16, 0x7f80);

#[cfg(test)]
mod tests {
    use super::*;

    /// Every float16 and bfloat16 pattern, alone among finite values at one of several
    /// places (first, inside a block, at a block's end, in the tail), is reported as
    /// `is_finite` says; float32 for every exponent, float64's classes, and a buffer
    /// large enough to be split among the threads.
    #[test]
    fn one_non_finite_value_anywhere_is_found() {
        let at = [0usize, 17, 4095, 4096 + 37, 4999];
        let len = 5000;
        for bits in 0..=u16::MAX {
            let pos = at[bits as usize % at.len()];
            let mut h = vec![f16::ONE; len];
            h[pos] = f16::from_bits(bits);
            let want = f16::from_bits(bits).is_finite();
            assert_eq!(all_finite(&Buffer::F16(h), 0..len), want, "f16 {bits:#06x}");
            let mut b = vec![bf16::ONE; len];
            b[pos] = bf16::from_bits(bits);
            let b = Buffer::BF16(b);
            let want = bf16::from_bits(bits).is_finite();
            assert_eq!(all_finite(&b, 0..len), want, "bf16 {bits:#06x}");
            // Outside the range, the value does not count.
            assert!(all_finite(&b, pos + 1..len));
        }
        for exponent in 0..=255u32 {
            let v = f32::from_bits(exponent << 23 | 5);
            let mut x = vec![1.0f32; len];
            x[at[exponent as usize % at.len()]] = v;
            assert_eq!(
                all_finite(&Buffer::F32(x), 0..len),
                v.is_finite(),
                "f32 {v}"
            );
        }
        for v in [
            f64::INFINITY,
            f64::NAN,
            -f64::INFINITY,
            f64::MAX,
            f64::MIN_POSITIVE / 2.0,
        ] {
            let mut x = vec![1.0f64; len];
            x[len - 1] = v;
            assert_eq!(
                all_finite(&Buffer::F64(x), 0..len),
                v.is_finite(),
                "f64 {v}"
            );
        }
        let mut large = vec![0.5f32; 3 * PARALLEL_MIN + 11];
        assert!(all_finite(&Buffer::F32(large.clone()), 0..large.len()));
        let last = large.len() - 1;
        large[last] = f32::NEG_INFINITY;
        assert!(!all_finite(&Buffer::F32(large), 0..last + 1));
        assert!(all_finite(&Buffer::F32(vec![]), 0..0));
    }
}
