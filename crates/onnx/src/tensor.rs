//! ONNX tensors and attributes to Spore: `TensorProto` (raw or typed data, inline or in
//! an external file next to the model) to `Tensor`, and typed attribute lookups that
//! name the node when they fail.
//!
//! ```
//! use spore_onnx::proto::TensorProto;
//! use spore_onnx::tensor::to_tensor;
//! let t = TensorProto { dims: vec![2], data_type: 1, float_data: vec![1.5, -2.0], ..Default::default() };
//! assert_eq!(to_tensor(&t, None).unwrap().to_vec::<f32>().unwrap(), vec![1.5, -2.0]);
//! ```

use std::path::Path;

use spore_core::{DType, Error, Result, Tensor, bf16, f16};

use crate::proto::{AttributeProto, NodeProto, TensorProto};

/// ONNX's element type numbers (`TensorProto.DataType`).
pub mod data_type {
    pub const FLOAT: i32 = 1;
    pub const UINT8: i32 = 2;
    pub const INT32: i32 = 6;
    pub const INT64: i32 = 7;
    pub const BOOL: i32 = 9;
    pub const FLOAT16: i32 = 10;
    pub const DOUBLE: i32 = 11;
    pub const BFLOAT16: i32 = 16;
}

/// The Spore dtype of an ONNX element type.
pub fn dtype_of(t: i32) -> Result<DType> {
    Ok(match t {
        data_type::FLOAT => DType::F32,
        data_type::DOUBLE => DType::F64,
        data_type::FLOAT16 => DType::F16,
        data_type::BFLOAT16 => DType::BF16,
        data_type::INT32 => DType::I32,
        data_type::INT64 => DType::I64,
        data_type::UINT8 => DType::U8,
        data_type::BOOL => DType::Bool,
        other => {
            return Err(Error::invalid(format!(
                "onnx: element type {other} is not supported (float32, float64, float16, bfloat16, int32, int64, uint8, bool are)"
            )));
        }
    })
}

/// The ONNX element type of a Spore dtype.
pub fn onnx_type(d: DType) -> Result<i32> {
    Ok(match d {
        DType::F32 => data_type::FLOAT,
        DType::F64 => data_type::DOUBLE,
        DType::F16 => data_type::FLOAT16,
        DType::BF16 => data_type::BFLOAT16,
        DType::I32 => data_type::INT32,
        DType::I64 => data_type::INT64,
        DType::U8 => data_type::UINT8,
        DType::Bool => data_type::BOOL,
    })
}

/// 16-bit values from their bit patterns in `int32_data` (the low 16 bits of each).
fn bits<T>(data: &[i32], from_bits: fn(u16) -> T) -> Vec<T> {
    data.iter().map(|&x| from_bits(x as u16)).collect()
}

fn chunks<const N: usize>(raw: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    raw.chunks_exact(N).map(|c| {
        let mut a = [0u8; N];
        a.copy_from_slice(c);
        a
    })
}

/// The bytes of an external tensor (`location`, `offset`, `length`), relative to `dir`.
fn external(t: &TensorProto, dir: Option<&Path>) -> Result<Vec<u8>> {
    let get = |k: &str| {
        t.external_data
            .iter()
            .find(|e| e.key == k)
            .map(|e| e.value.clone())
    };
    let location = get("location").ok_or_else(|| {
        Error::invalid(format!(
            "onnx: tensor {:?} is external but names no location",
            t.name
        ))
    })?;
    if Path::new(&location).is_absolute() || location.contains("..") {
        return Err(Error::invalid(format!(
            "onnx: tensor {:?}: external data must be a file beside the model, got {location:?}",
            t.name
        )));
    }
    let dir = dir.ok_or_else(|| {
        Error::invalid(format!(
            "onnx: tensor {:?} keeps its data in {location:?}; load the model from its file",
            t.name
        ))
    })?;
    let path = dir.join(&location);
    let bytes = std::fs::read(&path)
        .map_err(|e| Error::io(&path, format!("cannot read external tensor data: {e}")))?;
    let num = |k: &str| -> Result<Option<usize>> {
        get(k)
            .map(|v| {
                v.parse::<usize>().map_err(|_| {
                    Error::invalid(format!(
                        "onnx: tensor {:?}: external {k} {v:?} is not a number",
                        t.name
                    ))
                })
            })
            .transpose()
    };
    let offset = num("offset")?.unwrap_or(0);
    let length = num("length")?.unwrap_or(bytes.len().saturating_sub(offset));
    bytes
        .get(offset..offset.saturating_add(length))
        .map(|b| b.to_vec())
        .ok_or_else(|| {
            Error::io(
                &path,
                format!(
                    "tensor {:?}: bytes {offset}..{} are past the file's end ({})",
                    t.name,
                    offset + length,
                    bytes.len()
                ),
            )
        })
}

