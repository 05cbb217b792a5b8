//! NumPy `.npy` (format 1.0) writing and reading for dumped tensors.
//!
//! ```
//! use spore_core::{debug::npy, Tensor};
//! let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
//! let bytes = npy::encode(&t).unwrap();
//! assert!(bytes.starts_with(b"\x93NUMPY"));
//! assert_eq!(npy::decode(&bytes).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
//! ```

use spore_kernels::{Buffer, DType};

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The `.npy` bytes of a concrete tensor (C order, little-endian).
pub fn encode(t: &Tensor) -> Result<Vec<u8>> {
    let Some(s) = t.storage() else {
        return Err(Error::invalid("npy: cannot write a symbolic tensor"));
    };
    let data = spore_kernels::elementwise::copy(&s.buffer, &s.layout);
    let shape = match t.shape() {
        [] => "()".to_string(),
        [n] => format!("({n},)"),
        dims => format!(
            "({})",
            dims.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        t.dtype().numpy_descr()
    );
    // Pad so that magic (6) + version (2) + length (2) + header ends on a 64-byte boundary.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + t.numel() * t.dtype().size_in_bytes());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    match &data {
        Buffer::F32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Buffer::F64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Buffer::I32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Buffer::I64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Buffer::F16(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Buffer::BF16(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        Buffer::U8(v) => out.extend_from_slice(v),
        Buffer::Bool(v) => out.extend(v.iter().map(|&b| b as u8)),
    }
    Ok(out)
}

/// Reads `.npy` bytes written by [`encode`] (or NumPy, for the dtypes Spore has).
pub fn decode(bytes: &[u8]) -> Result<Tensor> {
    let bad = |m: &str| Error::invalid(format!("npy: {m}"));
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad("not an .npy file (bad magic)"));
    }
    let (hlen, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(bad(&format!("unsupported version {v}"))),
    };
    let header = std::str::from_utf8(
        bytes
            .get(start..start + hlen)
            .ok_or_else(|| bad("truncated header"))?,
    )
    .map_err(|_| bad("header is not text"))?;
    let field = |key: &str| -> Option<&str> {
        let i = header.find(&format!("'{key}'"))? + key.len() + 2;
        Some(header[i..].trim_start_matches([':', ' ']))
    };
    let descr = field("descr")
        .and_then(|d| d.split('\'').nth(1))
        .ok_or_else(|| bad("no descr"))?;
    let dtype = DType::ALL
        .into_iter()
        .find(|d| d.numpy_descr() == descr)
        .ok_or_else(|| bad(&format!("unsupported dtype {descr}")))?;
    if field("fortran_order").is_some_and(|f| f.starts_with("True")) {
        return Err(bad("Fortran-ordered arrays are not supported"));
    }
    let shape_text = field("shape")
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| bad("no shape"))?;
    let shape: Vec<usize> = shape_text
        .trim_start_matches('(')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse()
                .map_err(|_| bad(&format!("bad shape entry {s:?}")))
        })
        .collect::<Result<_>>()?;
    let body = &bytes[start + hlen..];
    let size = dtype.size_in_bytes();
    let expected = shape
        .iter()
        .try_fold(size, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            bad(&format!(
                "shape {shape:?} of {dtype} overflows the address space"
            ))
        })?;
    if body.len() != expected {
        return Err(bad(&format!(
            "expected {expected} data bytes for {shape:?} {dtype}, found {}",
            body.len()
        )));
    }
    let chunks = body.chunks_exact(size);
    let buffer = match dtype {
        DType::F32 => Buffer::F32(
            chunks
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        DType::F64 => Buffer::F64(
            chunks
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
        ),
        DType::I32 => Buffer::I32(
            chunks
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        DType::I64 => Buffer::I64(
            chunks
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
        ),
        DType::F16 => Buffer::F16(
            chunks
                .map(|c| spore_kernels::f16::from_le_bytes([c[0], c[1]]))
                .collect(),
        ),
        DType::BF16 => Buffer::BF16(
            chunks
                .map(|c| spore_kernels::bf16::from_le_bytes([c[0], c[1]]))
                .collect(),
        ),
        DType::U8 => Buffer::U8(body.to_vec()),
        DType::Bool => Buffer::Bool(body.iter().map(|&b| b != 0).collect()),
    };
    Tensor::from_buffer(buffer, &shape)
}
