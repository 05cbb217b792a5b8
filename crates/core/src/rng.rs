//! The global seed and seeded random tensor creation. Every draw takes a fresh key from
//! (seed, counter); each element is a pure function of its key and index (Philox), so a
//! seed reproduces the same numbers whatever the thread count.
//!
//! ```
//! use spore_core::{rng, Tensor, DType};
//! rng::set_seed(1);
//! let a = Tensor::randn(&[3], DType::F32, None).unwrap();
//! rng::set_seed(1);
//! let b = Tensor::randn(&[3], DType::F32, None).unwrap();
//! assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
//! ```

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use spore_kernels::{Buffer, DType, random};

use crate::error::{Error, Result};
use crate::tensor::Tensor;

static SEED: Mutex<u64> = Mutex::new(0);
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Sets the global seed and restarts the key sequence (MindSpore's `set_seed`).
pub fn set_seed(seed: u64) {
    if let Ok(mut s) = SEED.lock() {
        *s = seed;
    }
    COUNTER.store(0, Ordering::SeqCst);
}

pub fn get_seed() -> u64 {
    SEED.lock().map(|s| *s).unwrap_or(0)
}

/// A fresh key from the global generator.
pub fn next_key() -> u64 {
    random::derive_key(get_seed(), COUNTER.fetch_add(1, Ordering::SeqCst))
}

fn key_for(seed: Option<u64>) -> u64 {
    match seed {
        Some(s) => random::derive_key(s, u64::MAX),
        None => next_key(),
    }
}

#[track_caller]
fn float_tensor(values: Vec<f64>, shape: &[usize], dtype: DType, what: &str) -> Result<Tensor> {
    if !dtype.is_float() {
        return Err(Error::invalid_here(format!(
            "{what}: dtype must be Float32 or Float64, got {dtype}"
        )));
    }
    Tensor::from_buffer(Buffer::from_f64(dtype, &values), shape)
}

/// Elements of `shape`, after checking that its samples (drawn as f64 first) fit in memory.
#[track_caller]
fn sample_count(shape: &[usize], what: &str) -> Result<usize> {
    crate::memory::check(shape, DType::F64)
        .map_err(|m| Error::invalid_here(format!("{what}: {m}")))?;
    Ok(shape.iter().product())
}

impl Tensor {
    /// Uniform samples in [0, 1). `seed: None` draws from the global generator.
    #[track_caller]
    pub fn rand(shape: &[usize], dtype: DType, seed: Option<u64>) -> Result<Tensor> {
        let n = sample_count(shape, "rand")?;
        float_tensor(random::uniform_f64(key_for(seed), n), shape, dtype, "rand")
    }

    /// Standard normal samples.
    #[track_caller]
    pub fn randn(shape: &[usize], dtype: DType, seed: Option<u64>) -> Result<Tensor> {
        let n = sample_count(shape, "randn")?;
        float_tensor(random::normal(key_for(seed), n), shape, dtype, "randn")
    }

    /// Normal samples with standard deviation `sigma` and mean 0, kept within the absolute
    /// bounds [-2, 2]: MindSpore 2.x's `TruncatedNormal(sigma)` (and PyTorch's
    /// `trunc_normal_` defaults). For small `sigma` the bounds never bite.
    #[track_caller]
    pub fn truncated_normal(
        shape: &[usize],
        sigma: f64,
        dtype: DType,
        seed: Option<u64>,
    ) -> Result<Tensor> {
        Tensor::truncated_normal_in(shape, 0.0, sigma, -2.0, 2.0, dtype, seed)
    }

    /// Normal samples of `mean` and `sigma` kept within the absolute bounds `[lo, hi]`.
    #[track_caller]
    pub fn truncated_normal_in(
        shape: &[usize],
        mean: f64,
        sigma: f64,
        lo: f64,
        hi: f64,
        dtype: DType,
        seed: Option<u64>,
    ) -> Result<Tensor> {
        // The bounds in units of sigma; an empty or unreachable interval would resample forever.
        let (zl, zh) = ((lo - mean) / sigma, (hi - mean) / sigma);
        // Written so that NaN arguments fail the check too.
        let valid = sigma > 0.0 && sigma.is_finite() && lo < hi && zh >= -6.0 && zl <= 6.0;
        if !valid {
            return Err(Error::invalid_here(format!(
                "truncated_normal: need sigma > 0 and bounds [{lo}, {hi}] within 6 sigma of mean {mean}, got sigma {sigma}"
            )));
        }
        let n = sample_count(shape, "truncated_normal")?;
        let v = random::truncated_normal_in(key_for(seed), n, zl, zh)
            .into_iter()
            .map(|z| mean + z * sigma)
            .collect();
        float_tensor(v, shape, dtype, "truncated_normal")
    }
}