/// A `TensorProto` as a Spore tensor; `dir` is the model's folder, for external data.
pub fn to_tensor(t: &TensorProto, dir: Option<&Path>) -> Result<Tensor> {
    let shape: Vec<usize> = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| {
            Error::invalid(format!(
                "onnx: tensor {:?} has a negative dimension {:?}",
                t.name, t.dims
            ))
        })?;
    let numel = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| {
            Error::invalid(format!(
                "onnx: tensor {:?} of shape {shape:?} is too large",
                t.name
            ))
        })?;
    let raw = if t.data_location == 1 {
        external(t, dir)?
    } else {
        t.raw_data.clone()
    };
    let dtype = dtype_of(t.data_type)?;
    let wrong = |n: usize| {
        Error::invalid(format!(
            "onnx: tensor {:?} of shape {shape:?} holds {n} values, expected {numel}",
            t.name
        ))
    };
    macro_rules! build {
        ($ty:ty, $n:expr, $typed:expr) => {{
            let v: Vec<$ty> = if raw.is_empty() {
                $typed
            } else {
                chunks::<$n>(&raw).map(<$ty>::from_le_bytes).collect()
            };
            if v.len() != numel {
                return Err(wrong(v.len()));
            }
            Tensor::from_vec(v, &shape)
        }};
    }
    match dtype {
        DType::F32 => build!(f32, 4, t.float_data.clone()),
        DType::F64 => build!(f64, 8, t.double_data.clone()),
        // Typed 16-bit values are their bit patterns, one per `int32_data` entry.
        DType::F16 => build!(f16, 2, bits(&t.int32_data, f16::from_bits)),
        DType::BF16 => build!(bf16, 2, bits(&t.int32_data, bf16::from_bits)),
        DType::I64 => build!(i64, 8, t.int64_data.clone()),
        DType::I32 => build!(i32, 4, t.int32_data.clone()),
        DType::U8 => {
            let v: Vec<u8> = if raw.is_empty() {
                t.int32_data.iter().map(|&x| x as u8).collect()
            } else {
                raw.clone()
            };
            if v.len() != numel {
                return Err(wrong(v.len()));
            }
            Tensor::from_vec(v, &shape)
        }
        DType::Bool => {
            let v: Vec<bool> = if raw.is_empty() {
                t.int32_data.iter().map(|&x| x != 0).collect()
            } else {
                raw.iter().map(|&b| b != 0).collect()
            };
            if v.len() != numel {
                return Err(wrong(v.len()));
            }
            Tensor::from_vec(v, &shape)
        }
    }
}

/// A Spore tensor as a `TensorProto` (little-endian raw data).
pub fn from_tensor(name: &str, t: &Tensor) -> Result<TensorProto> {
    let raw: Vec<u8> = match t.dtype() {
        DType::F32 => t
            .to_vec::<f32>()?
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::F64 => t
            .to_vec::<f64>()?
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::F16 => t
            .to_vec::<f16>()?
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::BF16 => t
            .to_vec::<bf16>()?
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::I32 => t
            .to_vec::<i32>()?
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::I64 => t
            .to_vec::<i64>()?
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::U8 => t.to_vec::<u8>()?,
        DType::Bool => t.to_vec::<bool>()?.iter().map(|&b| b as u8).collect(),
    };
    Ok(TensorProto {
        name: name.to_string(),
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: onnx_type(t.dtype())?,
        raw_data: raw,
        ..Default::default()
    })
}

/// Typed attribute lookups on a node.
pub struct Attrs<'a> {
    node: &'a NodeProto,
}

impl<'a> Attrs<'a> {
    pub fn of(node: &'a NodeProto) -> Attrs<'a> {
        Attrs { node }
    }

    fn find(&self, name: &str) -> Option<&'a AttributeProto> {
        self.node.attribute.iter().find(|a| a.name == name)
    }

    pub fn int(&self, name: &str, default: i64) -> i64 {
        self.find(name).map_or(default, |a| a.i)
    }

    pub fn float(&self, name: &str, default: f32) -> f32 {
        self.find(name).map_or(default, |a| a.f)
    }

    pub fn ints(&self, name: &str) -> Option<Vec<i64>> {
        self.find(name).map(|a| a.ints.clone())
    }

    pub fn string(&self, name: &str, default: &str) -> String {
        self.find(name)
            .map(|a| String::from_utf8_lossy(&a.s).into_owned())
            .unwrap_or_else(|| default.to_string())
    }

    pub fn tensor(&self, name: &str) -> Option<&'a TensorProto> {
        self.find(name).and_then(|a| a.t.as_ref())
    }

    /// The names of the node's attributes.
    pub fn names(&self) -> Vec<&'a str> {
        self.node
            .attribute
            .iter()
            .map(|a| a.name.as_str())
            .collect()
    }
}
