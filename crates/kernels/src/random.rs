//! Counter-based random numbers (Philox-4x32-10): element `i` of a random tensor is a pure
//! function of (key, i), so results never depend on the number of threads or on the order
//! in which chunks are produced.
//!
//! ```
//! use spore_kernels::random::uniform;
//! let a = uniform(42, 5);
//! assert_eq!(a, uniform(42, 5));
//! assert!(a.iter().all(|&x| (0.0..1.0).contains(&x)));
//! ```

use rayon::prelude::*;

use crate::buffer::Element;

const M0: u64 = 0xD251_1F53;
const M1: u64 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// One Philox-4x32 block with 10 rounds.
pub fn philox(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut c, mut k) = (counter, key);
    for _ in 0..10 {
        let p0 = M0 * c[0] as u64;
        let p1 = M1 * c[2] as u64;
        c = [
            ((p1 >> 32) as u32) ^ c[1] ^ k[0],
            p1 as u32,
            ((p0 >> 32) as u32) ^ c[3] ^ k[1],
            p0 as u32,
        ];
        k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
    }
    c
}

fn key_words(key: u64) -> [u32; 2] {
    [key as u32, (key >> 32) as u32]
}

/// The `i`-th block of stream `stream` under `key`.
fn block(key: u64, i: u64, stream: u32, attempt: u32) -> [u32; 4] {
    philox(
        [i as u32, (i >> 32) as u32, stream, attempt],
        key_words(key),
    )
}

/// 24 random bits -> [0, 1) as f32 (exactly representable).
fn unit_f32(bits: u32) -> f32 {
    (bits >> 8) as f32 * (1.0 / (1u32 << 24) as f32)
}

/// 53 random bits -> [0, 1) as f64.
fn unit_f64(hi: u32, lo: u32) -> f64 {
    let bits = ((hi as u64) << 21) ^ (lo as u64 >> 11);
    (bits & ((1u64 << 53) - 1)) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// `f(0), f(1), ...` into a vector from the installed buffer pool (a compiled step's
/// random draws allocate nothing), in parallel for large `n`.
fn par_fill<T: Element>(n: usize, f: impl Fn(usize) -> T + Sync + Send) -> Vec<T> {
    let mut out = crate::arena::for_overwrite::<T>(n);
    if n < 1 << 14 {
        out.iter_mut().enumerate().for_each(|(i, x)| *x = f(i));
    } else {
        out.par_iter_mut().enumerate().for_each(|(i, x)| *x = f(i));
    }
    out
}

/// `n` uniform samples in [0, 1).
pub fn uniform(key: u64, n: usize) -> Vec<f32> {
    par_fill(n, |i| unit_f32(block(key, (i / 4) as u64, 0, 0)[i % 4]))
}

/// `n` uniform samples in [0, 1) with 53-bit resolution.
pub fn uniform_f64(key: u64, n: usize) -> Vec<f64> {
    par_fill(n, |i| {
        let b = block(key, (i / 2) as u64, 3, 0);
        let l = (i % 2) * 2;
        unit_f64(b[l], b[l + 1])
    })
}

/// A standard normal sample from one block (Box-Muller).
fn normal_from(b: [u32; 4]) -> f64 {
    let u1 = 1.0 - unit_f64(b[0], b[1]); // (0, 1]: log is finite
    let u2 = unit_f64(b[2], b[3]);
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// `n` standard normal samples.
pub fn normal(key: u64, n: usize) -> Vec<f64> {
    par_fill(n, |i| normal_from(block(key, i as u64, 1, 0)))
}

/// `n` standard normal samples truncated to [-2, 2] by resampling (each element retries on
/// its own counter sequence, so the result is still thread-count independent).
pub fn truncated_normal(key: u64, n: usize) -> Vec<f64> {
    truncated_normal_in(key, n, -2.0, 2.0)
}

/// `n` standard normal samples restricted to `[lo, hi]` by resampling. The caller keeps
/// the interval reachable (it must overlap [-6, 6], or resampling would not end).
pub fn truncated_normal_in(key: u64, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    par_fill(n, |i| {
        let mut attempt = 0u32;
        loop {
            let z = normal_from(block(key, i as u64, 2, attempt));
            if (lo..=hi).contains(&z) {
                return z;
            }
            attempt += 1;
        }
    })
}

/// Mixes a seed and a counter into a fresh key (SplitMix64 finaliser).
pub fn derive_key(seed: u64, counter: u64) -> u64 {
    let mut z = seed ^ counter.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
