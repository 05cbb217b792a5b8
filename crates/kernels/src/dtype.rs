//! Element types: the runtime [`DType`] enum and the [`Element`] trait that ties each
//! Rust scalar type to its variant.
//!
//! ```
//! use spore_kernels::{DType, Element};
//! assert_eq!(f32::DTYPE, DType::F32);
//! assert_eq!(DType::F32.to_string(), "Float32");
//! ```

use std::fmt;

/// The element type of a tensor, chosen at run time (tensors are not generic).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F64,
    /// IEEE binary16 (`half::f16`): 5 exponent bits, 10 mantissa bits.
    F16,
    /// bfloat16 (`half::bf16`): float32's 8 exponent bits, 7 mantissa bits.
    BF16,
    I32,
    I64,
    U8,
    Bool,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 8] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::Bool,
    ];

    /// MindSpore's name for the type (`Float32`, `Int64`, ...), used in printing and errors.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "Float32",
            DType::F64 => "Float64",
            DType::F16 => "Float16",
            DType::BF16 => "BFloat16",
            DType::I32 => "Int32",
            DType::I64 => "Int64",
            DType::U8 => "UInt8",
            DType::Bool => "Bool",
        }
    }

    /// NumPy's type string (`<f4`, ...), used by `.npy` writers. NumPy has no bfloat16:
    /// its values are written as `<V2` (two raw bytes each), as `ml_dtypes` writes them
    /// (`np.load(f).view(ml_dtypes.bfloat16)` reads them back).
    pub fn numpy_descr(self) -> &'static str {
        match self {
            DType::F32 => "<f4",
            DType::F64 => "<f8",
            DType::F16 => "<f2",
            DType::BF16 => "<V2",
            DType::I32 => "<i4",
            DType::I64 => "<i8",
            DType::U8 => "|u1",
            DType::Bool => "|b1",
        }
    }

    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::F16 | DType::BF16 => 2,
            DType::U8 | DType::Bool => 1,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// float16 or bfloat16: stored in 16 bits, computed in float32 (see `crate::half`).
    pub fn is_half(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64 | DType::U8)
    }

    /// Numbers that support arithmetic (everything but `Bool`).
    pub fn is_numeric(self) -> bool {
        self != DType::Bool
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
