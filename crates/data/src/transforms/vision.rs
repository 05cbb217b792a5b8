//! Image transforms on HWC tensors (`[H, W]` or `[H, W, C]`), as
//! `mindspore.dataset.vision`: [`Resize`], [`Rescale`], [`Normalize`], [`HWC2CHW`],
//! [`RandomCrop`] (with padding), [`RandomHorizontalFlip`], [`CenterCrop`], [`Decode`].
//!
//! ```
//! use spore_core::Tensor;
//! use spore_data::rng::Rng;
//! use spore_data::transforms::TensorOp;
//! use spore_data::transforms::vision::{CenterCrop, Inter, Resize};
//! let img = Tensor::from_vec((0..16u8).collect(), &[4, 4, 1]).unwrap();
//! let mut rng = Rng::new(0);
//! let small = Resize::new(2, 2).interpolation(Inter::Nearest).apply(vec![img.clone()], &mut rng).unwrap();
//! assert_eq!(small[0].to_vec::<u8>().unwrap(), vec![0, 2, 8, 10]);
//! let mid = CenterCrop::new(2, 2).apply(vec![img], &mut rng).unwrap();
//! assert_eq!(mid[0].to_vec::<u8>().unwrap(), vec![5, 6, 9, 10]);
//! ```

use spore_core::{DType, Element, Error, Result, Tensor};

use super::{TensorOp, resize, single};
use crate::rng::Rng;
use crate::tensors::{elements, with_dtype};

/// Height, width, channels of an image tensor, and whether it had a channel axis.
#[derive(Clone, Copy, Debug)]
struct Hwc {
    h: usize,
    w: usize,
    c: usize,
    has_c: bool,
}

impl Hwc {
    fn of(op: &str, t: &Tensor) -> Result<Hwc> {
        match *t.shape() {
            [h, w] => Ok(Hwc {
                h,
                w,
                c: 1,
                has_c: false,
            }),
            [h, w, c] => Ok(Hwc {
                h,
                w,
                c,
                has_c: true,
            }),
            _ => Err(Error::invalid(format!(
                "{op}: expected an image of shape [H, W] or [H, W, C], got {:?} {}{}",
                t.shape(),
                t.dtype(),
                if t.rank() == 1 {
                    " (encoded bytes? Decode them first)"
                } else {
                    ""
                }
            ))),
        }
    }

    fn shape(self, h: usize, w: usize) -> Vec<usize> {
        if self.has_c {
            vec![h, w, self.c]
        } else {
            vec![h, w]
        }
    }
}

/// Interpolation modes (MindSpore's `Inter`); `Linear` is also called bilinear.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inter {
    Linear,
    Nearest,
}

#[derive(Clone, Copy, Debug)]
enum Size {
    Exact(usize, usize),
    Shorter(usize),
}

/// Resizes to `(height, width)`, or the shorter side to `size` keeping the aspect ratio.
/// Bilinear on UInt8/Float32, nearest on any dtype; bit-exact with OpenCV
/// (see [`super::resize`]).
#[derive(Clone, Debug)]
pub struct Resize {
    size: Size,
    inter: Inter,
}

impl Resize {
    pub fn new(height: usize, width: usize) -> Resize {
        Resize {
            size: Size::Exact(height, width),
            inter: Inter::Linear,
        }
    }

    /// MindSpore's `Resize(size)` with an int: the shorter side becomes `size`.
    pub fn shorter_side(size: usize) -> Resize {
        Resize {
            size: Size::Shorter(size),
            inter: Inter::Linear,
        }
    }

    pub fn interpolation(mut self, inter: Inter) -> Resize {
        self.inter = inter;
        self
    }

