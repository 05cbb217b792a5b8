//! Resize kernels that reproduce OpenCV's `cv::resize` (what MindSpore's `vision.Resize`
//! calls on CPU; MindSpore builds OpenCV without IPP) bit for bit:
//!
//! - bilinear (`INTER_LINEAR`): half-pixel centres, `fx = (float)((dx + 0.5) * scale - 0.5)`
//!   with `scale = 1 / (dst / src)` in double; in x, taps left of the first pixel or right
//!   of the last one are clamped with weight 0, in y the rows are clipped. For UInt8 the
//!   weights are 11-bit fixed point (`round_half_even(w * 2048)`), the horizontal pass sums
//!   exactly in i32, and the vertical pass is OpenCV's
//!   `((b0 * (h0 >> 4)) >> 16) + ((b1 * (h1 >> 4)) >> 16) + 2) >> 2` (its SIMD and scalar
//!   code agree on this formula; checked against cv2 4.5.5 with IPP off on random sizes).
//!   Float32 uses the same taps in f32 arithmetic.
//! - nearest (`INTER_NEAREST`): `src = min(floor(dst * (1 / (dst_size / src_size))), size - 1)`.
//!
//! ```
//! use spore_data::transforms::resize::{linear_u8, nearest};
//! // A 2x2 ramp doubled: half-pixel centres put 1/4 and 3/4 of the step in between.
//! let up = linear_u8(&[0, 100, 0, 100], 2, 2, 1, 4, 4).unwrap();
//! assert_eq!(&up[..4], &[0, 25, 75, 100]);
//! assert_eq!(nearest(&[1u8, 2, 3, 4], 2, 2, 1, 1, 1).unwrap(), vec![1]);
//! ```

use spore_core::{Error, Result};

/// One output coordinate's two source taps and the fraction towards the second.
#[derive(Clone, Copy, Debug)]
struct Tap {
    i0: usize,
    i1: usize,
    frac: f32,
}

/// OpenCV's coordinate mapping for one axis. `clamp_frac` is the x-axis rule (the
/// fraction becomes 0 outside the image); the y-axis keeps it and only clips rows.
fn taps(out: usize, inp: usize, clamp_frac: bool) -> Vec<Tap> {
    // The scale is computed as OpenCV computes it (1 / inv_scale), not as inp / out: the
    // two differ in the last bit for sizes like 28 -> 32, and that bit reaches the weights.
    let scale = 1.0 / (out as f64 / inp as f64);
    let last = inp as i64 - 1;
    (0..out)
        .map(|d| {
            let f = ((d as f64 + 0.5) * scale - 0.5) as f32;
            let mut s = f.floor() as i64;
            let mut frac = f - s as f32;
            if clamp_frac {
                if s < 0 {
                    s = 0;
                    frac = 0.0;
                }
                if s >= last {
                    s = last;
                    frac = 0.0;
                }
            }
            Tap {
                i0: s.clamp(0, last) as usize,
                i1: (s + 1).clamp(0, last) as usize,
                frac,
            }
        })
        .collect()
}

/// `saturate_cast<short>(w * INTER_RESIZE_COEF_SCALE)`: round half to even, as cvRound.
fn fixed(w: f32) -> i32 {
    (w * 2048.0).round_ties_even() as i32
}

fn check(len: usize, h: usize, w: usize, c: usize, oh: usize, ow: usize) -> Result<()> {
    if h == 0 || w == 0 || c == 0 || oh == 0 || ow == 0 {
        return Err(Error::invalid(format!(
            "Resize: sizes must be positive, got input {h}x{w}x{c} and output {oh}x{ow}"
        )));
    }
    if h.checked_mul(w).and_then(|n| n.checked_mul(c)) != Some(len) {
        return Err(Error::invalid(format!(
            "Resize: the image holds {len} values but {h}x{w}x{c} were described"
        )));
    }
    Ok(())
}

/// The x taps expanded per channel: (source offset 0, source offset 1, fraction) for
/// each of the `ow * c` values of an output row.
fn row_taps(ow: usize, w: usize, c: usize) -> Vec<(usize, usize, f32)> {
    taps(ow, w, true)
        .into_iter()
        .flat_map(|t| (0..c).map(move |k| (t.i0 * c + k, t.i1 * c + k, t.frac)))
        .collect()
}

