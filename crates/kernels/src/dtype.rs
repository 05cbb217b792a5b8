//! Element types: the runtime [`DType`] enum and the [`Element`] trait that ties each
//! Rust scalar type to its variant.
//!
//! ```
//! use spore_kernels::{DType, Element};
//! assert_eq!(f32::DTYPE, DType::F32);
//! assert_eq!(DType::F32.to_string(), "Float32");
//! ```

use std::fmt;

use crate::buffer::Buffer;

/// The element type of a tensor, chosen at run time (tensors are not generic).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F64,
    I32,
    I64,
    U8,
    Bool,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 6] = [
        DType::F32,
        DType::F64,
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
            DType::I32 => "Int32",
            DType::I64 => "Int64",
            DType::U8 => "UInt8",
            DType::Bool => "Bool",
        }
    }

    /// NumPy's type string (`<f4`, ...), used by `.npy` writers.
    pub fn numpy_descr(self) -> &'static str {
        match self {
            DType::F32 => "<f4",
            DType::F64 => "<f8",
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
            DType::U8 | DType::Bool => 1,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
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

/// A Rust scalar type that a tensor can hold.
pub trait Element: Copy + Send + Sync + PartialOrd + fmt::Debug + 'static {
    const DTYPE: DType;
    fn to_f64(self) -> f64;
    /// Conversion with Rust `as` semantics (saturating for floats to ints, NaN -> 0).
    fn from_f64(v: f64) -> Self;
    fn zero() -> Self;
    fn one() -> Self;
    /// Wraps a typed vector in the matching [`Buffer`] variant.
    fn into_buffer(v: Vec<Self>) -> Buffer;
    /// Borrows the typed slice if `b` holds this type.
    fn slice_of(b: &Buffer) -> Option<&[Self]>;
    /// Unwraps the typed vector if `b` holds this type.
    fn vec_of(b: Buffer) -> Option<Vec<Self>>;
}

macro_rules! impl_element {
    ($t:ty, $d:expr, $variant:ident) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn into_buffer(v: Vec<Self>) -> Buffer {
                Buffer::$variant(v)
            }
            fn slice_of(b: &Buffer) -> Option<&[Self]> {
                match b {
                    Buffer::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn vec_of(b: Buffer) -> Option<Vec<Self>> {
                match b {
                    Buffer::$variant(v) => Some(v),
                    _ => None,
                }
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn zero() -> Self {
                0 as $t
            }
            #[inline(always)]
            fn one() -> Self {
                1 as $t
            }
        }
    };
}
impl_element!(f32, DType::F32, F32);
impl_element!(f64, DType::F64, F64);
impl_element!(i32, DType::I32, I32);
impl_element!(i64, DType::I64, I64);
impl_element!(u8, DType::U8, U8);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn into_buffer(v: Vec<Self>) -> Buffer {
        Buffer::Bool(v)
    }
    fn slice_of(b: &Buffer) -> Option<&[Self]> {
        match b {
            Buffer::Bool(v) => Some(v),
            _ => None,
        }
    }
    fn vec_of(b: Buffer) -> Option<Vec<Self>> {
        match b {
            Buffer::Bool(v) => Some(v),
            _ => None,
        }
    }
    fn to_f64(self) -> f64 {
        if self { 1.0 } else { 0.0 }
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    fn zero() -> Self {
        false
    }
    fn one() -> Self {
        true
    }
}
