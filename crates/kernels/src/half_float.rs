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

use half::{bf16, f16};

use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::elementwise::cast;
use crate::layout::Layout;
use crate::widest::widest;

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

/// [`crate::elementwise::cast`] between float32 and a 16-bit type over a contiguous view:
/// the same values, from vector loops (bfloat16 compiled per vector width, float16 on the
/// CPU's conversion instructions: [`crate::f16_convert`]), threaded over large buffers.
/// `None` for any other pair of types or a strided view.
///
/// Why: a per-value conversion through float64 made the casts around every 16-bit op of
/// a mixed-precision step cost more than the ops themselves.
pub(crate) fn fast_cast(src: &Buffer, layout: &Layout, dtype: DType) -> Option<Buffer> {
    if !layout.is_contiguous() {
        return None;
    }
    let range = layout.offset..layout.offset + layout.numel();
    Some(match (src, dtype) {
        (Buffer::BF16(s), DType::F32) => {
            let mut out = crate::arena::for_overwrite::<f32>(range.len());
            widen_bf16(&s[range], &mut out);
            Buffer::F32(out)
        }
        (Buffer::F32(s), DType::BF16) => {
            let mut out = crate::arena::for_overwrite::<bf16>(range.len());
            round_to_bf16(&s[range], &mut out);
            Buffer::BF16(out)
        }
        (Buffer::F16(s), DType::F32) => {
            let mut out = crate::arena::for_overwrite::<f32>(range.len());
            chunked(&s[range], &mut out, crate::f16_convert::widen);
            Buffer::F32(out)
        }
        (Buffer::F32(s), DType::F16) => {
            let mut out = crate::arena::for_overwrite::<f16>(range.len());
            round_to_f16(&s[range], &mut out);
            Buffer::F16(out)
        }
        _ => return None,
    })
}

/// `src` widened (exactly) to float32 into `dst` (equal lengths); vectorized, and
/// threaded over large buffers.
pub(crate) fn widen_bf16(src: &[bf16], dst: &mut [f32]) {
    chunked(src, dst, widen_bf16_run);
}

// Why compiled per vector width: these conversions run over every 16-bit value of a
// mixed-precision step (in and out of each loop and convolution), and the baseline's
// 4-lane form of them took several percent of a ResNet-18 O2 step.
widest! {
    /// `dst[i]` = `src[i]` widened (exactly).
    fn widen_bf16_run(src: &[bf16], dst: &mut [f32]) {
        dst.iter_mut().zip(src).for_each(|(o, &v)| *o = bf16_to_f32(v));
    }
}

widest! {
    /// `dst[i]` = `src[i]` rounded to bfloat16 (see [`f32_to_bf16_bits`]).
    fn round_bf16_run(src: &[f32], dst: &mut [bf16]) {
        dst.iter_mut()
            .zip(src)
            .for_each(|(o, &v)| *o = bf16::from_bits(f32_to_bf16_bits(v)));
    }
}

widest! {
    /// Each value rounded to the nearest bfloat16 value, kept as float32.
    fn round_bf16_in_place(values: &mut [f32]) {
        values
            .iter_mut()
            .for_each(|v| *v = bf16_to_f32(bf16::from_bits(f32_to_bf16_bits(*v))));
    }
}

/// `src` rounded to bfloat16 into `dst` (equal lengths), as `cast` rounds: to nearest,
/// ties to even; vectorized, and threaded over large buffers.
pub fn round_to_bf16(src: &[f32], dst: &mut [bf16]) {
    chunked(src, dst, round_bf16_run);
}

/// `src` rounded to float16 into `dst` (equal lengths), as `cast` rounds (the CPU's
/// conversion instructions where it has them: [`crate::f16_convert`]); threaded over
/// large buffers.
pub fn round_to_f16(src: &[f32], dst: &mut [f16]) {
    debug_assert_eq!(src.len(), dst.len(), "round_to_f16: lengths");
    chunked(src, dst, crate::f16_convert::narrow);
}

/// Values from which a conversion is split among the threads (a 64 x 512 product's
/// output, 32,768 values, is split: its conversion takes longer than a fork).
const PARALLEL_CONVERT_MIN: usize = 1 << 15;

/// `f` over matching chunks of `src` and `dst` (equal lengths), on several threads when
/// the buffers are large.
fn chunked<S: Sync, D: Send>(src: &[S], dst: &mut [D], f: impl Fn(&[S], &mut [D]) + Sync) {
    use rayon::prelude::*;
    let threads = rayon::current_num_threads();
    if src.len() < PARALLEL_CONVERT_MIN || threads < 2 {
        f(src, dst);
        return;
    }
    let chunk = src.len().div_ceil(threads);
    dst.par_chunks_mut(chunk)
        .zip(src.par_chunks(chunk))
        .for_each(|(d, s)| f(s, d));
}

