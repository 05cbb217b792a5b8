//! The pipeline's random numbers: a SplitMix64 stream, and [`mix`] to derive independent
//! seeds from (seed, epoch, row index) so that every random choice is a pure function of
//! where it happens, never of which thread got there first.
//!
//! ```
//! use spore_data::rng::{mix, Rng};
//! let mut a = Rng::new(mix(42, 7));
//! let mut b = Rng::new(mix(42, 7));
//! assert_eq!(a.next_u64(), b.next_u64());
//! assert!(a.below(10) < 10);
//! ```

/// SplitMix64's output function: a bijective avalanche of a 64-bit value.
fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// Combines a seed with a value (an epoch, a row index, a salt) into a new seed.
/// Hashing both sides keeps `mix(s, 1)` and `mix(s + 1, 0)` unrelated.
pub fn mix(seed: u64, value: u64) -> u64 {
    finalize(finalize(seed.wrapping_add(GOLDEN)) ^ value.wrapping_mul(GOLDEN))
}

/// A small, fast generator (SplitMix64). Statistical quality is ample for shuffling and
/// augmentation choices; it is not for cryptography.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN);
        finalize(self.state)
    }

    /// A uniform integer in `0..n` (0 when `n == 0`), without modulo bias (Lemire's
    /// multiply-and-reject).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = (self.next_u64() as u128) * (n as u128);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// A uniform float in `[0, 1)` with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Fisher-Yates shuffle.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}
