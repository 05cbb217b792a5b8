//! Saliency maps as pictures: the map normalised to [0, 1], coloured (blue for low,
//! through green and yellow, to red for high), laid over a grey copy of the image,
//! enlarged to at least 128 pixels, with the colour scale as a bar on the right.
//!
//! ```
//! use spore_xai::runner::heatmap::{colour, heatmap_png};
//! assert_eq!(colour(0.0), [0, 0, 255]);
//! assert_eq!(colour(1.0), [255, 0, 0]);
//! let png = heatmap_png(&[0.0; 4], 1, 2, 2, &[0.0, 1.0, 2.0, 3.0]).unwrap();
//! assert_eq!(&png[1..4], b"PNG");
//! ```

use std::io::Cursor;

use image::{Rgb, RgbImage};
use spore_core::{Error, Result};

/// The colour of `t` in [0, 1].
pub fn colour(t: f32) -> [u8; 3] {
    let t = t.clamp(0.0, 1.0);
    let (r, g, b) = if t < 0.25 {
        (0.0, 4.0 * t, 1.0)
    } else if t < 0.5 {
        (0.0, 1.0, 1.0 - 4.0 * (t - 0.25))
    } else if t < 0.75 {
        (4.0 * (t - 0.5), 1.0, 0.0)
    } else {
        (1.0, 1.0 - 4.0 * (t - 0.75), 0.0)
    };
    [(r * 255.0) as u8, (g * 255.0) as u8, (b * 255.0) as u8]
}

/// Scales values to [0, 1] by their range (all zeros when constant).
pub fn normalise(v: &[f32]) -> Vec<f32> {
    let (lo, hi) = v
        .iter()
        .filter(|x| x.is_finite())
        .fold((f32::MAX, f32::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    v.iter()
        .map(|&x| {
            if hi > lo && x.is_finite() {
                (x - lo) / (hi - lo)
            } else {
                0.0
            }
        })
        .collect()
}

fn encode(img: RgbImage) -> Result<Vec<u8>> {
    let mut bytes = vec![];
    img.write_to(&mut Cursor::new(&mut bytes), image::ImageFormat::Png)
        .map_err(|e| Error::invalid(format!("PNG encoding failed: {e}")))?;
    Ok(bytes)
}

/// The image (`[C, H, W]` values, C = 1 or 3) alone, enlarged like the heat maps.
pub fn image_png(image: &[f32], c: usize, h: usize, w: usize) -> Result<Vec<u8>> {
    if image.len() != c * h * w || !(c == 1 || c == 3) {
        return Err(Error::invalid(format!(
            "picture: expected a 1- or 3-channel {h}x{w} image, got {} values for {c} channels",
            image.len()
        )));
    }
    let zoom = (128 / h.max(w).max(1)).max(1);
    let grey = grey_of(image, c, h, w);
    let n = normalise(image);
    let mut img = RgbImage::new((w * zoom) as u32, (h * zoom) as u32);
    for (x, y, p) in img.enumerate_pixels_mut() {
        let (yy, xx) = (y as usize / zoom, x as usize / zoom);
        let i = yy * w + xx;
        *p = if c == 3 {
            Rgb([0, 1, 2].map(|k| (n[k * h * w + i] * 255.0) as u8))
        } else {
            let g = (grey[i] * 255.0) as u8;
            Rgb([g, g, g])
        };
    }
    encode(img)
}

fn grey_of(image: &[f32], c: usize, h: usize, w: usize) -> Vec<f32> {
    let n = normalise(image);
    (0..h * w)
        .map(|i| (0..c).map(|k| n[k * h * w + i]).sum::<f32>() / c.max(1) as f32)
        .collect()
}

/// The heat map of `map` (`H×W`) over `image` (`[C, H, W]`) as PNG bytes.
pub fn heatmap_png(image: &[f32], c: usize, h: usize, w: usize, map: &[f32]) -> Result<Vec<u8>> {
    if image.len() != c * h * w || map.len() != h * w {
        return Err(Error::invalid(format!(
            "heat map: expected a {c}x{h}x{w} image and a {h}x{w} map, got {} and {} values",
            image.len(),
            map.len()
        )));
    }
    let zoom = (128 / h.max(w).max(1)).max(1);
    let (width, height) = (w * zoom, h * zoom);
    let bar = 12;
    let grey = grey_of(image, c, h, w);
    let m = normalise(map);
    let mut img = RgbImage::from_pixel(
        (width + 4 + bar) as u32,
        height as u32,
        Rgb([255, 255, 255]),
    );
    for y in 0..height {
        for x in 0..width {
            let i = (y / zoom) * w + x / zoom;
            let col = colour(m[i]);
            let g = grey[i] * 255.0;
            let px = col.map(|v| (0.5 * v as f32 + 0.5 * g) as u8);
            img.put_pixel(x as u32, y as u32, Rgb(px));
        }
        let t = 1.0 - y as f32 / (height.max(2) - 1) as f32;
        for x in width + 4..width + 4 + bar {
            img.put_pixel(x as u32, y as u32, Rgb(colour(t)));
        }
    }
    encode(img)
}
