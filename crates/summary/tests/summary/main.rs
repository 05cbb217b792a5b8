//! Event files read back by TensorBoard's own reader (`read_events.py`, which needs the
//! `tensorboard` package; `scripts/test.sh` installs it).

mod record;

use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh, empty temporary folder for one test.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spore_summary_{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// What TensorBoard's reader finds in `dir`, as JSON.
pub fn tensorboard_read(dir: &Path) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/read_events.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(dir)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "TensorBoard's reader failed (is the tensorboard package installed? scripts/test.sh installs it):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the reader prints JSON")
}