    fn target(&self, i: Hwc) -> (usize, usize) {
        match self.size {
            Size::Exact(h, w) => (h, w),
            // MindSpore 2.x truncates: (int)((float)long / short * size), so a 40x50
            // image resized to 30 becomes 30x37.
            Size::Shorter(s) if i.h < i.w => (s, (i.w as f32 / i.h as f32 * s as f32) as usize),
            Size::Shorter(s) => ((i.h as f32 / i.w.max(1) as f32 * s as f32) as usize, s),
        }
    }
}

impl TensorOp for Resize {
    fn name(&self) -> String {
        "Resize".into()
    }
    fn apply(&self, inputs: Vec<Tensor>, _: &mut Rng) -> Result<Vec<Tensor>> {
        let t = single("Resize", inputs)?;
        let i = Hwc::of("Resize", &t)?;
        let (oh, ow) = self.target(i);
        let shape = i.shape(oh, ow);
        let out = match (self.inter, t.dtype()) {
            (Inter::Linear, DType::U8) => Tensor::from_vec(
                resize::linear_u8(&elements::<u8>(&t)?, i.h, i.w, i.c, oh, ow)?,
                &shape,
            ),
            (Inter::Linear, DType::F32) => Tensor::from_vec(
                resize::linear_f32(&elements::<f32>(&t)?, i.h, i.w, i.c, oh, ow)?,
                &shape,
            ),
            (Inter::Linear, d) => Err(Error::invalid(format!(
                "Resize: bilinear interpolation takes UInt8 or Float32 images, got {d}; cast first or use Inter::Nearest"
            ))),
            (Inter::Nearest, d) => with_dtype!(d, T => {
                Tensor::from_vec(resize::nearest(&elements::<T>(&t)?, i.h, i.w, i.c, oh, ow)?, &shape)
            }),
        };
        Ok(vec![out?])
    }
}

/// `x * rescale + shift`, as Float32. Rounded once, like MindSpore (OpenCV's `convertTo`
/// uses a fused multiply-add on FMA hardware): the f32 constants are applied in f64,
/// where the product of two f32 values is exact. Checked bit for bit against MindSpore
/// 2.10's Rescale on the bundled digits.
#[derive(Clone, Debug)]
pub struct Rescale {
    rescale: f32,
    shift: f32,
}

impl Rescale {
    pub fn new(rescale: f64, shift: f64) -> Rescale {
        Rescale {
            rescale: rescale as f32,
            shift: shift as f32,
        }
    }
}

impl TensorOp for Rescale {
    fn name(&self) -> String {
        "Rescale".into()
    }
    fn apply(&self, inputs: Vec<Tensor>, _: &mut Rng) -> Result<Vec<Tensor>> {
        let t = single("Rescale", inputs)?;
        let (a, b) = (self.rescale as f64, self.shift as f64);
        let fused = |x: f32| (x as f64 * a + b) as f32;
        let out: Vec<f32> = match t.dtype() {
            // The common cases, written out so that they vectorise.
            DType::U8 => elements::<u8>(&t)?
                .iter()
                .map(|&x| fused(x as f32))
                .collect(),
            DType::F32 => elements::<f32>(&t)?.iter().map(|&x| fused(x)).collect(),
            DType::Bool => {
                return Err(Error::invalid(
                    "Rescale: expected a numeric image, got Bool",
                ));
            }
            d => {
                with_dtype!(d, T => elements::<T>(&t)?.iter().map(|&x| fused(x.to_f64() as f32)).collect())
            }
        };
        Ok(vec![Tensor::from_vec(out, t.shape())?])
    }
}

/// `(x - mean[c]) / std[c]` per channel, as Float32. `mean`/`std` have one value per
/// channel (or one for all); images are HWC unless [`Normalize::chw`] is set.
#[derive(Clone, Debug)]
pub struct Normalize {
    mean: Vec<f32>,
    std: Vec<f32>,
    hwc: bool,
}

impl Normalize {
    pub fn new(mean: &[f64], std: &[f64]) -> Normalize {
        Normalize {
            mean: mean.iter().map(|&m| m as f32).collect(),
            std: std.iter().map(|&s| s as f32).collect(),
            hwc: true,
        }
    }

