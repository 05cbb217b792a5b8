//! Filters prepared once for many forward passes: the packed GEMM panels of the `Panels`
//! path or the transformed filters of `Winograd`, which a forward pass otherwise makes
//! again on every call (a third of ResNet-18's time at batch 1). The caller keeps a
//! [`PreparedFilters`] while the weights do not change (Spore's core caches them per
//! weight buffer for cells in evaluation mode).
//!
//! ```
//! use spore_kernels::conv::{conv2d, ConvGeometry};
//! use spore_kernels::conv::prepared::{conv2d_prepared, prepare_filters};
//! let g = ConvGeometry::new([1, 32, 8, 8], [32, 32, 3, 3], [1, 1], [1, 1], [1; 4], 1);
//! let x = vec![0.5f32; 32 * 64];
//! let w = vec![0.25f32; 32 * 32 * 9];
//! if let Some(p) = prepare_filters(&w, &g) {
//!     assert_eq!(conv2d_prepared(&x, &p, &g, false), conv2d(&x, &w, &g));
//! }
//! ```

use super::epilogue::ChannelEpilogue;
use super::geometry::ConvGeometry;
use super::plan::{ConvPath, Pass, choose};
use super::{panels, winograd};
use crate::arena;

/// One weight's filters in the form one forward path reads.
#[derive(Debug)]
pub struct PreparedFilters {
    path: ConvPath,
    geometry: ConvGeometry,
    data: Vec<f32>,
    /// Values per group (`Panels`).
    group_len: usize,
}

impl PreparedFilters {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.data.len() * std::mem::size_of::<f32>()
    }

    /// Whether these filters serve a forward pass of `g`: the same filters and the path
    /// the planner picks for `g` (which may change with the batch).
    pub fn serves(&self, g: &ConvGeometry) -> bool {
        let f = |g: &ConvGeometry| (g.o, g.c, g.kh, g.kw, g.groups, g.stride, g.dilation, g.pads);
        f(&self.geometry) == f(g) && choose(g, Pass::Forward, true) == self.path
    }
}

/// The filters of `w` prepared for forward passes of `g`, when the planner's path for
/// `g` has a per-call preparation (`Panels`, `Winograd`); `None` otherwise.
pub fn prepare_filters(w: &[f32], g: &ConvGeometry) -> Option<PreparedFilters> {
    if g.n * g.o * g.ohw() == 0 || g.ckk() == 0 || w.len() < g.o * g.ckk() {
        return None;
    }
    let path = choose(g, Pass::Forward, true);
    let (data, group_len) = match path {
        ConvPath::Panels => panels::packed_filters(w, g, false),
        ConvPath::Winograd => (winograd::transform_filters(w, g), 0),
        _ => return None,
    };
    Some(PreparedFilters {
        path,
        geometry: *g,
        data,
        group_len,
    })
}

/// `conv2d(x, w)` (with `relu`, `relu(conv2d(x, w))`) from filters [`prepare_filters`]
/// made for `w`. Panics when `prepared` does not [`serve`](PreparedFilters::serves) `g`
/// or `x` is too small (a caller's bug: check `serves` first).
pub fn conv2d_prepared(
    x: &[f32],
    prepared: &PreparedFilters,
    g: &ConvGeometry,
    relu: bool,
) -> Vec<f32> {
    let e = ChannelEpilogue {
        relu,
        ..Default::default()
    };
    conv2d_prepared_finished(x, prepared, g, &e)
}

/// [`conv2d_prepared`] through the epilogue `e`: applied by the tiles on the `Panels` path
/// where one image is one product, else in a pass over each block of images after their
/// product (`Winograd`'s too). Panics as [`conv2d_prepared`] does, and when `e`'s
/// operands do not fit `g` (check them first with [`ChannelEpilogue::check`]).
pub fn conv2d_prepared_finished(
    x: &[f32],
    prepared: &PreparedFilters,
    g: &ConvGeometry,
    e: &ChannelEpilogue,
) -> Vec<f32> {
    assert!(
        prepared.serves(g) && x.len() >= g.n * g.c * g.h * g.w,
        "conv2d_prepared: filters prepared for {:?} do not serve {g:?}",
        prepared.geometry
    );
    if let Err(why) = e.check(g) {
        panic!("conv2d_prepared_finished: {why}");
    }
    // Not zeroed: both paths write every element.
    let mut y = arena::for_overwrite::<f32>(g.n * g.o * g.ohw());
    let e = Some(e).filter(|e| !e.is_empty());
    match prepared.path {
        ConvPath::Winograd => {
            winograd::forward_transformed(x, &prepared.data, g, &mut y);
            if let Some(e) = e {
                e.apply_images(&mut y, g, 0);
            }
        }
        _ => panels::forward_packed(x, &prepared.data, prepared.group_len, g, &mut y, e),
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conv::{conv2d, conv2d_relu, test_values as values};

    /// Prepared filters give the very result of the per-call path, with and without the
    /// ReLU, on a `Winograd` and a `Panels` geometry (and grouped ones); another batch
    /// that moves the planner to another path is not served.
    #[test]
    fn prepared_filters_give_the_same_output_as_the_per_call_path() {
        let cases = [
            ConvGeometry::new([4, 16, 8, 8], [24, 16, 3, 3], [1, 1], [1, 1], [1; 4], 1),
            ConvGeometry::new([1, 64, 4, 4], [64, 64, 3, 3], [1, 1], [1, 1], [1; 4], 1),
            ConvGeometry::new([2, 8, 9, 7], [12, 4, 3, 2], [2, 1], [1, 1], [1, 0, 1, 1], 2),
        ];
        let mut prepared_any = false;
        for g in cases {
            let x = values(g.n * g.c * g.h * g.w, 1);
            let w = values(g.o * g.ckk(), 2);
            let Some(p) = prepare_filters(&w, &g) else {
                continue;
            };
            prepared_any = true;
            assert_eq!(
                conv2d_prepared(&x, &p, &g, false),
                conv2d(&x, &w, &g),
                "{g:?}"
            );
            assert_eq!(
                conv2d_prepared(&x, &p, &g, true),
                conv2d_relu(&x, &w, &g),
                "{g:?}"
            );
            assert!(p.bytes() >= g.o * g.ckk() * 4);
        }
        let wide = ConvGeometry::new([4, 16, 8, 8], [24, 16, 3, 3], [1, 1], [1, 1], [1; 4], 1);
        let narrow = ConvGeometry::new([1, 16, 8, 8], [24, 16, 3, 3], [1, 1], [1, 1], [1; 4], 1);
        if let Some(p) = prepare_filters(&values(24 * 16 * 9, 3), &wide)
            && choose(&wide, Pass::Forward, true) != choose(&narrow, Pass::Forward, true)
        {
            assert!(!p.serves(&narrow), "a batch on another path is not served");
        }
        if crate::sgemm::available() {
            assert!(
                prepared_any,
                "no geometry was prepared on a machine with the AVX2 GEMM"
            );
        }
    }
}
