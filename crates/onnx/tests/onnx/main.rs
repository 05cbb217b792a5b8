//! Spore's ONNX import against onnxruntime on the fixtures of `fixtures.py`, and exported
//! Spore networks checked by `onnx.checker` and run by onnxruntime (`check_export.py`).
//! Both scripts need the `onnx` and `onnxruntime` packages (scripts/test.sh installs them).

mod errors;
mod export;
mod import;

use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh, empty temporary folder for one test.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spore_onnx_{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs one of the Python scripts beside this test.
pub fn python(script: &str, args: &[&Path]) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(script);
    let out = Command::new("python3")
        .arg(&path)
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{script} failed (needs the onnx and onnxruntime packages; scripts/test.sh installs them):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn read_npy(path: &Path) -> spore_core::Tensor {
    spore_core::debug::npy::decode(&std::fs::read(path).unwrap()).unwrap()
}

/// Gives every BatchNorm layer of `net` non-trivial moving statistics (fresh layers hold
/// 0 and 1, which would hide a mix-up between them).
pub fn randomise_moving_statistics<C: spore_nn::cell::Cell + ?Sized>(net: &C) {
    use spore_nn::cell::CellExt;
    for (k, (name, p)) in net.parameters_and_names().into_iter().enumerate() {
        let shape = p.tensor_type().shape.to_vec();
        let noise =
            spore_core::Tensor::rand(&shape, spore_core::DType::F32, Some(40 + k as u64)).unwrap();
        if name.ends_with("moving_mean") {
            p.assign(&noise.sub_scalar(0.5).unwrap()).unwrap();
        } else if name.ends_with("moving_variance") {
            p.assign(&noise.add_scalar(0.5).unwrap()).unwrap();
        }
    }
}
