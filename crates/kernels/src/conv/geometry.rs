//! [`ConvGeometry`]: every size of one convolution, resolved once.
//!
//! ```
//! use spore_kernels::conv::ConvGeometry;
//! // LeNet's first layer: 1 -> 6 channels, 32x32 images, 5x5 filters.
//! let g = ConvGeometry::new([32, 1, 32, 32], [6, 1, 5, 5], [1, 1], [1, 1], [0; 4], 1);
//! assert_eq!((g.oh, g.ow), (28, 28));
//! ```

/// Every size a convolution needs, resolved once (pads are explicit: top, bottom, left, right).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvGeometry {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    pub pads: [usize; 4],
    pub groups: usize,
    pub oh: usize,
    pub ow: usize,
}

impl ConvGeometry {
    /// `input` = [N, C, H, W], `weight` = [O, C/groups, KH, KW]. The caller validated that
    /// the window fits (output sizes are at least 1).
    pub fn new(
        input: [usize; 4],
        weight: [usize; 4],
        stride: [usize; 2],
        dilation: [usize; 2],
        pads: [usize; 4],
        groups: usize,
    ) -> ConvGeometry {
        let [n, c, h, w] = input;
        let [o, _, kh, kw] = weight;
        let oh = (h + pads[0] + pads[1] - dilation[0] * (kh - 1) - 1) / stride[0] + 1;
        let ow = (w + pads[2] + pads[3] - dilation[1] * (kw - 1) - 1) / stride[1] + 1;
        ConvGeometry {
            n,
            c,
            h,
            w,
            o,
            kh,
            kw,
            stride,
            dilation,
            pads,
            groups,
            oh,
            ow,
        }
    }

    pub(crate) fn cg(&self) -> usize {
        self.c / self.groups
    }
    pub(crate) fn og(&self) -> usize {
        self.o / self.groups
    }
    /// Rows of the im2col matrix of one group.
    pub(crate) fn ckk(&self) -> usize {
        self.cg() * self.kh * self.kw
    }
    pub(crate) fn ohw(&self) -> usize {
        self.oh * self.ow
    }
    /// Height and width of a zero-bordered input plane.
    pub(crate) fn padded_size(&self) -> (usize, usize) {
        (
            self.h + self.pads[0] + self.pads[1],
            self.w + self.pads[2] + self.pads[3],
        )
    }
    /// Wide positions of one image: from the first window's corner to the last one's,
    /// counting whole (zero-bordered) image rows (`OH - 1` rows of the padded width,
    /// then `OW`).
    pub(crate) fn wide_len(&self) -> usize {
        (self.oh - 1) * self.padded_size().1 + self.ow
    }
}