/// `bf16::from_f32(v).to_bits()` without branches on the value (so that loops over it
/// vectorize): rounded to nearest, ties to even; a NaN keeps its sign and upper payload
/// and is made quiet.
#[inline(always)]
pub fn f32_to_bf16_bits(v: f32) -> u16 {
    let x = v.to_bits();
    let rounded = x.wrapping_add(0x7fff + ((x >> 16) & 1)) >> 16;
    let quiet_nan = (x >> 16) | 0x0040;
    let is_nan = x & 0x7fff_ffff > 0x7f80_0000;
    (if is_nan { quiet_nan } else { rounded }) as u16
}

/// Rounds values to the nearest `dtype` value (ties to even) in place, keeping their
/// type: what storing them in a `dtype` tensor and reading them back gives. Float32
/// values take the vectorized conversions; a `dtype` that is not 16-bit changes nothing.
pub fn round_in_place<T: crate::Num>(dtype: DType, values: &mut [T]) {
    let Some(values) = crate::operand::as_f32_mut(values) else {
        use crate::buffer::Element;
        for v in values.iter_mut() {
            // `Element::from_f64` rounds once, correctly (half's own rounds twice).
            *v = match dtype {
                DType::BF16 => T::from_f64(<bf16 as Element>::from_f64(v.to_f64()).to_f64()),
                DType::F16 => T::from_f64(<f16 as Element>::from_f64(v.to_f64()).to_f64()),
                _ => *v,
            };
        }
        return;
    };
    match dtype {
        DType::BF16 => round_bf16_in_place(values),
        DType::F16 => crate::f16_convert::round_in_place(values),
        _ => {}
    }
}

/// Widens `dst.len()` values of a float16 or bfloat16 buffer, from `start`, into `dst`
/// (exactly); vectorized for float32 ([`crate::f16_convert`] for float16). Other
/// buffers leave `dst` as it is.
pub fn widen_run<T: crate::Num>(src: &Buffer, start: usize, dst: &mut [T]) {
    let end = start + dst.len();
    if let Some(out) = crate::operand::as_f32_mut(dst) {
        match src {
            Buffer::BF16(v) => widen_bf16_run(&v[start..end], out),
            Buffer::F16(v) => crate::f16_convert::widen(&v[start..end], out),
            _ => {}
        }
        return;
    }
    match src {
        Buffer::BF16(v) => (dst.iter_mut().zip(&v[start..end]))
            .for_each(|(o, x)| *o = T::from_f64(f64::from(x.to_f32()))),
        Buffer::F16(v) => (dst.iter_mut().zip(&v[start..end]))
            .for_each(|(o, x)| *o = T::from_f64(f64::from(x.to_f32()))),
        _ => {}
    }
}

/// `src`, 16-bit values of type `T`, widened (exactly) into `dst` (equal lengths) on
/// this thread; a `T` that is not 16-bit leaves `dst` as it is.
pub(crate) fn widen_slice<T: crate::Num>(src: &[T], dst: &mut [f32]) {
    debug_assert_eq!(src.len(), dst.len(), "widen_slice: lengths");
    if let Some(v) = retyped::<T, bf16>(src) {
        widen_bf16_run(v, dst);
    } else if let Some(v) = retyped::<T, f16>(src) {
        crate::f16_convert::widen(v, dst);
    }
}

/// `src` rounded to the 16-bit type `T` into `dst` (equal lengths) on this thread, as
/// `cast` rounds; a `T` that is not 16-bit leaves `dst` as it is.
pub(crate) fn narrow_slice<T: crate::Num>(src: &[f32], dst: &mut [T]) {
    debug_assert_eq!(src.len(), dst.len(), "narrow_slice: lengths");
    if let Some(v) = retyped_mut::<T, bf16>(dst) {
        round_bf16_run(src, v);
    } else if let Some(v) = retyped_mut::<T, f16>(dst) {
        crate::f16_convert::narrow(src, v);
    }
}

/// Whether `T` is `U`, by type (not by the `DTYPE` a type outside this crate could
/// claim).
fn same_type<T: 'static, U: 'static>() -> bool {
    std::any::TypeId::of::<T>() == std::any::TypeId::of::<U>()
}

/// Whether `T` is float16 or bfloat16 (the types [`widen_slice`] and [`narrow_slice`]
/// convert).
pub(crate) fn is_half<T: 'static>() -> bool {
    same_type::<T, bf16>() || same_type::<T, f16>()
}

/// `s` as a slice of `U` when `T` is `U`.
fn retyped<T: 'static, U: 'static>(s: &[T]) -> Option<&[U]> {
    // SAFETY: `T` and `U` are the same type, so the slice is reinterpreted as itself.
    same_type::<T, U>()
        .then(|| unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<U>(), s.len()) })
}

/// [`retyped`] for a mutable slice.
fn retyped_mut<T: 'static, U: 'static>(s: &mut [T]) -> Option<&mut [U]> {
    // SAFETY: as in `retyped`.
    same_type::<T, U>()
        .then(|| unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<U>(), s.len()) })
}

/// A bfloat16 value as float32: its bits shifted up, exact for every value (NaN payloads
/// included), and a loop of them vectorizes (`bf16::to_f32` checks for NaN first).
#[inline(always)]
pub fn bf16_to_f32(x: bf16) -> f32 {
    f32::from_bits(u32::from(x.to_bits()) << 16)
}
