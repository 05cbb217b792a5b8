//! The Print operator's output: the screen, or with `print_file_path` set in the context, a
//! binary file (if the file already exists a timestamp suffix is added, as MindSpore does)
//! that [`parse_print`] turns back into text.
//!
//! File format: `SPOREPRT` once, then per print call a `u32` argument count and per
//! argument a tag byte (0 text: `u32` length + UTF-8; 1 tensor: `u64` length + `.npy`).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::npy;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The first bytes of every print file.
pub const MAGIC: &[u8] = b"SPOREPRT";

/// One printed argument.
#[derive(Clone, Debug)]
pub enum PrintValue {
    Text(String),
    Tensor(Tensor),
}

impl std::fmt::Display for PrintValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PrintValue::Text(s) => f.write_str(s),
            PrintValue::Tensor(t) => write!(f, "{t}"),
        }
    }
}

struct PrintFile {
    requested: PathBuf,
    actual: PathBuf,
    out: BufWriter<File>,
}

static FILE: Mutex<Option<PrintFile>> = Mutex::new(None);

/// The file a `print_file_path` resolves to: itself, or with a timestamp suffix when it
/// already exists.
fn resolve(requested: &Path) -> PathBuf {
    if !requested.exists() {
        return requested.to_path_buf();
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    PathBuf::from(format!("{}_{stamp}", requested.display()))
}

/// One print call's record as it is appended to a print file (after the file's
/// `SPOREPRT` magic, written once).
pub fn encode(values: &[PrintValue]) -> Result<Vec<u8>> {
    let mut out = (values.len() as u32).to_le_bytes().to_vec();
    for v in values {
        match v {
            PrintValue::Text(s) => {
                out.push(0);
                out.extend((s.len() as u32).to_le_bytes());
                out.extend(s.as_bytes());
            }
            PrintValue::Tensor(t) => {
                let b = npy::encode(t)?;
                out.push(1);
                out.extend((b.len() as u64).to_le_bytes());
                out.extend(b);
            }
        }
    }
    Ok(out)
}

/// Emits one print call: to the screen, or appended to the context's print file.
pub fn emit(values: &[PrintValue]) -> Result<()> {
    let Some(requested) = crate::context::get_context().print_file_path else {
        let text: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        println!("{}", text.join("\n"));
        return Ok(());
    };
    let mut guard = FILE
        .lock()
        .map_err(|_| Error::invalid("print file lock poisoned"))?;
    if guard.as_ref().is_none_or(|f| f.requested != requested) {
        let actual = resolve(&requested);
        let mut out = BufWriter::new(
            File::create(&actual)
                .map_err(|e| Error::io(&actual, format!("cannot create the print file: {e}")))?,
        );
        out.write_all(MAGIC).map_err(|e| Error::io(&actual, e))?;
        *guard = Some(PrintFile {
            requested,
            actual,
            out,
        });
    }
    let Some(f) = guard.as_mut() else {
        return Ok(());
    };
    f.out
        .write_all(&encode(values)?)
        .map_err(|e| Error::io(&f.actual, e))?;
    // Flush per call: a crash must not lose what was already printed.
    f.out.flush().map_err(|e| Error::io(&f.actual, e))
}

/// The file the current `print_file_path` is writing to (after the suffix rule).
pub fn current_print_file() -> Option<PathBuf> {
    FILE.lock()
        .ok()
        .and_then(|g| g.as_ref().map(|f| f.actual.clone()))
}

/// Reads a print file back: one entry per print call.
pub fn parse_print(path: impl AsRef<Path>) -> Result<Vec<Vec<PrintValue>>> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, format!("cannot read: {e}")))?;
    parse_print_bytes(&bytes, &path.display().to_string())
}

/// [`parse_print`] of a file's bytes; `name` (its origin) is used in errors.
pub fn parse_print_bytes(bytes: &[u8], name: &str) -> Result<Vec<Vec<PrintValue>>> {
    let bad = |m: &str| Error::io(name, format!("not a valid Spore print file: {m}"));
    if !bytes.starts_with(MAGIC) {
        return Err(bad("missing SPOREPRT header"));
    }
    let mut file = Cursor {
        bytes,
        at: MAGIC.len(),
    };
    let mut calls = vec![];
    while !file.at_end() {
        let count = u32::from_le_bytes(file.array().map_err(|m| bad(&m))?);
        let mut values = vec![];
        for _ in 0..count {
            match file.take(1).map_err(|m| bad(&m))?[0] {
                0 => {
                    let n = u32::from_le_bytes(file.array().map_err(|m| bad(&m))?) as usize;
                    let text = file.take(n).map_err(|m| bad(&m))?;
                    values.push(PrintValue::Text(String::from_utf8_lossy(text).into_owned()));
                }
                1 => {
                    let n = u64::from_le_bytes(file.array().map_err(|m| bad(&m))?);
                    let n = usize::try_from(n).map_err(|_| bad("tensor length overflows"))?;
                    let npy_bytes = file.take(n).map_err(|m| bad(&m))?;
                    let tensor = npy::decode(npy_bytes).map_err(|e| bad(&e.to_string()))?;
                    values.push(PrintValue::Tensor(tensor));
                }
                t => return Err(bad(&format!("unknown tag {t}"))),
            }
        }
        calls.push(values);
    }
    Ok(calls)
}

/// Reads a print file front to back; lengths come from the file, so every end is
/// computed checked.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn at_end(&self) -> bool {
        self.at >= self.bytes.len()
    }

    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(format!(
                "truncated: {n} bytes wanted at offset {}, the file has {}",
                self.at,
                self.bytes.len()
            ));
        };
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> std::result::Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
}

/// A print file as the text the screen would have shown.
pub fn parse_print_text(path: impl AsRef<Path>) -> Result<String> {
    let calls = parse_print(path)?;
    Ok(calls
        .iter()
        .map(|c| {
            c.iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join("\n")
                + "\n"
        })
        .collect())
}