    /// The images are `[C, H, W]` (MindSpore's `is_hwc=False`).
    pub fn chw(mut self) -> Normalize {
        self.hwc = false;
        self
    }
}

impl TensorOp for Normalize {
    fn name(&self) -> String {
        "Normalize".into()
    }
    fn apply(&self, inputs: Vec<Tensor>, _: &mut Rng) -> Result<Vec<Tensor>> {
        let t = single("Normalize", inputs)?;
        let shape = t.shape().to_vec();
        let (c, inner) = match (shape.as_slice(), self.hwc) {
            ([_, _], _) => (1, 1),
            ([_, _, c], true) => (*c, 1),
            ([c, h, w], false) => (*c, h * w),
            _ => {
                return Err(Error::invalid(format!(
                    "Normalize: expected a {} image, got shape {shape:?}",
                    if self.hwc { "[H, W, C]" } else { "[C, H, W]" }
                )));
            }
        };
        let per = |v: &[f32], what: &str| -> Result<Vec<f32>> {
            match v.len() {
                1 => Ok(vec![v[0]; c]),
                n if n == c => Ok(v.to_vec()),
                n => Err(Error::invalid(format!(
                    "Normalize: {what} has {n} values but the image has {c} channels"
                ))),
            }
        };
        let (mean, std) = (per(&self.mean, "mean")?, per(&self.std, "std")?);
        if let Some(s) = std.iter().find(|&&s| s <= 0.0 || !s.is_finite()) {
            return Err(Error::invalid(format!(
                "Normalize: std values must be positive, got {s}"
            )));
        }
        let x: Vec<f32> = with_dtype!(t.dtype(), T => elements::<T>(&t)?.iter().map(|&v| v.to_f64() as f32).collect());
        let out: Vec<f32> = x
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let k = if self.hwc { i % c } else { (i / inner) % c };
                (v - mean[k]) / std[k]
            })
            .collect();
        Ok(vec![Tensor::from_vec(out, &shape)?])
    }
}

/// `[H, W, C]` to `[C, H, W]`; a `[H, W]` image passes unchanged (as in MindSpore).
#[derive(Clone, Copy, Debug)]
pub struct HWC2CHW;

impl TensorOp for HWC2CHW {
    fn name(&self) -> String {
        "HWC2CHW".into()
    }
    fn apply(&self, inputs: Vec<Tensor>, _: &mut Rng) -> Result<Vec<Tensor>> {
        let t = single("HWC2CHW", inputs)?;
        let i = Hwc::of("HWC2CHW", &t)?;
        if !i.has_c {
            return Ok(vec![t]);
        }
        let out = with_dtype!(t.dtype(), T => {
            let src = elements::<T>(&t)?;
            let plane = i.h * i.w;
            let out: Vec<T> = if i.c == 1 {
                src.to_vec()
            } else {
                let mut out = Vec::with_capacity(src.len());
                for k in 0..i.c {
                    out.extend(src.iter().skip(k).step_by(i.c).take(plane));
                }
                out
            };
            Tensor::from_vec(out, &[i.c, i.h, i.w])
        });
        Ok(vec![out?])
    }
}

/// How padding fills the border (MindSpore's `Border`): a constant, the edge pixel, a
/// mirror without repeating the edge (`Reflect`, OpenCV's REFLECT_101) or with it
/// (`Symmetric`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Border {
    Constant,
    Edge,
    Reflect,
    Symmetric,
}

