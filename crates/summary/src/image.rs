//! Tensors as PNG images: `[C, H, W]` with 1 (grey) or 3 (RGB) channels. Values in
//! [0, 1] are scaled by 255; any other range is stretched from its minimum to its
//! maximum (normalised inputs look as they would before normalisation, up to contrast).
//!
//! ```
//! use spore_summary::image::png;
//! let (bytes, h, w, c) = png(&[0.0, 0.5, 1.0, 0.25], &[1, 2, 2]).unwrap();
//! assert_eq!((h, w, c), (2, 2, 1));
//! assert_eq!(&bytes[1..4], b"PNG");
//! ```

use std::io::Cursor;

use image::{DynamicImage, GrayImage, RgbImage};
use spore_core::{Error, Result};

/// PNG bytes, height, width and channels of one `[C, H, W]` image.
pub fn png(values: &[f32], shape: &[usize]) -> Result<(Vec<u8>, usize, usize, usize)> {
    let [c, h, w] = shape else {
        return Err(Error::invalid(format!(
            "image summary: expected a [C, H, W] image, got shape {shape:?}"
        )));
    };
    let (c, h, w) = (*c, *h, *w);
    if !(c == 1 || c == 3) || values.len() != c * h * w || h == 0 || w == 0 {
        return Err(Error::invalid(format!(
            "image summary: expected 1 or 3 channels and {} values for shape {shape:?}, got {} values",
            c * h * w,
            values.len()
        )));
    }
    let finite = values.iter().copied().filter(|v| v.is_finite());
    let (lo, hi) = finite.fold((f32::MAX, f32::MIN), |(a, b), v| (a.min(v), b.max(v)));
    let unit = lo >= 0.0 && hi <= 1.0;
    let level = |v: f32| -> u8 {
        let t = if !v.is_finite() {
            0.0
        } else if unit {
            v
        } else if hi > lo {
            (v - lo) / (hi - lo)
        } else {
            0.0
        };
        (t * 255.0).round().clamp(0.0, 255.0) as u8
    };
    let plane = h * w;
    let img = if c == 1 {
        DynamicImage::ImageLuma8(
            GrayImage::from_raw(
                w as u32,
                h as u32,
                values.iter().map(|&v| level(v)).collect(),
            )
            .ok_or_else(|| Error::invalid("image summary: bad image size"))?,
        )
    } else {
        let rgb: Vec<u8> = (0..plane)
            .flat_map(|p| (0..3).map(move |k| k * plane + p))
            .map(|i| level(values[i]))
            .collect();
        DynamicImage::ImageRgb8(
            RgbImage::from_raw(w as u32, h as u32, rgb)
                .ok_or_else(|| Error::invalid("image summary: bad image size"))?,
        )
    };
    let mut bytes = Vec::new();
    img.write_to(&mut Cursor::new(&mut bytes), image::ImageFormat::Png)
        .map_err(|e| Error::invalid(format!("image summary: PNG encoding failed: {e}")))?;
    Ok((bytes, h, w, c))
}
