//! Typed access to tensor data for sources and transforms: borrow a contiguous tensor's
//! elements without copying, dispatch on the runtime dtype, stack rows into a batch, cast.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_data::tensors::{cast, stack};
//! let a = Tensor::from_vec(vec![1u8, 2], &[2]).unwrap();
//! let b = Tensor::from_vec(vec![3u8, 4], &[2]).unwrap();
//! let s = stack(&[a, b], "image").unwrap();
//! assert_eq!(s.shape(), &[2, 2]);
//! assert_eq!(cast(&s, DType::I32).unwrap().to_vec::<i32>().unwrap(), vec![1, 2, 3, 4]);
//! ```

use std::any::Any;
use std::borrow::Cow;

use spore_core::{DType, Element, Error, Result, Tensor};

/// Runs `$body` with `$T` bound to the Rust type of `$dtype`.
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            spore_core::DType::F32 => {
                type $T = f32;
                $body
            }
            spore_core::DType::F64 => {
                type $T = f64;
                $body
            }
            spore_core::DType::F16 => {
                type $T = spore_core::f16;
                $body
            }
            spore_core::DType::BF16 => {
                type $T = spore_core::bf16;
                $body
            }
            spore_core::DType::I32 => {
                type $T = i32;
                $body
            }
            spore_core::DType::I64 => {
                type $T = i64;
                $body
            }
            spore_core::DType::U8 => {
                type $T = u8;
                $body
            }
            spore_core::DType::Bool => {
                type $T = bool;
                $body
            }
        }
    };
}
pub(crate) use with_dtype;

/// The elements of `t` in row-major order: borrowed when the tensor is contiguous (the
/// usual case in a pipeline, where every op builds fresh tensors), copied otherwise.
pub fn elements<T: Element>(t: &Tensor) -> Result<Cow<'_, [T]>> {
    if let Some(s) = t.storage()
        && s.layout.offset == 0
        && s.layout.is_contiguous()
        && s.buffer.len() == t.numel()
        && let Some(v) = T::slice_of(&s.buffer)
    {
        return Ok(Cow::Borrowed(v));
    }
    Ok(Cow::Owned(t.to_vec::<T>()?))
}

/// A tensor with the same elements laid out contiguously (shared when already so).
pub fn contiguous(t: &Tensor) -> Result<Tensor> {
    with_dtype!(t.dtype(), T => match elements::<T>(t)? {
        Cow::Borrowed(_) => Ok(t.clone()),
        Cow::Owned(v) => Tensor::from_vec(v, t.shape()),
    })
}

/// Converts every element with `as` semantics (floats to integers truncate toward zero
/// and saturate, NaN becomes 0, non-zero becomes `true`), as MindSpore's TypeCast.
pub fn cast(t: &Tensor, dtype: DType) -> Result<Tensor> {
    if t.dtype() == dtype {
        return Ok(t.clone());
    }
    with_dtype!(t.dtype(), S => {
        let src = elements::<S>(t)?;
        with_dtype!(dtype, D => {
            let out: Vec<D> = src.iter().map(|&x| convert::<S, D>(x)).collect();
            Tensor::from_vec(out, t.shape())
        })
    })
}

/// One element conversion. Integer to integer goes through i64 and wraps like a C cast
/// (so Int64 values beyond f64's 53-bit mantissa survive); anything else goes through f64
/// with Rust's `as` rules.
fn convert<S: Element, D: Element>(x: S) -> D {
    if !(S::DTYPE.is_int() && D::DTYPE.is_int()) {
        return D::from_f64(x.to_f64());
    }
    let v = (&x as &dyn Any)
        .downcast_ref::<i64>()
        .copied()
        .unwrap_or(x.to_f64() as i64);
    match D::DTYPE {
        DType::I64 => (&v as &dyn Any)
            .downcast_ref::<D>()
            .copied()
            .unwrap_or_else(|| D::from_f64(v as f64)),
        DType::I32 => D::from_f64(v as i32 as f64),
        DType::U8 => D::from_f64(v as u8 as f64),
        _ => D::from_f64(v as f64),
    }
}

/// Stacks equally shaped tensors of one dtype along a new leading axis (what `batch` does
/// to each column). `column` names the column in errors.
pub fn stack(tensors: &[Tensor], column: &str) -> Result<Tensor> {
    let Some(first) = tensors.first() else {
        return Err(Error::invalid(format!(
            "batch: column '{column}': nothing to stack"
        )));
    };
    for (i, t) in tensors.iter().enumerate() {
        if t.shape() != first.shape() || t.dtype() != first.dtype() {
            return Err(Error::invalid(format!(
                "batch: column '{column}': row {i} is {:?} {} but row 0 is {:?} {}; rows of a batch must have equal shapes and dtypes (resize or pad them first)",
                t.shape(),
                t.dtype(),
                first.shape(),
                first.dtype()
            )));
        }
    }
    let mut shape = vec![tensors.len()];
    shape.extend_from_slice(first.shape());
    with_dtype!(first.dtype(), T => {
        let mut out: Vec<T> = Vec::with_capacity(tensors.len() * first.numel());
        for t in tensors {
            out.extend_from_slice(&elements::<T>(t)?);
        }
        Tensor::from_vec(out, &shape)
    })
}

/// Row `i` of `t` along its first axis (`t` must be contiguous for this to be cheap).
pub fn row_of(t: &Tensor, i: usize) -> Result<Tensor> {
    let Some((&n, rest)) = t.shape().split_first() else {
        return Err(Error::invalid("cannot slice a 0-d tensor into rows"));
    };
    if i >= n {
        return Err(Error::invalid(format!(
            "row {i} is out of range for a tensor of shape {:?}",
            t.shape()
        )));
    }
    let len: usize = rest.iter().product();
    with_dtype!(t.dtype(), T => {
        let data = elements::<T>(t)?;
        Tensor::from_vec(data[i * len..(i + 1) * len].to_vec(), rest)
    })
}
