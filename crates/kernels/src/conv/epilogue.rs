//! What a convolution does to each output value before it is stored: an inference
//! BatchNorm or a bias (a factor and a term per output channel), a residual addend laid
//! out as the output, then ReLU, in that order. The `Panels` path applies it in its GEMM
//! tiles, while the values are in registers, where one image is one product; the other
//! paths (Winograd, several images per product) in one pass over each block of output
//! planes right after it is computed, while they are in cache. (Winograd's output
//! transform applying it as it stores each row was built and measured: no faster than
//! the pass, whose planes are still in L2; BENCHMARKS.md, "ONNX".) Either way the separate
//! elementwise op, with its own read and write of the output, is gone.
//!
//! ```
//! use spore_kernels::conv::{conv2d, ChannelEpilogue, ConvGeometry};
//! use spore_kernels::conv::epilogue::conv2d_finished;
//! let g = ConvGeometry::new([1, 2, 4, 4], [3, 2, 3, 3], [1, 1], [1, 1], [1; 4], 1);
//! let (x, w) = (vec![0.5f32; 2 * 16], vec![0.25f32; 3 * 2 * 9]);
//! let (scale, shift) = ([2.0f32, -1.0, 0.5], [0.0f32, 1.0, -3.0]);
//! let e = ChannelEpilogue { scale: Some(&scale), shift: Some(&shift), addend: None, relu: true };
//! let y = conv2d_finished(&x, &w, &g, &e);
//! let plain = conv2d(&x, &w, &g);
//! for (i, (&y, &p)) in y.iter().zip(&plain).enumerate() {
//!     let o = i / 16;
//!     assert_eq!(y, (p * scale[o] + shift[o]).max(0.0));
//! }
//! ```
//!
//! Values keep the bits of the separate ops: the factor's product is rounded before the
//! term is added (no fused multiply-add), as the compiler's `MulAdd` loop does, and ReLU
//! is the elementwise one (`x > 0 ? x : 0`).

use rayon::prelude::*;

use super::geometry::ConvGeometry;
use super::plan::{ConvPath, Pass, choose};
use super::{forward_on, panels};
use crate::arena;
use crate::sgemm::TileEpilogue;

/// A convolution's epilogue (see the module documentation). `scale` and `shift` hold one
/// value per output channel, `addend` one per output value.
#[derive(Clone, Copy, Debug, Default)]
pub struct ChannelEpilogue<'a> {
    pub scale: Option<&'a [f32]>,
    pub shift: Option<&'a [f32]>,
    pub addend: Option<&'a [f32]>,
    pub relu: bool,
}

/// Values an output-plane task covers at least: smaller planes are grouped so that a
/// task is worth a thread's wake-up.
const MIN_TASK_VALUES: usize = 1 << 14;

