//! Image transforms on single-channel u8/f32 images.
//!
//! ```
//! use spore_data::vision::resize_bilinear_u8;
//! // Upscaling a constant image keeps it constant.
//! assert_eq!(resize_bilinear_u8(&[7; 4], 2, 2, 3, 3), vec![7; 9]);
//! ```

/// Bilinear resize with OpenCV's coordinate mapping (half-pixel centres, edge clamping)
/// and rounding to the nearest u8. (Bit-exact parity with OpenCV's fixed-point
/// arithmetic is tracked by the dataset issue.)
pub fn resize_bilinear_u8(src: &[u8], h: usize, w: usize, oh: usize, ow: usize) -> Vec<u8> {
    let axis = |out: usize, inp: usize| -> Vec<(usize, usize, f32)> {
        let scale = inp as f32 / out as f32;
        (0..out)
            .map(|o| {
                let x = ((o as f32 + 0.5) * scale - 0.5).max(0.0);
                let i0 = (x.floor() as usize).min(inp - 1);
                let i1 = (i0 + 1).min(inp - 1);
                (i0, i1, x - i0 as f32)
            })
            .collect()
    };
    let (ys, xs) = (axis(oh, h), axis(ow, w));
    let mut out = Vec::with_capacity(oh * ow);
    for &(y0, y1, fy) in &ys {
        for &(x0, x1, fx) in &xs {
            let p = |y: usize, x: usize| src[y * w + x] as f32;
            let top = p(y0, x0) * (1.0 - fx) + p(y0, x1) * fx;
            let bottom = p(y1, x0) * (1.0 - fx) + p(y1, x1) * fx;
            out.push((top * (1.0 - fy) + bottom * fy).round().clamp(0.0, 255.0) as u8);
        }
    }
    out
}
