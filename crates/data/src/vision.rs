//! The first-generation helper kept for existing callers; new code uses the transforms in
//! [`crate::transforms::vision`].
//!
//! ```
//! use spore_data::vision::resize_bilinear_u8;
//! // Upscaling a constant image keeps it constant.
//! assert_eq!(resize_bilinear_u8(&[7; 4], 2, 2, 3, 3), vec![7; 9]);
//! ```

use crate::transforms::resize::linear_u8;

/// Bilinear resize of a single-channel u8 image, bit-exact with OpenCV's `INTER_LINEAR`
/// (see [`crate::transforms::resize`]). Returns an empty vector when `src` does not hold
/// `h * w` pixels or a size is 0.
pub fn resize_bilinear_u8(src: &[u8], h: usize, w: usize, oh: usize, ow: usize) -> Vec<u8> {
    linear_u8(src, h, w, 1, oh, ow).unwrap_or_default()
}
