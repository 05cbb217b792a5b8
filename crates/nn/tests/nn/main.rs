//! spore-nn's integration tests (one binary): layers and losses against frozen JAX
//! references, initializers, optimizers against their formulas, cells and naming,
//! PyNative vs Graph mode, the model zoo, and checkpoints.
//!
//! The execution mode and the global seed are process-wide, so every test takes
//! [`serial`] first.

mod amp;
mod amp_fused_step;
mod cells;
mod checkpoint_integrity;
mod checkpoints;
mod concurrency;
mod eager_norm;
mod graph_whole_ops;
mod init;
mod layers;
mod losses;
mod modes;
mod optim;
mod prepared_filters;
mod transformer_modes;
mod zoo;

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};

use spore_core::context::{ContextUpdate, Mode, set_context};
use spore_core::{Parameter, Tensor};
use spore_nn::checkpoint::{ParamDict, load_checkpoint};

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs tests one at a time in PyNative mode (a failed test may have left Graph mode on).
pub fn serial() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
    guard
}

/// Switches the global mode (restored to PyNative by the next `serial`).
pub fn set_mode(mode: Mode) {
    set_context(ContextUpdate::new().mode(mode)).unwrap();
}

pub fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The entries of a fixture file under `case/`, with the prefix removed.
pub fn fixture(file: &str, case: &str) -> ParamDict {
    static CACHE: OnceLock<Mutex<std::collections::HashMap<String, ParamDict>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    let all = cache
        .entry(file.to_string())
        .or_insert_with(|| load_checkpoint(fixture_path(file)).unwrap());
    let prefix = format!("{case}/");
    let out: ParamDict = all
        .iter()
        .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|k| (k.to_string(), v.clone())))
        .collect();
    assert!(!out.is_empty(), "no fixture entries for {case} in {file}");
    out
}

/// Asserts equal shapes and values within `tol` (relative to 1 + |expected|).
pub fn assert_close(actual: &Tensor, expected: &Tensor, tol: f64, what: &str) {
    assert_eq!(actual.shape(), expected.shape(), "{what}: shapes");
    let (a, e) = (actual.to_f64_vec().unwrap(), expected.to_f64_vec().unwrap());
    for (i, (x, y)) in a.iter().zip(&e).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}: element {i}: got {x}, expected {y}"
        );
    }
}

/// Bit-identical values.
pub fn assert_same(a: &Tensor, b: &Tensor, what: &str) {
    assert_eq!(a.tensor_type(), b.tensor_type(), "{what}: types");
    assert_eq!(
        a.to_f64_vec().unwrap(),
        b.to_f64_vec().unwrap(),
        "{what}: values differ"
    );
}

/// Snapshot of parameter values.
pub fn values(params: &[Parameter]) -> Vec<Tensor> {
    params.iter().map(|p| p.stored()).collect()
}

/// A deterministic batch: `randn` with an explicit seed (does not touch the global
/// generator) and labels `0..classes`.
pub fn batch(shape: &[usize], classes: usize, seed: u64) -> (Tensor, Tensor) {
    let x = Tensor::randn(shape, spore_core::DType::F32, Some(seed)).unwrap();
    let labels: Vec<i32> = (0..shape[0])
        .map(|i| ((i * 7 + seed as usize * 3) % classes) as i32)
        .collect();
    (x, Tensor::from_vec(labels, &[shape[0]]).unwrap())
}
