//! The IDX file format of the MNIST distribution (raw or gzipped): a big-endian magic
//! number `0x0000_08_NN` (unsigned bytes, NN dimensions), NN big-endian u32 sizes, then
//! the data.
//!
//! ```
//! use spore_data::idx::parse_idx;
//! let bytes = [0, 0, 8, 1, 0, 0, 0, 3, 7, 8, 9];
//! let a = parse_idx(&bytes, "labels").unwrap();
//! assert_eq!((a.dims.as_slice(), a.data.as_slice()), (&[3usize][..], &[7u8, 8, 9][..]));
//! ```

use std::io::Read;
use std::path::Path;

use spore_core::{Error, Result};

/// A decoded IDX array of unsigned bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdxArray {
    pub dims: Vec<usize>,
    pub data: Vec<u8>,
}

/// Parses IDX bytes; `name` is used in error messages (the file's path).
pub fn parse_idx(bytes: &[u8], name: &str) -> Result<IdxArray> {
    let bad = |what: String| Error::io(name, what);
    if bytes.len() < 4 {
        return Err(bad(format!(
            "truncated IDX header: {} bytes, need at least 4",
            bytes.len()
        )));
    }
    if bytes[0] != 0 || bytes[1] != 0 || bytes[2] != 0x08 {
        return Err(bad(format!(
            "wrong magic number {:02x}{:02x}{:02x}{:02x}: expected 000008NN (IDX of unsigned bytes)",
            bytes[0], bytes[1], bytes[2], bytes[3]
        )));
    }
    let rank = bytes[3] as usize;
    if rank == 0 {
        return Err(bad("IDX header declares 0 dimensions".into()));
    }
    let header = 4 + 4 * rank;
    if bytes.len() < header {
        return Err(bad(format!(
            "truncated IDX header: {} bytes, need {header}",
            bytes.len()
        )));
    }
    let dims: Vec<usize> = (0..rank)
        .map(|i| {
            u32::from_be_bytes([
                bytes[4 + 4 * i],
                bytes[5 + 4 * i],
                bytes[6 + 4 * i],
                bytes[7 + 4 * i],
            ]) as usize
        })
        .collect();
    let n = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| bad(format!("dimensions {dims:?} overflow")))?;
    let body = &bytes[header..];
    if body.len() != n {
        return Err(bad(format!(
            "{} data: header {dims:?} promises {n} bytes, file holds {}",
            if body.len() < n {
                "truncated"
            } else {
                "trailing"
            },
            body.len()
        )));
    }
    Ok(IdxArray {
        dims,
        data: body.to_vec(),
    })
}

/// Largest output per input byte of a deflate stream (its format's limit is about 1032:1),
/// with room for the gzip header. Why: a gzipped IDX header may promise any size; one
/// that promises more than its compressed bytes could hold is refused before its data is
/// allocated.
const MAX_GZIP_RATIO: usize = 1100;

/// Decodes an IDX file's bytes, raw or gzipped (by the gzip magic bytes); `name` is used
/// in error messages. A gzipped file is decompressed header first, so that the promised
/// size is checked against what the compressed bytes can hold before anything is
/// allocated for the data, and decompression stops at the promised size.
pub fn decode_idx(raw: &[u8], name: &str) -> Result<IdxArray> {
    if !raw.starts_with(&[0x1f, 0x8b]) {
        return parse_idx(raw, name);
    }
    let bad = |what: String| Error::io(name, what);
    let corrupt = |e: std::io::Error| bad(format!("corrupt gzip stream: {e}"));
    let mut stream = flate2::read::GzDecoder::new(raw);
    let mut header = [0u8; 4];
    stream
        .read_exact(&mut header)
        .map_err(|e| bad(format!("truncated IDX header inside the gzip stream: {e}")))?;
    let rank = header[3] as usize;
    let mut dims = vec![0u8; 4 * rank];
    stream
        .read_exact(&mut dims)
        .map_err(|e| bad(format!("truncated IDX header inside the gzip stream: {e}")))?;
    let promised = dims
        .chunks_exact(4)
        .try_fold(1usize, |acc, d| {
            acc.checked_mul(u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize)
        })
        .unwrap_or(usize::MAX);
    let capacity = raw.len().saturating_mul(MAX_GZIP_RATIO);
    if promised > capacity {
        return Err(bad(format!(
            "the IDX header promises {promised} bytes of data, more than {} compressed bytes can hold (truncated or corrupted file?)",
            raw.len()
        )));
    }
    let mut bytes = Vec::with_capacity(header.len() + dims.len() + promised);
    bytes.extend_from_slice(&header);
    bytes.extend_from_slice(&dims);
    // One byte more than promised, so that trailing data is seen by `parse_idx`.
    (&mut stream)
        .take(promised as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(corrupt)?;
    parse_idx(&bytes, name)
}

/// Reads an IDX file, gunzipping it when it starts with the gzip magic bytes.
pub fn read_idx(path: &Path) -> Result<IdxArray> {
    let raw = std::fs::read(path).map_err(|e| Error::io(path, format!("cannot read: {e}")))?;
    decode_idx(&raw, &path.display().to_string())
}
