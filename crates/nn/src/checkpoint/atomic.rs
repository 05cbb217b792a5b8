//! Writing a file so that a crash or `kill -9` at any moment leaves either the previous
//! file or the complete new one under the final name, never a part of one.
//!
//! ```
//! let dir = std::env::temp_dir().join(format!("spore_atomic_doc_{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("a.ckpt");
//! spore_nn::checkpoint::atomic::write_atomic(&path, b"new").unwrap();
//! assert_eq!(std::fs::read(&path).unwrap(), b"new");
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```
//!
//! How: the bytes go to a temporary file in the target's folder (a rename across file
//! systems is not atomic), which is synced, renamed over the target (an atomic step on
//! POSIX file systems), and the folder is synced so that the rename itself survives a
//! power loss. A process killed before the rename leaves only its temporary file
//! (`.<name>.tmp-<pid>-<n>`); the next save to the same target removes those of
//! processes that no longer run.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use spore_core::{Error, Result};

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

fn temp_prefix(file_name: &str) -> String {
    format!(".{file_name}.tmp-")
}

/// Writes `bytes` to `path` atomically (see the module's documentation).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir: PathBuf = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Some(file_name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Err(Error::io(path, "the checkpoint path has no file name"));
    };
    remove_orphans(&dir, &file_name);
    let tmp = dir.join(format!(
        "{}{}-{}",
        temp_prefix(&file_name),
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        #[cfg(unix)]
        if let Ok(d) = File::open(&dir) {
            // Best effort: some file systems refuse to sync a folder; the rename is done.
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(path, format!("cannot write the checkpoint: {e}")));
    }
    Ok(())
}

/// Removes temporary files for `file_name` left by processes that were killed mid-save.
/// Only on Linux, where `/proc/<pid>` tells whether the writer still runs; elsewhere
/// they stay (they are never read).
fn remove_orphans(dir: &Path, file_name: &str) {
    if !cfg!(target_os = "linux") {
        return;
    }
    let prefix = temp_prefix(file_name);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(&prefix)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let running = pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists();
        if !running {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