impl ChannelEpilogue<'_> {
    /// Whether it leaves every value as it is.
    pub fn is_empty(&self) -> bool {
        self.scale.is_none() && self.shift.is_none() && self.addend.is_none() && !self.relu
    }

    /// Checks the operands' lengths against the convolution `g`; the error says which
    /// operand and both lengths.
    pub fn check(&self, g: &ConvGeometry) -> Result<(), String> {
        for (name, v, want) in [
            ("scale", self.scale, g.o),
            ("shift", self.shift, g.o),
            ("addend", self.addend, g.n * g.o * g.ohw()),
        ] {
            if let Some(v) = v
                && v.len() != want
            {
                return Err(format!(
                    "convolution epilogue: {name} needs {want} values, got {}",
                    v.len()
                ));
            }
        }
        Ok(())
    }

    /// The tiles' form of the epilogue for the product of one image's `group` (C holds
    /// that group's output channels, one row each, rows `ohw` apart).
    pub(crate) fn tiles(&self, g: &ConvGeometry, image: usize, group: usize) -> TileEpilogue {
        let first_channel = group * g.og();
        let addend_at = (image * g.o + first_channel) * g.ohw();
        TileEpilogue::channels(
            self.scale.map(|s| s[first_channel..].as_ptr()),
            self.shift.map(|t| t[first_channel..].as_ptr()),
            self.addend.map(|d| d[addend_at..].as_ptr()),
            self.relu,
        )
    }

    /// The epilogue as a pass over `y`, the output planes of images `first_image..`
    /// (each `g.o` planes of `g.ohw()` values), in parallel blocks of planes.
    pub(crate) fn apply_images(&self, y: &mut [f32], g: &ConvGeometry, first_image: usize) {
        let ohw = g.ohw();
        if self.is_empty() || ohw == 0 {
            return;
        }
        let first_plane = first_image * g.o;
        let planes_per_task = MIN_TASK_VALUES.div_ceil(ohw).max(1);
        y.par_chunks_mut(planes_per_task * ohw)
            .enumerate()
            .for_each(|(t, block)| {
                for (i, plane) in block.chunks_mut(ohw).enumerate() {
                    let index = first_plane + t * planes_per_task + i;
                    let addend = self.addend.map(|d| &d[index * ohw..][..ohw]);
                    self.apply_plane(plane, index % g.o, addend);
                }
            });
    }

    /// One output plane of `channel`, in L1-sized pieces, each step a loop of its own
    /// (which the compiler vectorises).
    fn apply_plane(&self, plane: &mut [f32], channel: usize, addend: Option<&[f32]>) {
        const PIECE: usize = 1024;
        let scale = self.scale.map(|s| s[channel]);
        let shift = self.shift.map(|t| t[channel]);
        for (p, piece) in plane.chunks_mut(PIECE).enumerate() {
            if let Some(s) = scale {
                piece.iter_mut().for_each(|v| *v *= s);
            }
            if let Some(t) = shift {
                piece.iter_mut().for_each(|v| *v += t);
            }
            if let Some(d) = addend {
                let d = &d[p * PIECE..][..piece.len()];
                piece.iter_mut().zip(d).for_each(|(v, &d)| *v += d);
            }
            if self.relu {
                piece
                    .iter_mut()
                    .for_each(|v| *v = if *v > 0.0 { *v } else { 0.0 });
            }
        }
    }
}

