//! TFRecord framing of event files: each record is its length (u64, little-endian), the
//! masked CRC-32C of the length, the bytes, and the masked CRC-32C of the bytes.
//!
//! ```
//! use spore_summary::event_file::{frame, masked_crc32c};
//! let r = frame(b"abc");
//! assert_eq!(r.len(), 8 + 4 + 3 + 4);
//! assert_eq!(&r[12..15], b"abc");
//! assert_eq!(u32::from_le_bytes(r[15..19].try_into().unwrap()), masked_crc32c(b"abc"));
//! ```

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use spore_core::{Error, Result};

/// TensorFlow's masking of a CRC-32C (so that a CRC of data holding CRCs stays strong).
pub fn masked_crc32c(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// One framed record.
pub fn frame(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
    out
}

/// An open event file, appended record by record.
pub struct EventFile {
    path: PathBuf,
    out: BufWriter<File>,
}

impl EventFile {
    /// Creates `dir/events.out.tfevents.<seconds>.<host>.<pid>.spore` (the prefix is what
    /// TensorBoard looks for).
    pub fn create(dir: &Path) -> Result<EventFile> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(dir, format!("cannot create the summary folder: {e}")))?;
        static OPENED: AtomicU64 = AtomicU64::new(0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
        // The process id and a counter keep two records opened in the same second
        // (two collectors, a quick rerun) in files of their own; `create_new` never
        // truncates an existing file.
        let name = format!(
            "events.out.tfevents.{}.{host}.{}.{}.spore",
            now.as_secs(),
            std::process::id(),
            OPENED.fetch_add(1, Ordering::Relaxed)
        );
        let path = dir.join(name);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io(&path, format!("cannot create the event file: {e}")))?;
        Ok(EventFile {
            path,
            out: BufWriter::new(file),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn write(&mut self, record: &[u8]) -> Result<()> {
        self.out
            .write_all(&frame(record))
            .map_err(|e| Error::io(&self.path, format!("cannot write: {e}")))
    }

    pub fn flush(&mut self) -> Result<()> {
        self.out
            .flush()
            .map_err(|e| Error::io(&self.path, format!("cannot write: {e}")))
    }
}