/// The source index for padded coordinate `p` (may be negative or past the end), or
/// `None` for a constant fill.
fn border_index(p: i64, n: usize, mode: Border) -> Option<usize> {
    let n = n as i64;
    if (0..n).contains(&p) {
        return Some(p as usize);
    }
    let i = match mode {
        Border::Constant => return None,
        Border::Edge => p.clamp(0, n - 1),
        Border::Reflect | Border::Symmetric if n == 1 => 0,
        Border::Reflect => {
            let period = 2 * (n - 1);
            let m = p.rem_euclid(period);
            if m < n { m } else { period - m }
        }
        Border::Symmetric => {
            let period = 2 * n;
            let m = p.rem_euclid(period);
            if m < n { m } else { period - 1 - m }
        }
    };
    Some(i as usize)
}

/// Pads an image by (top, bottom, left, right) pixels.
fn pad(
    t: &Tensor,
    i: Hwc,
    tblr: [usize; 4],
    mode: Border,
    fill: [f64; 3],
) -> Result<(Tensor, Hwc)> {
    let [top, bottom, left, right] = tblr;
    let (oh, ow) = (i.h + top + bottom, i.w + left + right);
    let shape = i.shape(oh, ow);
    let out = with_dtype!(t.dtype(), T => {
        let src = elements::<T>(t)?;
        let mut out = Vec::with_capacity(oh * ow * i.c);
        for y in 0..oh {
            let sy = border_index(y as i64 - top as i64, i.h, mode);
            for x in 0..ow {
                let sx = border_index(x as i64 - left as i64, i.w, mode);
                for k in 0..i.c {
                    out.push(match (sy, sx) {
                        (Some(sy), Some(sx)) => src[(sy * i.w + sx) * i.c + k],
                        _ => T::from_f64(fill[if i.c == 3 { k } else { 0 }]),
                    });
                }
            }
        }
        Tensor::from_vec(out, &shape)?
    });
    Ok((out, Hwc { h: oh, w: ow, ..i }))
}

/// The `h x w` window at (`y`, `x`); the caller checks that it fits.
fn crop(t: &Tensor, i: Hwc, y: usize, x: usize, h: usize, w: usize) -> Result<Tensor> {
    with_dtype!(t.dtype(), T => {
        let src = elements::<T>(t)?;
        let mut out = Vec::with_capacity(h * w * i.c);
        for r in y..y + h {
            let start = (r * i.w + x) * i.c;
            out.extend_from_slice(&src[start..start + w * i.c]);
        }
        Tensor::from_vec(out, &i.shape(h, w))
    })
}

/// Pads (optionally), then crops a random `height x width` window: `x` then `y` are drawn
/// uniformly from the valid offsets. Several input columns get the same window.
#[derive(Clone, Debug)]
pub struct RandomCrop {
    height: usize,
    width: usize,
    padding: [usize; 4],
    pad_if_needed: bool,
    fill: [f64; 3],
    mode: Border,
}

impl RandomCrop {
    pub fn new(height: usize, width: usize) -> RandomCrop {
        RandomCrop {
            height,
            width,
            padding: [0; 4],
            pad_if_needed: false,
            fill: [0.0; 3],
            mode: Border::Constant,
        }
    }

    /// The same padding on every side.
    pub fn padding(self, p: usize) -> RandomCrop {
        self.padding_ltrb(p, p, p, p)
    }

    /// MindSpore's 4-tuple order: left, top, right, bottom.
    pub fn padding_ltrb(
        mut self,
        left: usize,
        top: usize,
        right: usize,
        bottom: usize,
    ) -> RandomCrop {
        self.padding = [top, bottom, left, right];
        self
    }

    /// Pad (both sides, by the shortfall) when the image is smaller than the crop.
    pub fn pad_if_needed(mut self, yes: bool) -> RandomCrop {
        self.pad_if_needed = yes;
        self
    }

    pub fn fill_value(mut self, v: f64) -> RandomCrop {
        self.fill = [v; 3];
        self
    }

    pub fn fill_rgb(mut self, r: f64, g: f64, b: f64) -> RandomCrop {
        self.fill = [r, g, b];
        self
    }

    pub fn padding_mode(mut self, mode: Border) -> RandomCrop {
        self.mode = mode;
        self
    }
}

