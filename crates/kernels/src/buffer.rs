//! [`Buffer`]: a flat, owned, typed vector of elements; the storage behind every tensor.
//!
//! ```
//! use spore_kernels::{Buffer, DType};
//! let b = Buffer::from_f64(DType::I32, &[1.0, 2.5]);
//! assert_eq!(b.to_f64_vec(), vec![1.0, 2.0]);
//! ```

use crate::dtype::DType;

/// Contiguous storage of one dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum Buffer {
    F32(Vec<f32>),
    F64(Vec<f64>),
    F16(Vec<half::f16>),
    BF16(Vec<half::bf16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    U8(Vec<u8>),
    Bool(Vec<bool>),
}

/// Runs `$body` with `$v` bound to the typed vector inside a [`Buffer`] (by reference).
#[macro_export]
macro_rules! with_buffer {
    ($buf:expr, $v:ident => $body:expr) => {
        match $buf {
            $crate::Buffer::F32($v) => $body,
            $crate::Buffer::F64($v) => $body,
            $crate::Buffer::F16($v) => $body,
            $crate::Buffer::BF16($v) => $body,
            $crate::Buffer::I32($v) => $body,
            $crate::Buffer::I64($v) => $body,
            $crate::Buffer::U8($v) => $body,
            $crate::Buffer::Bool($v) => $body,
        }
    };
}

impl Buffer {
    pub fn dtype(&self) -> DType {
        match self {
            Buffer::F32(_) => DType::F32,
            Buffer::F64(_) => DType::F64,
            Buffer::F16(_) => DType::F16,
            Buffer::BF16(_) => DType::BF16,
            Buffer::I32(_) => DType::I32,
            Buffer::I64(_) => DType::I64,
            Buffer::U8(_) => DType::U8,
            Buffer::Bool(_) => DType::Bool,
        }
    }

    pub fn len(&self) -> usize {
        with_buffer!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A buffer of `n` zeros (false for Bool).
    pub fn zeros(dtype: DType, n: usize) -> Buffer {
        Buffer::filled(dtype, n, 0.0)
    }

    /// A buffer of `n` copies of `value`, converted with `as` semantics.
    pub fn filled(dtype: DType, n: usize, value: f64) -> Buffer {
        match dtype {
            DType::F32 => Buffer::F32(vec![value as f32; n]),
            DType::F64 => Buffer::F64(vec![value; n]),
            DType::F16 => Buffer::F16(vec![Element::from_f64(value); n]),
            DType::BF16 => Buffer::BF16(vec![Element::from_f64(value); n]),
            DType::I32 => Buffer::I32(vec![value as i32; n]),
            DType::I64 => Buffer::I64(vec![value as i64; n]),
            DType::U8 => Buffer::U8(vec![value as u8; n]),
            DType::Bool => Buffer::Bool(vec![value != 0.0; n]),
        }
    }

    pub fn from_f64(dtype: DType, values: &[f64]) -> Buffer {
        fn conv<T: Element>(values: &[f64]) -> Vec<T> {
            values.iter().map(|&v| T::from_f64(v)).collect()
        }
        match dtype {
            DType::F32 => Buffer::F32(conv(values)),
            DType::F64 => Buffer::F64(conv(values)),
            DType::F16 => Buffer::F16(conv(values)),
            DType::BF16 => Buffer::BF16(conv(values)),
            DType::I32 => Buffer::I32(conv(values)),
            DType::I64 => Buffer::I64(conv(values)),
            DType::U8 => Buffer::U8(conv(values)),
            DType::Bool => Buffer::Bool(conv(values)),
        }
    }

    pub fn to_f64_vec(&self) -> Vec<f64> {
        with_buffer!(self, v => v.iter().map(|x| x.to_f64()).collect())
    }

    /// The typed slice, if the buffer holds `T`.
    pub fn as_slice<T: Element>(&self) -> Option<&[T]> {
        T::slice_of(self)
    }
}

impl<T: Element> From<Vec<T>> for Buffer {
    fn from(v: Vec<T>) -> Buffer {
        T::into_buffer(v)
    }
}

/// A Rust scalar type that a tensor can hold.
pub trait Element: Copy + Send + Sync + PartialOrd + std::fmt::Debug + 'static {
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

/// `into_buffer`, `slice_of` and `vec_of` of an [`Element`] held in `Buffer::$variant`.
macro_rules! buffer_variant {
    ($variant:ident) => {
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
    };
}

macro_rules! impl_element {
    ($t:ty, $d:expr, $variant:ident) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            buffer_variant!($variant);
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

/// float16 and bfloat16: from `f64` rounded to nearest, ties to even, as if in one step;
/// NaN, infinities and subnormals exact. Through float32 rounded to odd
/// ([`f32_round_to_odd`]), then `half`'s float32 conversion: rounding to odd keeps the
/// information that a later rounding to fewer bits needs. (`half`'s own conversions from
/// `f64` round some values just above a tie down: bf16's for `1 + 2^-8 + 2^-23`.)
macro_rules! impl_element_half {
    ($t:ty, $d:expr, $variant:ident) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            buffer_variant!($variant);
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self.to_f64()
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                <$t>::from_f32(f32_round_to_odd(v))
            }
            #[inline(always)]
            fn zero() -> Self {
                <$t>::ZERO
            }
            #[inline(always)]
            fn one() -> Self {
                <$t>::ONE
            }
        }
    };
}
/// `v` as float32, rounded to odd: exact values stay, any other becomes the float32 next
/// to it toward zero with its last mantissa bit set (past float32's range, `±f32::MAX`).
/// A value rounded to odd with at least two more bits than the final format then rounds
/// to nearest-even exactly as `v` itself would (Boldo and Melquiond, 2008).
pub fn f32_round_to_odd(v: f64) -> f32 {
    let r = v as f32;
    if v.is_nan() || r as f64 == v {
        return r;
    }
    // The neighbour toward zero: `r` itself, or one step back when `r` rounded away.
    let toward_zero = if r.is_infinite() || (r as f64).abs() > v.abs() {
        f32::from_bits(r.to_bits() - 1)
    } else {
        r
    };
    f32::from_bits(toward_zero.to_bits() | 1)
}

impl_element_half!(half::f16, DType::F16, F16);
impl_element_half!(half::bf16, DType::BF16, BF16);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    buffer_variant!(Bool);
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
