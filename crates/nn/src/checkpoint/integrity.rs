//! Checksums that make a corrupted checkpoint an error instead of silently wrong weights
//! (MindSpore's `crc_check`).
//!
//! ```
//! use std::collections::HashMap;
//! use spore_nn::checkpoint::integrity::{HEADER_KEY, tensor_key};
//! assert_eq!(tensor_key("conv1.weight"), "crc32:conv1.weight");
//! assert_eq!(HEADER_KEY, "crc32_header");
//! ```
//!
//! A checkpoint is a safetensors file. Spore adds to its string metadata, beside
//! `"format": "spore"`:
//! - `crc32:<tensor name>`: the CRC-32 (IEEE, as zlib and MindSpore compute it) of the
//!   tensor's little-endian bytes, as 8 lowercase hex digits;
//! - `crc32_header`: the CRC-32 of the tensor table (every name, dtype and shape, in name
//!   order) and of every other metadata entry, so that a flipped shape digit or a
//!   renamed tensor is caught as well.
//!
//! The data offsets need no checksum: safetensors itself checks that they are contiguous,
//! match each shape and cover the file exactly. Files written by other tools carry none
//! of these keys and load as before; when the keys are present they are always checked.

use std::collections::HashMap;

use safetensors::SafeTensors;
use safetensors::tensor::Dtype;

/// Metadata key of the tensor table's checksum.
pub const HEADER_KEY: &str = "crc32_header";

const TENSOR_PREFIX: &str = "crc32:";

/// Metadata key of tensor `name`'s checksum.
pub fn tensor_key(name: &str) -> String {
    format!("{TENSOR_PREFIX}{name}")
}

fn is_checksum_key(key: &str) -> bool {
    key == HEADER_KEY || key.starts_with(TENSOR_PREFIX)
}

fn hex(crc: u32) -> String {
    format!("{crc:08x}")
}

/// The checksum of the tensor table and of the metadata entries that are not checksums.
/// Each field is written with its length, so that no two tables give the same text.
pub(crate) fn header_checksum<'a>(
    tensors: impl IntoIterator<Item = (&'a str, Dtype, &'a [usize])>,
    metadata: &HashMap<String, String>,
) -> u32 {
    let mut table: Vec<(&str, Dtype, &[usize])> = tensors.into_iter().collect();
    table.sort_by(|a, b| a.0.cmp(b.0));
    let mut entries: Vec<(&String, &String)> = metadata
        .iter()
        .filter(|(k, _)| !is_checksum_key(k))
        .collect();
    entries.sort();
    let mut h = crc32fast::Hasher::new();
    let mut field = |bytes: &[u8]| {
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    for (name, dtype, shape) in table {
        field(name.as_bytes());
        field(format!("{dtype:?}").as_bytes());
        let dims: Vec<u8> = shape
            .iter()
            .flat_map(|d| (*d as u64).to_le_bytes())
            .collect();
        field(&dims);
    }
    for (k, v) in entries {
        field(k.as_bytes());
        field(v.as_bytes());
    }
    h.finalize()
}

/// Adds the checksums of `tensors` (name, dtype, shape, little-endian bytes) to `metadata`.
pub(crate) fn add_checksums<'a>(
    tensors: impl IntoIterator<Item = (&'a str, Dtype, &'a [usize], &'a [u8])> + Clone,
    metadata: &mut HashMap<String, String>,
) {
    let header = header_checksum(
        tensors.clone().into_iter().map(|(n, d, s, _)| (n, d, s)),
        metadata,
    );
    for (name, _, _, bytes) in tensors {
        metadata.insert(tensor_key(name), hex(crc32fast::hash(bytes)));
    }
    metadata.insert(HEADER_KEY.to_string(), hex(header));
}

/// What a file's checksums say.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every tensor and the table match their checksums.
    Intact,
    /// The file carries no checksums (written by another tool, or with `crc_check` off).
    Unchecked,
}

/// Checks every checksum `st` carries. `Err` names what does not match: the tensor, or
/// the table; the caller adds the file's path.
pub(crate) fn verify(
    st: &SafeTensors<'_>,
    metadata: Option<&HashMap<String, String>>,
) -> Result<Verdict, String> {
    let Some(metadata) = metadata.filter(|m| m.keys().any(|k| is_checksum_key(k))) else {
        return Ok(Verdict::Unchecked);
    };
    let stored = |key: &str, what: &str| -> Result<u32, String> {
        let text = metadata.get(key).ok_or_else(|| {
            format!("{what} has no checksum although the file carries checksums (its header was altered)")
        })?;
        u32::from_str_radix(text, 16)
            .ok()
            .filter(|_| text.len() == 8)
            .ok_or_else(|| {
                format!("{what}'s checksum {text:?} is not 8 hex digits (the header is corrupted)")
            })
    };
    let tensors = st.tensors();
    let want = stored(HEADER_KEY, "the tensor table")?;
    let got = header_checksum(
        tensors
            .iter()
            .map(|(n, v)| (n.as_str(), v.dtype(), v.shape())),
        metadata,
    );
    if got != want {
        return Err(format!(
            "the tensor table (names, dtypes, shapes) fails its CRC-32 check: stored {}, computed {}; the header is corrupted",
            hex(want),
            hex(got)
        ));
    }
    let mut names: Vec<&str> = tensors.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    for (name, view) in &tensors {
        let want = stored(&tensor_key(name), &format!("tensor {name:?}"))?;
        let got = crc32fast::hash(view.data());
        if got != want {
            return Err(format!(
                "tensor {name:?} fails its CRC-32 check: stored {}, computed {}; its data is corrupted",
                hex(want),
                hex(got)
            ));
        }
    }
    // A checksum for a tensor the table lacks means the table lost an entry.
    for key in metadata
        .keys()
        .filter_map(|k| k.strip_prefix(TENSOR_PREFIX))
    {
        if names.binary_search(&key).is_err() {
            return Err(format!(
                "the header names a checksum for tensor {key:?}, which the file does not hold; the header is corrupted"
            ));
        }
    }
    Ok(Verdict::Intact)
}
