//! The input gradient of a stride-1 convolution as a forward convolution: `dY` convolved
//! with each group's filter transposed and turned by 180° (padding `dilation·(K-1) - pad`
//! per side, see `plan::transposed_geometry`), on whatever path that forward pass takes.
//!
//! ```text
//! dX = conv2d(dY, W'),   W'[c][o][i][j] = W[o][c][KH-1-i][KW-1-j]
//! ```
//!
//! Why: each of the forward pass's tiles sums the whole depth (`O·KH·KW`) before it is
//! stored, where the scatter-add product stores a tile after `O` steps and col2im adds a
//! column matrix back into the image (ResNet's stride-1 3x3 layers).

use rayon::prelude::*;

use super::geometry::ConvGeometry;
use crate::arena;

/// Filter rows (input channels) one task writes: its reads of the source, one output
/// channel at a time, are then `ROWS · KH · KW` consecutive values, and its writes go to
/// `ROWS` rows that stay in cache.
const ROWS: usize = 32;

/// Each group's filter transposed and turned by 180°: `W'[c][o][i][j] = W[o][c][KH-1-i]
/// [KW-1-j]` ([C, O/groups, KH, KW]), the filter of `plan::transposed_geometry`'s convolution.
///
/// Why in blocks of rows, on every thread: written one output value at a time down its
/// columns, the transpose of a 1x1 layer's 2048 x 512 filter took longer than the
/// product it feeds (BENCHMARKS.md, "Where the time goes: ResNet-50 training").
pub(super) fn transposed_filter(w: &[f32], g: &ConvGeometry) -> Vec<f32> {
    let (og, cg, kk) = (g.og(), g.cg(), g.kh * g.kw);
    let mut wt = arena::for_overwrite::<f32>(w.len());
    let row_len = og * kk;
    if row_len == 0 {
        return wt;
    }
    let fill = |(block, rows): (usize, &mut [f32])| {
        // Where each row's source values start (output channel 0 of its group).
        let mut bases = [0usize; ROWS];
        for (i, base) in bases.iter_mut().enumerate() {
            let r = block * ROWS + i;
            *base = ((r / cg) * og * cg + r % cg) * kk;
        }
        for o in 0..og {
            let at = o * cg * kk;
            for (row, &base) in rows.chunks_exact_mut(row_len).zip(&bases) {
                if kk == 1 {
                    row[o] = w[base + at];
                    continue;
                }
                let src = &w[base + at..][..kk];
                for (d, &v) in row[o * kk..][..kk].iter_mut().zip(src.iter().rev()) {
                    *d = v;
                }
            }
        }
    };
    if w.len() < crate::layout::PARALLEL_THRESHOLD {
        wt.chunks_mut(ROWS * row_len).enumerate().for_each(fill);
    } else {
        wt.par_chunks_mut(ROWS * row_len).enumerate().for_each(fill);
    }
    wt
}