impl TensorOp for RandomCrop {
    fn name(&self) -> String {
        "RandomCrop".into()
    }
    fn apply(&self, inputs: Vec<Tensor>, rng: &mut Rng) -> Result<Vec<Tensor>> {
        let (ch, cw) = (self.height, self.width);
        if ch == 0 || cw == 0 {
            return Err(Error::invalid(format!(
                "RandomCrop: crop size must be positive, got {ch}x{cw}"
            )));
        }
        let mut offset: Option<(usize, usize)> = None;
        let mut out = Vec::with_capacity(inputs.len());
        for t in &inputs {
            let i = Hwc::of("RandomCrop", t)?;
            let (mut img, mut i) = if self.padding == [0; 4] {
                (t.clone(), i)
            } else {
                pad(t, i, self.padding, self.mode, self.fill)?
            };
            if self.pad_if_needed && (i.h < ch || i.w < cw) {
                let dy = ch.saturating_sub(i.h);
                let dx = cw.saturating_sub(i.w);
                (img, i) = pad(&img, i, [dy, dy, dx, dx], self.mode, self.fill)?;
            }
            if i.h < ch || i.w < cw {
                return Err(Error::invalid(format!(
                    "RandomCrop: crop {ch}x{cw} is larger than the (padded) image {}x{}; pad it or set pad_if_needed",
                    i.h, i.w
                )));
            }
            // One window for all columns (an image and its mask stay aligned).
            let (y, x) = *offset.get_or_insert_with(|| {
                let x = rng.below((i.w - cw) as u64 + 1) as usize;
                let y = rng.below((i.h - ch) as u64 + 1) as usize;
                (y, x)
            });
            if y + ch > i.h || x + cw > i.w {
                return Err(Error::invalid(format!(
                    "RandomCrop: the input columns differ in size ({}x{} after padding)",
                    i.h, i.w
                )));
            }
            out.push(crop(&img, i, y, x, ch, cw)?);
        }
        Ok(out)
    }
}

/// Mirrors left-right with probability `prob` (default 0.5); all input columns together.
#[derive(Clone, Debug)]
pub struct RandomHorizontalFlip {
    prob: f64,
}

impl RandomHorizontalFlip {
    pub fn new(prob: f64) -> RandomHorizontalFlip {
        RandomHorizontalFlip { prob }
    }
}

impl Default for RandomHorizontalFlip {
    fn default() -> Self {
        RandomHorizontalFlip::new(0.5)
    }
}

impl TensorOp for RandomHorizontalFlip {
    fn name(&self) -> String {
        "RandomHorizontalFlip".into()
    }
    fn apply(&self, inputs: Vec<Tensor>, rng: &mut Rng) -> Result<Vec<Tensor>> {
        if !(0.0..=1.0).contains(&self.prob) {
            return Err(Error::invalid(format!(
                "RandomHorizontalFlip: prob must be in [0, 1], got {}",
                self.prob
            )));
        }
        if rng.uniform() >= self.prob {
            return Ok(inputs);
        }
        inputs
            .iter()
            .map(|t| {
                let i = Hwc::of("RandomHorizontalFlip", t)?;
                with_dtype!(t.dtype(), T => {
                    let src = elements::<T>(t)?;
                    let mut out = Vec::with_capacity(src.len());
                    for r in 0..i.h {
                        for x in (0..i.w).rev() {
                            let p = (r * i.w + x) * i.c;
                            out.extend_from_slice(&src[p..p + i.c]);
                        }
                    }
                    Tensor::from_vec(out, t.shape())
                })
            })
            .collect()
    }
}

/// The central `height x width` window at offset `floor((H - h) / 2)`; an image smaller
/// than the crop is zero-padded first (the extra pixel of an odd pad goes on top/left).
#[derive(Clone, Debug)]
pub struct CenterCrop {
    height: usize,
    width: usize,
}

