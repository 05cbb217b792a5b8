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

use super::geometry::ConvGeometry;
use crate::arena;

/// Each group's filter transposed and turned by 180°: `W'[c][o][i][j] = W[o][c][KH-1-i]
/// [KW-1-j]` ([C, O/groups, KH, KW]), the filter of `plan::transposed_geometry`'s convolution.
pub(super) fn transposed_filter(w: &[f32], g: &ConvGeometry) -> Vec<f32> {
    let (og, cg, kk) = (g.og(), g.cg(), g.kh * g.kw);
    let mut wt = arena::for_overwrite::<f32>(w.len());
    for group in 0..g.groups {
        for o in 0..og {
            for c in 0..cg {
                let src = &w[((group * og + o) * cg + c) * kk..][..kk];
                let dst = &mut wt[((group * cg + c) * og + o) * kk..][..kk];
                for (d, &v) in dst.iter_mut().zip(src.iter().rev()) {
                    *d = v;
                }
            }
        }
    }
    wt
}
