//! float16 and bfloat16 computed in float32: a kernel given 16-bit values widens them
//! (exactly: every 16-bit value is a float32), computes in float32, and rounds the result
//! once to the input's type, to nearest with ties to even. Sums and products therefore
//! accumulate in float32, as PyTorch and MindSpore do on CPUs without 16-bit arithmetic.
//!
//! ```
//! use spore_kernels::{elementwise::{unary, UnaryFn}, half_float::widen, Buffer, DType, Layout};
//! let x = Buffer::F16(vec![half::f16::from_f32(4.0)]);
//! let l = Layout::contiguous(&[1]);
//! assert_eq!(widen(&x, &l), Buffer::F32(vec![4.0]));
//! let y = unary(UnaryFn::Sqrt, &x, &l).unwrap();
//! assert_eq!(y, Buffer::F16(vec![half::f16::from_f32(2.0)]));
//! ```

use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::elementwise::cast;
use crate::layout::Layout;

/// The values of a view as a contiguous float32 buffer.
pub fn widen(src: &Buffer, layout: &Layout) -> Buffer {
    cast(src, layout, DType::F32)
}

/// A contiguous float32 buffer rounded to `dtype`.
pub fn narrow(src: &Buffer, dtype: DType) -> Buffer {
    cast(src, &Layout::contiguous(&[src.len()]), dtype)
}

/// `f` run on the float32 values of `src` (viewed through `layout`), its result rounded
/// back to `src`'s type. `f` receives the widened buffer and its contiguous layout.
pub fn through_f32(
    src: &Buffer,
    layout: &Layout,
    f: impl FnOnce(&Buffer, &Layout) -> Result<Buffer, String>,
) -> Result<Buffer, String> {
    let wide = widen(src, layout);
    let out = f(&wide, &Layout::contiguous(&layout.shape))?;
    Ok(narrow(&out, src.dtype()))
}