impl CenterCrop {
    pub fn new(height: usize, width: usize) -> CenterCrop {
        CenterCrop { height, width }
    }
}

impl TensorOp for CenterCrop {
    fn name(&self) -> String {
        "CenterCrop".into()
    }
    fn apply(&self, inputs: Vec<Tensor>, _: &mut Rng) -> Result<Vec<Tensor>> {
        let t = single("CenterCrop", inputs)?;
        let (ch, cw) = (self.height, self.width);
        if ch == 0 || cw == 0 {
            return Err(Error::invalid(format!(
                "CenterCrop: crop size must be positive, got {ch}x{cw}"
            )));
        }
        let mut i = Hwc::of("CenterCrop", &t)?;
        let mut img = t;
        let (dy, dx) = (ch.saturating_sub(i.h), cw.saturating_sub(i.w));
        if dy > 0 || dx > 0 {
            let tblr = [dy.div_ceil(2), dy / 2, dx.div_ceil(2), dx / 2];
            (img, i) = pad(&img, i, tblr, Border::Constant, [0.0; 3])?;
        }
        Ok(vec![crop(&img, i, (i.h - ch) / 2, (i.w - cw) / 2, ch, cw)?])
    }
}

/// Decodes PNG or JPEG bytes (a 1-D UInt8 tensor, as ImageFolderDataset yields) into an
/// RGB `[H, W, 3]` UInt8 image.
#[derive(Clone, Copy, Debug, Default)]
pub struct Decode;

impl TensorOp for Decode {
    fn name(&self) -> String {
        "Decode".into()
    }
    fn apply(&self, inputs: Vec<Tensor>, _: &mut Rng) -> Result<Vec<Tensor>> {
        let t = single("Decode", inputs)?;
        if t.rank() != 1 || t.dtype() != DType::U8 {
            return Err(Error::invalid(format!(
                "Decode: expected encoded bytes (a 1-D UInt8 tensor), got {:?} {}",
                t.shape(),
                t.dtype()
            )));
        }
        Ok(vec![decode_bytes(&elements::<u8>(&t)?)?])
    }
}

/// Memory a decoded image may take: 64 MiB (a 4096x4096 RGBA image), or more when the
/// file is large enough to justify it (PNG's deflate and JPEG's entropy coding shrink
/// plain images by up to about a thousand times). Why: a 60-byte PNG may declare
/// 100000x100000 pixels; the decoder refuses it before allocating.
pub fn decode_limit(encoded_len: usize) -> u64 {
    (64u64 << 20).max((encoded_len as u64).saturating_mul(1100))
}

/// PNG/JPEG bytes to an RGB `[H, W, 3]` UInt8 tensor. Images whose decoded size exceeds
/// [`decode_limit`] are an error, not an allocation.
pub fn decode_bytes(bytes: &[u8]) -> Result<Tensor> {
    let failed = |e: &dyn std::fmt::Display| {
        Error::invalid(format!(
            "Decode: cannot decode the image ({} bytes): {e}",
            bytes.len()
        ))
    };
    let mut reader = image::ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| failed(&e))?;
    let mut limits = image::Limits::default();
    limits.max_alloc = Some(decode_limit(bytes.len()));
    reader.limits(limits);
    let decoded = reader.decode().map_err(|e| failed(&e))?;
    let rgb_bytes = u64::from(decoded.width()) * u64::from(decoded.height()) * 3;
    if rgb_bytes > decode_limit(bytes.len()) {
        return Err(failed(&format!(
            "{}x{} RGB needs {rgb_bytes} bytes, more than the limit of {} for a file this size",
            decoded.width(),
            decoded.height(),
            decode_limit(bytes.len())
        )));
    }
    let img = decoded.to_rgb8();
    let (w, h) = (img.width() as usize, img.height() as usize);
    Tensor::from_vec(img.into_raw(), &[h, w, 3])
}