/// Runs `vertical` over each output row with the two horizontally resized source rows
/// it blends, computing every source row at most once per use run (consecutive output
/// rows mostly share their source rows).
fn blend_rows<H: Clone + Default, O>(
    h: usize,
    oh: usize,
    mut hrow: impl FnMut(usize, &mut Vec<H>),
    mut vertical: impl FnMut(&[H], &[H], f32, &mut Vec<O>),
    out: &mut Vec<O>,
) {
    let (mut r0, mut r1) = (usize::MAX, usize::MAX);
    let (mut h0, mut h1) = (Vec::new(), Vec::new());
    for t in taps(oh, h, false) {
        if t.i0 == r1 {
            std::mem::swap(&mut h0, &mut h1);
            std::mem::swap(&mut r0, &mut r1);
        }
        if t.i0 != r0 {
            hrow(t.i0, &mut h0);
            r0 = t.i0;
        }
        if t.i1 != r1 {
            hrow(t.i1, &mut h1);
            r1 = t.i1;
        }
        vertical(&h0, &h1, t.frac, out);
    }
}

/// Bilinear resize of an HWC UInt8 image, bit-exact with OpenCV.
pub fn linear_u8(
    src: &[u8],
    h: usize,
    w: usize,
    c: usize,
    oh: usize,
    ow: usize,
) -> Result<Vec<u8>> {
    check(src.len(), h, w, c, oh, ow)?;
    let xs: Vec<(usize, usize, i32, i32)> = row_taps(ow, w, c)
        .into_iter()
        .map(|(s0, s1, f)| (s0, s1, fixed(1.0 - f), fixed(f)))
        .collect();
    let mut out = Vec::with_capacity(oh * ow * c);
    blend_rows(
        h,
        oh,
        |r, buf: &mut Vec<i32>| {
            let row = &src[r * w * c..(r + 1) * w * c];
            buf.clear();
            buf.extend(
                xs.iter()
                    .map(|&(s0, s1, a0, a1)| row[s0] as i32 * a0 + row[s1] as i32 * a1),
            );
        },
        |h0, h1, frac, out| {
            let (b0, b1) = (fixed(1.0 - frac), fixed(frac));
            out.extend(h0.iter().zip(h1).map(|(&p, &q)| {
                ((((b0 * (p >> 4)) >> 16) + ((b1 * (q >> 4)) >> 16) + 2) >> 2).clamp(0, 255) as u8
            }));
        },
        &mut out,
    );
    Ok(out)
}

/// Bilinear resize of an HWC Float32 image, as OpenCV's floating-point path.
pub fn linear_f32(
    src: &[f32],
    h: usize,
    w: usize,
    c: usize,
    oh: usize,
    ow: usize,
) -> Result<Vec<f32>> {
    check(src.len(), h, w, c, oh, ow)?;
    let xs = row_taps(ow, w, c);
    let mut out = Vec::with_capacity(oh * ow * c);
    blend_rows(
        h,
        oh,
        |r, buf: &mut Vec<f32>| {
            let row = &src[r * w * c..(r + 1) * w * c];
            buf.clear();
            buf.extend(
                xs.iter()
                    .map(|&(s0, s1, f)| row[s0] * (1.0 - f) + row[s1] * f),
            );
        },
        |h0, h1, frac, out| {
            let (b0, b1) = (1.0 - frac, frac);
            out.extend(h0.iter().zip(h1).map(|(&p, &q)| p * b0 + q * b1));
        },
        &mut out,
    );
    Ok(out)
}

/// Nearest-neighbour resize of an HWC image of any element type, as `cv::INTER_NEAREST`.
pub fn nearest<T: Copy>(
    src: &[T],
    h: usize,
    w: usize,
    c: usize,
    oh: usize,
    ow: usize,
) -> Result<Vec<T>> {
    check(src.len(), h, w, c, oh, ow)?;
    let index = |out: usize, inp: usize| -> Vec<usize> {
        let inv = 1.0 / (out as f64 / inp as f64);
        (0..out)
            .map(|d| ((d as f64 * inv).floor() as usize).min(inp - 1))
            .collect()
    };
    let (ys, xs) = (index(oh, h), index(ow, w));
    let mut out = Vec::with_capacity(oh * ow * c);
    for &y in &ys {
        for &x in &xs {
            let p = (y * w + x) * c;
            out.extend_from_slice(&src[p..p + c]);
        }
    }
    Ok(out)
}
