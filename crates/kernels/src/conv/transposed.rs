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
/// channel at a time, are then runs of up to `ROWS · KH · KW` consecutive values (one
/// run per group the rows fall in), and its writes go to `ROWS` rows that stay in cache.
const ROWS: usize = 32;

/// Each group's filter transposed and turned by 180°: `W'[c][o][i][j] = W[o][c][KH-1-i]
/// [KW-1-j]` ([C, O/groups, KH, KW]), the filter of `plan::transposed_geometry`'s convolution.
///
/// Why in blocks of rows, on every thread: copied one source filter at a time, each
/// value lands `O · KH · KW` values after the last, so every write touches another
/// cache line (1x1 layers, whose copy this was, now skip it: `one_by_one_as_forward`).
pub(super) fn transposed_filter(w: &[f32], g: &ConvGeometry) -> Vec<f32> {
    let (og, cg, kk) = (g.og(), g.cg(), g.kh * g.kw);
    // Exactly the filter's values: a longer `w` has rows no output channel reads.
    let mut wt = arena::for_overwrite::<f32>(g.o * g.ckk());
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
                let src = &w[base + at..][..kk];
                for (d, &v) in row[o * kk..][..kk].iter_mut().zip(src.iter().rev()) {
                    *d = v;
                }
            }
        }
    };
    if wt.len() < crate::layout::PARALLEL_THRESHOLD {
        wt.chunks_mut(ROWS * row_len).enumerate().for_each(fill);
    } else {
        wt.par_chunks_mut(ROWS * row_len).enumerate().for_each(fill);
    }
    wt
}