/// `conv2d(x, w)` through the epilogue `e`; on the `Panels` path the tiles apply it where
/// one image is one product. Panics when `e`'s operands do not fit `g` (a caller's bug:
/// check them first with [`ChannelEpilogue::check`]), since the tiles read them through
/// raw pointers.
pub fn conv2d_finished(x: &[f32], w: &[f32], g: &ConvGeometry, e: &ChannelEpilogue) -> Vec<f32> {
    if let Err(why) = e.check(g) {
        panic!("conv2d_finished: {why}");
    }
    let path = choose(g, Pass::Forward, true);
    let len = g.n * g.o * g.ohw();
    if path == ConvPath::Panels && len > 0 && g.ckk() > 0 {
        // Not zeroed: the path writes every element.
        let mut y = arena::for_overwrite::<f32>(len);
        panels::forward_finished(x, w, g, &mut y, e);
        return y;
    }
    let (mut y, _) = forward_on(path, x, w, g, false);
    e.apply_images(&mut y, g, 0);
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conv::conv2d;
    use crate::conv::prepared::{conv2d_prepared_finished, prepare_filters};
    use crate::conv::test_values as values;

    /// The epilogue as the separate elementwise ops compute it, value by value.
    fn reference(plain: &[f32], g: &ConvGeometry, e: &ChannelEpilogue) -> Vec<f32> {
        plain
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let o = (i / g.ohw()) % g.o;
                let mut v = e.scale.map_or(v, |s| v * s[o]);
                v = e.shift.map_or(v, |t| v + t[o]);
                v = e.addend.map_or(v, |d| v + d[i]);
                // ReLU as the elementwise op: NaN and -0 give +0.
                match e.relu {
                    true if v > 0.0 => v,
                    true => 0.0,
                    false => v,
                }
            })
            .collect()
    }

    /// Every combination of the parts, on geometries that take the tiles (batch 1 and
    /// batches of images per product, groups) and the pass after (Winograd with whole
    /// and cut tiles, 1x1), per call and from prepared filters, gives the bits of the
    /// convolution followed by the separate ops.
    #[test]
    fn the_epilogue_gives_the_bits_of_the_separate_ops_on_every_path() {
        let cases = [
            ConvGeometry::new([1, 32, 8, 8], [40, 32, 3, 3], [1, 1], [1, 1], [1; 4], 1),
            ConvGeometry::new([3, 16, 6, 6], [24, 16, 3, 3], [1, 1], [1, 1], [1; 4], 1),
            ConvGeometry::new([1, 64, 32, 32], [64, 64, 3, 3], [1, 1], [1, 1], [1; 4], 1),
            ConvGeometry::new([2, 8, 9, 7], [12, 4, 3, 2], [2, 1], [1, 1], [1, 0, 1, 1], 2),
            ConvGeometry::new([1, 64, 4, 4], [128, 64, 1, 1], [2, 2], [1, 1], [0; 4], 1),
            // Tiles cut by the image's edge (10 = 4 + 4 + 2).
            ConvGeometry::new([2, 16, 10, 10], [24, 16, 3, 3], [1, 1], [1, 1], [1; 4], 1),
        ];
        let mut paths = std::collections::HashSet::new();
        for g in cases {
            let x = values(g.n * g.c * g.h * g.w, 1);
            let w = values(g.o * g.ckk(), 2);
            let scale = values(g.o, 3);
            let shift = values(g.o, 4);
            let addend = values(g.n * g.o * g.ohw(), 5);
            let plain = conv2d(&x, &w, &g);
            let prepared = prepare_filters(&w, &g);
            paths.insert(choose(&g, Pass::Forward, true));
            for parts in 0..16u32 {
                let e = ChannelEpilogue {
                    scale: (parts & 1 != 0).then_some(&scale[..]),
                    shift: (parts & 2 != 0).then_some(&shift[..]),
                    addend: (parts & 4 != 0).then_some(&addend[..]),
                    relu: parts & 8 != 0,
                };
                e.check(&g).unwrap();
                let want = reference(&plain, &g, &e);
                let mut results = vec![("per call", conv2d_finished(&x, &w, &g, &e))];
                if let Some(p) = &prepared {
                    results.push(("prepared", conv2d_prepared_finished(&x, p, &g, &e)));
                }
                for (how, got) in results {
                    let same = got
                        .iter()
                        .zip(&want)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same && got.len() == want.len(),
                        "{g:?}, parts {parts:04b}, {how}, path {:?}",
                        choose(&g, Pass::Forward, true)
                    );
                }
            }
        }
        if crate::sgemm::available() {
            for path in [ConvPath::Panels, ConvPath::Winograd] {
                assert!(paths.contains(&path), "no case took {path:?}: {paths:?}");
            }
        }
    }

    #[test]
    fn operands_of_the_wrong_length_are_named() {
        let g = ConvGeometry::new([1, 2, 4, 4], [3, 2, 3, 3], [1, 1], [1, 1], [1; 4], 1);
        let short = [1.0f32; 2];
        let e = ChannelEpilogue {
            shift: Some(&short),
            ..Default::default()
        };
        let err = e.check(&g).unwrap_err();
        assert!(err.contains("shift needs 3 values, got 2"), "{err}");
        // The kernel checks them too rather than let its tiles read past them.
        let (x, w) = (vec![0.5f32; 2 * 16], vec![0.25f32; 3 * 2 * 9]);
        let caught = std::panic::catch_unwind(|| conv2d_finished(&x, &w, &g, &e));
        assert!(caught.is_err(), "a short shift must not reach the tiles");
    }
}
