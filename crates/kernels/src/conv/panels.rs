//! A convolution's column matrix, never written whole: the GEMM's B panels are copied
//! straight from the images, 16 columns and one depth block at a time.
//!
//! ```
//! use spore_kernels::conv::{conv2d, ConvGeometry};
//! // ResNet's first-stage convolution: padded 3x3, 64 -> 64 channels, 32x32 images
//! // (the planner's `Panels` path where Spore's GEMM runs and Winograd is off).
//! let g = ConvGeometry::new([1, 64, 32, 32], [64, 64, 3, 3], [1, 1], [1, 1], [1; 4], 1);
//! let y = conv2d(&vec![1.0f32; 64 * 32 * 32], &vec![1.0f32; 64 * 64 * 9], &g);
//! // An interior output sums 64 channels x 9 taps; a corner's window keeps 4 taps.
//! assert_eq!((y[33], y[0]), (576.0, 256.0));
//! ```
//!
//! ```text
//! forward:          Y[out][position]  = W[out][tap] · cols[tap][position]
//! weight gradient:  dW[out][tap]      = dY[out][position] · cols[tap][position]ᵀ
//! cols[tap][position] = x[image][c][oy·sy + i·dy - pad_top][ox·sx + j·dx - pad_left]
//!                       (zero outside the image), tap = (c, i, j)
//! ```
//!
//! Why: im2col wrote a `C·KH·KW x OH·OW` matrix per image (ResNet's first stage: 2.3 MB,
//! nine times the image) out to L3, and packing read it back to copy it once more into
//! panels. Writing each panel from the image instead keeps the copy in L1 and does it
//! once; the padding becomes zeros written where a window leaves the image.
//!
//! `ImageColumns::pack_positions` writes the forward pass's panels (taps down, 16
//! positions across: each row a short run of one image row), `ImageColumns::pack_taps`
//! the weight gradient's (positions down, 16 taps across: each tap's run of positions,
//! then an 8x8-block transpose).

use rayon::prelude::*;

use super::batch::{
    batch_blocks, group_output_gradient, scatter_image, split_products_pay, sum_partials,
};
use super::epilogue::ChannelEpilogue;
use super::geometry::ConvGeometry;
use super::lowering::{border_plane, copy_short};
use super::panel_copies::{copy_16, copy_16_even, prefetch_ahead};
use super::plan::GEMM_COLUMNS;
use crate::matmul::MatRef;
use crate::sgemm::{self, NR, PanelsA, pack_b_panel};
use crate::{Buffer, arena};

/// The column matrix of group `group` of images `s0..s0 + images`, side by side (image
/// `s` at column `s * OH * OW`), as a source of GEMM panels. A padded layer's images are
/// first copied into zero-bordered planes, so that every window lies inside them and each
/// panel row is plain copies.
pub(crate) struct ImageColumns<'a> {
    /// The (padded) planes: image `s` of the chunk at `first + s * image_stride`.
    src: &'a [f32],
    first: usize,
    image_stride: usize,
    /// Values between planes and between rows of `src`.
    plane_len: usize,
    row_len: usize,
    g: &'a ConvGeometry,
}

/// Values of padded planes that [`ImageColumns::new`] needs for `images` images.
pub(crate) fn padded_len(g: &ConvGeometry, images: usize) -> usize {
    if g.pads == [0; 4] {
        0
    } else {
        images * g.cg() * (g.h + g.pads[0] + g.pads[1]) * (g.w + g.pads[2] + g.pads[3])
    }
}

impl<'a> ImageColumns<'a> {
    /// `x` is the whole batch ([N, C, H, W]); `padded` holds at least
    /// [`padded_len`]`(g, images)` values when the layer is padded.
    pub(crate) fn new(
        x: &'a [f32],
        g: &'a ConvGeometry,
        group: usize,
        (s0, images): (usize, usize),
        padded: &'a mut [f32],
    ) -> Self {
        let (hw, cg) = (g.h * g.w, g.cg());
        if g.pads == [0; 4] {
            return ImageColumns {
                src: x,
                first: (s0 * g.c + group * cg) * hw,
                image_stride: g.c * hw,
                plane_len: hw,
                row_len: g.w,
                g,
            };
        }
        let [top, bottom, left, right] = g.pads;
        let (hp, wp) = (g.h + top + bottom, g.w + left + right);
        let padded = &mut padded[..images * cg * hp * wp];
        for (plane, dst) in padded.chunks_exact_mut(hp * wp).enumerate() {
            let (s, c) = (plane / cg, plane % cg);
            border_plane(&x[((s0 + s) * g.c + group * cg + c) * hw..][..hw], g, dst);
        }
        ImageColumns {
            src: padded,
            first: 0,
            image_stride: cg * hp * wp,
            plane_len: hp * wp,
            row_len: wp,
            g,
        }
    }

    /// Offsets in `src` of taps `t0..` from a window's corner, in the weight's order
    /// (channel, filter row, filter column), counted on rather than divided out for each
    /// (three divisions per 16 values copied cost as much as the multiply-adds).
    fn taps_from(&self, t0: usize) -> impl Iterator<Item = usize> + use<'_> {
        let g = self.g;
        let (mut c, mut i, mut j) = (t0 / (g.kh * g.kw), t0 / g.kw % g.kh, t0 % g.kw);
        std::iter::repeat_with(move || {
            let offset = c * self.plane_len + i * g.dilation[0] * self.row_len + j * g.dilation[1];
            j += 1;
            if j == g.kw {
                j = 0;
                i += 1;
                if i == g.kh {
                    i = 0;
                    c += 1;
                }
            }
            offset
        })
    }

    /// Offset in `src` of the window corner of output position `pos` of image `s`.
    fn corner(&self, s: usize, pos: usize) -> usize {
        let g = self.g;
        let (oy, ox) = (pos / g.ow, pos % g.ow);
        self.first + s * self.image_stride + oy * g.stride[0] * self.row_len + ox * g.stride[1]
    }

    /// Splits positions `first..first + count` (across the chunk's images) into runs
    /// along output rows, written to `runs` as (offset from `first`, length, window
    /// corner); returns how many. Each run is one copy per tap.
    fn row_runs(&self, first: usize, count: usize, runs: &mut [(usize, usize, usize)]) -> usize {
        let (ohw, ow) = (self.g.ohw(), self.g.ow);
        // A pointwise layer reads its plane as it writes its output: one run may cross
        // output rows (only the image's end breaks it).
        let row = if self.is_flat() { ohw } else { ow };
        let (mut n, mut t) = (0, 0);
        while t < count && n < runs.len() {
            let (s, pos) = ((first + t) / ohw, (first + t) % ohw);
            let len = (row - pos % row).min(count - t);
            runs[n] = (t, len, self.corner(s, pos));
            n += 1;
            t += len;
        }
        n
    }

    /// Whether output position `p` of an image reads input position `p` of each plane: a
    /// 1x1 filter at stride 1 (ResNet-50's pointwise layers; a padded one reads its
    /// padded planes so, since its output rows are then as long as theirs).
    fn is_flat(&self) -> bool {
        let g = self.g;
        g.kh == 1 && g.kw == 1 && g.stride == [1, 1] && self.row_len == g.ow
    }

    /// Copies `out.len()` values from `src[at..]`, `stride` apart.
    #[inline(always)]
    fn run(&self, out: &mut [f32], at: usize, stride: usize) {
        if stride != 1 {
            let mut done = 0;
            // Stride 2 (ResNet's downsampling layers), 16 values at a time where 32 can be
            // read: the value-by-value copy below was a large share of their weight
            // gradient (measured: BENCHMARKS.md, "Figures moved from code comments").
            if stride == 2 {
                while done + NR <= out.len() && at + 2 * (done + NR) <= self.src.len() {
                    // SAFETY: 32 values from `at + 2 * done` lie inside `src` (checked
                    // just above), and `out[done..]` holds at least NR.
                    unsafe {
                        copy_16_even(out[done..].as_mut_ptr(), self.src[at + 2 * done..].as_ptr())
                    };
                    done += NR;
                }
            }
            for (t, v) in out.iter_mut().enumerate().skip(done) {
                *v = self.src[at + t * stride];
            }
            return;
        }
        let src = &self.src[at..][..out.len()];
        // A whole panel row: a fixed-size copy (two vector moves) instead of `memmove`.
        match (
            <&mut [f32; NR]>::try_from(&mut *out),
            <&[f32; NR]>::try_from(src),
        ) {
            (Ok(d), Ok(s)) => *d = *s,
            _ => copy_short(out, src),
        }
    }

    /// The forward pass's B panel: taps `p0..p0 + kc` down, positions `j0..j0 + width`
    /// across (`dst[p * NR + q]`; columns past `width` are zero).
    pub(crate) fn pack_positions(
        &self,
        dst: &mut [f32],
        p0: usize,
        kc: usize,
        j0: usize,
        width: usize,
    ) {
        let sx = self.g.stride[1];
        let mut runs = [(0, 0, 0); NR];
        let count = self.row_runs(j0, width, &mut runs);
        if count == 1 && width == NR && self.pack_whole_rows(dst, p0, kc, runs[0].2) {
            return;
        }
        let runs = &runs[..count];
        if sx == 2 {
            return self.pack_short_even_runs(dst, p0, kc, runs, width);
        }
        for (row, tap) in dst.chunks_exact_mut(NR).take(kc).zip(self.taps_from(p0)) {
            for &(q0, len, corner) in runs {
                self.run(&mut row[q0..q0 + len], corner + tap, sx);
            }
            row[width..].fill(0.0);
        }
    }

    /// [`Self::pack_positions`]'s rows at stride 2 where a panel crosses output rows
    /// (ResNet's downsampling layers, whose 28-, 14- and 7-wide rows leave most panels
    /// in up to four runs): each run is written as 16 picks from 32 values, spilling
    /// past its end. The spill lands where a later write goes: the row's next run, its
    /// zeroed tail, or the first run of the next row (rows are written in order, and
    /// the last row's runs spill only where they stay inside `dst`).
    ///
    /// Why: the value-by-value copy of these short runs was a quarter of the 1x1
    /// projection's forward pass under `perf`, and staging the picks in a local row to
    /// copy its share out was slower still (measured: BENCHMARKS.md, "Pointwise panels").
    fn pack_short_even_runs(
        &self,
        dst: &mut [f32],
        p0: usize,
        kc: usize,
        runs: &[(usize, usize, usize)],
        width: usize,
    ) {
        let dst = &mut dst[..kc * NR];
        for (r, tap) in (0..kc).zip(self.taps_from(p0)) {
            let row = r * NR;
            for &(q0, len, corner) in runs {
                let (to, from) = (row + q0, corner + tap);
                if to + NR <= dst.len() && from + 2 * NR <= self.src.len() {
                    // SAFETY: 16 values from `to` lie in `dst` and 32 from `from` in
                    // `src` (both checked just above).
                    unsafe { copy_16_even(dst[to..].as_mut_ptr(), self.src[from..].as_ptr()) };
                } else {
                    self.run(&mut dst[to..to + len], from, 2);
                }
            }
            dst[row + width..row + NR].fill(0.0);
        }
    }

    /// [`Self::pack_positions`] for a panel whose 16 positions lie in one output row, at
    /// stride 1 or 2 (most panels of ResNet's layers at least 16 wide): every panel row
    /// is then one 16-value copy from `corner + tap`, or every other value of 32.
    /// Returns false, having written nothing, where this does not apply (another
    /// stride, more in-plane taps than it tracks, or too short a source), and the general
    /// path runs instead.
    ///
    /// Why a path of its own: the general one spends more on finding each tap's offset
    /// and checking bounds than on the copy, and packing was a large share of the forward
    /// pass under `perf`: in ResNet's first stage, for 64 multiply-adds per copied value,
    /// and in its stride-2 layers, which copied value by value (measured: BENCHMARKS.md,
    /// "Figures moved from code comments").
    fn pack_whole_rows(&self, dst: &mut [f32], p0: usize, kc: usize, corner: usize) -> bool {
        let g = self.g;
        let per_plane = g.kh * g.kw;
        let sx = g.stride[1];
        // In-plane offsets of the taps of one channel, in the weight's order.
        let mut in_plane = [0usize; 64];
        if !(1..=2).contains(&sx)
            || per_plane == 0
            || per_plane > in_plane.len()
            || kc == 0
            || dst.len() < kc * NR
        {
            return false;
        }
        for (k, o) in in_plane.iter_mut().take(per_plane).enumerate() {
            let (i, j) = (k / g.kw, k % g.kw);
            *o = i * g.dilation[0] * self.row_len + j * g.dilation[1];
        }
        // Offsets grow with the tap (a channel's plane holds all of its window rows), so
        // the last tap's copy is the one that reaches furthest.
        let last = p0 + kc - 1;
        // A row reads NR values, or 2 * NR at stride 2 (the last one unused).
        let reach =
            corner + (last / per_plane) * self.plane_len + in_plane[last % per_plane] + sx * NR;
        if reach > self.src.len() {
            return false;
        }
        let (mut c, mut k) = (p0 / per_plane, p0 % per_plane);
        let src = self.src.as_ptr();
        for row in dst.chunks_exact_mut(NR).take(kc) {
            let at = corner + c * self.plane_len + in_plane[k];
            prefetch_ahead(src, at, sx);
            // SAFETY: `at + sx * NR <= reach <= src.len()` (offsets grow with the tap),
            // and `row` holds NR values.
            unsafe {
                if sx == 1 {
                    copy_16(row.as_mut_ptr(), src.add(at))
                } else {
                    copy_16_even(row.as_mut_ptr(), src.add(at))
                }
            };
            k += 1;
            if k == per_plane {
                k = 0;
                c += 1;
            }
        }
        true
    }

    /// The weight gradient's B panel: positions `p0..p0 + kc` down, taps `j0..j0 +
    /// width` across (`dst[p * NR + q]`). `rows` is scratch of at least `NR * kc` values:
    /// each tap's positions are first copied into a row of it, then the rows are
    /// transposed into the panel.
    pub(crate) fn pack_taps(
        &self,
        dst: &mut [f32],
        p0: usize,
        kc: usize,
        j0: usize,
        width: usize,
        rows: &mut [f32],
    ) {
        let sx = self.g.stride[1];
        let mut runs = [(0, 0, 0); sgemm::MAX_DEPTH_BLOCK];
        let count = self.row_runs(p0, kc, &mut runs);
        let runs = &runs[..count];
        // A pointwise layer's 16 taps are 16 planes, and its positions within one image
        // are one run in each: each run's rows of the panel are a transposed B read
        // straight from the planes.
        // Why: copying each run into `rows` first was a fifth of ResNet-50's pointwise
        // weight gradients under `perf` (measured: BENCHMARKS.md, "Pointwise panels").
        if width == NR && self.is_flat() {
            for &(t0, len, corner) in runs {
                let planes = MatRef {
                    offset: corner + j0 * self.plane_len,
                    row_stride: 1,
                    col_stride: self.plane_len as isize,
                };
                pack_b_panel(
                    &mut dst[t0 * NR..][..len * NR],
                    self.src,
                    planes,
                    0,
                    len,
                    0,
                    NR,
                );
            }
            return;
        }
        let rows = &mut rows[..NR * kc];
        let mut taps = self.taps_from(j0);
        for (q, out) in rows.chunks_exact_mut(kc).enumerate() {
            let Some(tap) = taps.next().filter(|_| q < width) else {
                out.fill(0.0);
                continue;
            };
            for &(t0, len, corner) in runs {
                self.run(&mut out[t0..t0 + len], corner + tap, sx);
            }
        }
        // Row q of `rows` is column q of the panel: a transposed B (row stride 1).
        let transposed = MatRef {
            offset: 0,
            row_stride: 1,
            col_stride: kc as isize,
        };
        pack_b_panel(dst, rows, transposed, 0, kc, 0, NR);
    }
}

/// Images side by side in one GEMM: about [`GEMM_COLUMNS`] positions (ResNet's 4x4 and
/// 8x8 layers would otherwise run 16- and 64-column products).
fn images_per_gemm(g: &ConvGeometry, per: usize) -> usize {
    (GEMM_COLUMNS / g.ohw().max(1)).clamp(1, per.max(1))
}

/// Every group's filter packed once as a GEMM's A, shared by all the GEMMs of the batch:
/// `W` (`og x ckk`) for the forward pass, or `Wᵀ` (`ckk x og`, `transposed`) for the input
/// gradient's `Wᵀ · dY`. Returns `groups` slices of `len` values, and `len`.
pub(crate) fn packed_filters(w: &[f32], g: &ConvGeometry, transposed: bool) -> (Vec<f32>, usize) {
    let (og, ckk) = (g.og(), g.ckk());
    let (rows, depth, row_stride, col_stride) = if transposed {
        (ckk, og, 1, ckk as isize)
    } else {
        (og, ckk, ckk as isize, 1)
    };
    let len = sgemm::prepacked_a_len(rows, depth);
    let mut packed = arena::for_overwrite::<f32>(g.groups * len);
    for (group, dst) in packed.chunks_mut(len).enumerate() {
        let filter = MatRef {
            offset: group * og * ckk,
            row_stride,
            col_stride,
        };
        sgemm::prepack_a(dst, w, filter, rows, depth);
    }
    (packed, len)
}

/// Forward pass into `y` ([N, O, OH, OW]); the caller checked [`applies`] and the sizes.
pub(crate) fn forward(x: &[f32], w: &[f32], g: &ConvGeometry, y: &mut [f32]) {
    let (filters, filter_len) = packed_filters(w, g, false);
    forward_packed(x, &filters, filter_len, g, y, None);
    arena::recycle(Buffer::F32(filters));
}

/// [`forward`] through the epilogue `e` (applied by the tiles where one image is one
/// product, else to each block of images right after their products).
pub(crate) fn forward_finished(
    x: &[f32],
    w: &[f32],
    g: &ConvGeometry,
    y: &mut [f32],
    e: &ChannelEpilogue,
) {
    let (filters, filter_len) = packed_filters(w, g, false);
    forward_packed(
        x,
        &filters,
        filter_len,
        g,
        y,
        Some(e).filter(|e| !e.is_empty()),
    );
    arena::recycle(Buffer::F32(filters));
}

/// [`forward`] with the filters already packed by [`packed_filters`] (`filter_len`
/// values per group), through the epilogue where there is one.
pub(crate) fn forward_packed(
    x: &[f32],
    filters: &[f32],
    filter_len: usize,
    g: &ConvGeometry,
    y: &mut [f32],
    epilogue: Option<&ChannelEpilogue>,
) {
    let threads = rayon::current_num_threads();
    // Too few images for a block per thread, and products large enough to split: each is
    // split among the threads.
    let chunk = images_per_gemm(g, g.n) * g.ohw();
    if split_products_pay(g.n, g.og() * chunk * g.ckk()) {
        return forward_split_products(x, filters, filter_len, g, y, threads, epilogue);
    }
    let (ohw, og, ckk) = (g.ohw(), g.og(), g.ckk());
    let out_len = g.o * ohw;
    let (blocks, per) = batch_blocks(g.n);
    let nb = images_per_gemm(g, per);
    // Several images per GEMM: the product lands here, then goes to each image's planes.
    // Per block: the padded images, and the product of several images (which then goes
    // to each image's planes).
    let pad_len = padded_len(g, nb);
    let tmp_len = if nb > 1 { og * nb * ohw } else { 0 };
    let scratch_len = (pad_len + tmp_len).max(1);
    let mut scratch = arena::for_overwrite::<f32>(blocks * scratch_len);
    y.par_chunks_mut(per * out_len)
        .zip(scratch.par_chunks_mut(scratch_len))
        .enumerate()
        .for_each(|(b, (yb, scratch))| {
            let (padded, tmp) = scratch.split_at_mut(pad_len);
            for (c, ys) in yb.chunks_mut(nb * out_len).enumerate() {
                let (s0, k) = (b * per + c * nb, ys.len() / out_len);
                for group in 0..g.groups {
                    let cols = ImageColumns::new(x, g, group, (s0, k), padded);
                    let mut panels = |dst: &mut [f32], p0, kc, j0, width| {
                        cols.pack_positions(dst, p0, kc, j0, width)
                    };
                    let a = PanelsA::Prepacked(&filters[group * filter_len..][..filter_len]);
                    if k == 1 {
                        let yg = &mut ys[group * og * ohw..][..og * ohw];
                        let mnk = (og, ohw, ckk);
                        match epilogue {
                            Some(e) => {
                                let e = e.tiles(g, s0, group);
                                sgemm::blocked_finishing(yg, mnk, a, &mut panels, e)
                            }
                            None => sgemm::blocked_with(yg, false, og, ohw, ckk, a, &mut panels),
                        }
                        continue;
                    }
                    let ld = k * ohw;
                    sgemm::blocked_with(&mut tmp[..og * ld], false, og, ld, ckk, a, &mut panels);
                    for (s, image) in ys.chunks_mut(out_len).enumerate() {
                        scatter_image(tmp, ld, s, (group, og, ohw), image);
                    }
                }
                if k > 1
                    && let Some(e) = epilogue
                {
                    e.apply_images(ys, g, s0);
                }
            }
        });
    arena::recycle(Buffer::F32(scratch));
}

/// [`forward_packed`] where a block of the batch per thread would leave threads idle
/// (see [`split_products_pay`]): the images go one chunk after another (several side by side
/// where they are small, as in the batch split), and each chunk's product is split among
/// the threads (`sgemm::blocked_with_threads`), which pack their own panels from the
/// shared (padded) images.
fn forward_split_products(
    x: &[f32],
    filters: &[f32],
    filter_len: usize,
    g: &ConvGeometry,
    y: &mut [f32],
    threads: usize,
    epilogue: Option<&ChannelEpilogue>,
) {
    let (ohw, og, ckk) = (g.ohw(), g.og(), g.ckk());
    let out_len = g.o * ohw;
    let nb = images_per_gemm(g, g.n);
    let pad_len = padded_len(g, nb);
    let tmp_len = if nb > 1 { og * nb * ohw } else { 0 };
    let mut scratch = arena::for_overwrite::<f32>((pad_len + tmp_len).max(1));
    let (padded, tmp) = scratch.split_at_mut(pad_len);
    for (c, ys) in y.chunks_mut(nb * out_len).enumerate() {
        let (s0, k) = (c * nb, ys.len() / out_len);
        for group in 0..g.groups {
            let cols = ImageColumns::new(x, g, group, (s0, k), padded);
            let panels =
                |dst: &mut [f32], p0, kc, j0, width| cols.pack_positions(dst, p0, kc, j0, width);
            let a = PanelsA::Prepacked(&filters[group * filter_len..][..filter_len]);
            if k == 1 {
                let yg = &mut ys[group * og * ohw..][..og * ohw];
                let e = epilogue.map(|e| e.tiles(g, s0, group));
                sgemm::blocked_threads_finishing(yg, false, (og, ohw, ckk), a, &panels, threads, e);
                continue;
            }
            let ld = k * ohw;
            let product = &mut tmp[..og * ld];
            sgemm::blocked_with_threads(product, false, (og, ld, ckk), a, &panels, threads);
            let product = &*product;
            ys.par_chunks_mut(out_len)
                .enumerate()
                .for_each(|(s, image)| scatter_image(product, ld, s, (group, og, ohw), image));
        }
        if k > 1
            && let Some(e) = epilogue
        {
            e.apply_images(ys, g, s0);
        }
    }
    arena::recycle(Buffer::F32(scratch));
}

/// Weight gradient into `dw` ([O, C/groups, KH, KW]); the caller checked [`applies`] and
/// the sizes. Each thread sums its block of the batch into a private partial; the
/// partials are added at the end.
pub(crate) fn filter_gradient(dy: &[f32], x: &[f32], g: &ConvGeometry, dw: &mut [f32]) {
    let threads = rayon::current_num_threads();
    let chunk = images_per_gemm(g, g.n) * g.ohw();
    if split_products_pay(g.n, g.og() * chunk * g.ckk()) {
        return filter_gradient_split_products(dy, x, g, dw, threads);
    }
    let (ohw, og, ckk) = (g.ohw(), g.og(), g.ckk());
    let dw_len = g.o * ckk;
    let (blocks, per) = batch_blocks(g.n);
    let nb = images_per_gemm(g, per);
    // Per block: the gathered output gradient (several images per GEMM) and the tap rows
    // that `pack_taps` transposes.
    let dy_len = if nb > 1 { og * nb * ohw } else { 0 };
    let rows_len = NR * sgemm::depth_block_bound(nb * ohw);
    let pad_len = padded_len(g, nb);
    let scratch_len = dy_len + rows_len + pad_len;
    let mut scratch = arena::for_overwrite::<f32>(blocks * scratch_len);
    let mut partials = arena::for_overwrite::<f32>(blocks * dw_len);
    partials
        .par_chunks_mut(dw_len)
        .zip(scratch.par_chunks_mut(scratch_len))
        .enumerate()
        .for_each(|(b, (partial, scratch))| {
            let (gathered, scratch) = scratch.split_at_mut(dy_len);
            let (rows, padded) = scratch.split_at_mut(rows_len);
            let end = ((b + 1) * per).min(g.n);
            let mut s0 = b * per;
            while s0 < end {
                let k = nb.min(end - s0);
                let ld = k * ohw;
                // The first GEMM of a block overwrites its partial; the rest add to it.
                let accumulate = s0 > b * per;
                for group in 0..g.groups {
                    let cols = ImageColumns::new(x, g, group, (s0, k), padded);
                    let mut panels = |dst: &mut [f32], p0, kc, j0, width| {
                        cols.pack_taps(dst, p0, kc, j0, width, rows)
                    };
                    // dW_g (og x ckk) (+)= dY_g (og x positions) * colsᵀ
                    let (dyg, dm) = group_output_gradient(dy, g, (s0, k), group, gathered);
                    let a = PanelsA::Strided(dyg, dm);
                    let dw_g = &mut partial[group * og * ckk..][..og * ckk];
                    sgemm::blocked_with(dw_g, accumulate, og, ckk, ld, a, &mut panels);
                }
                s0 += k;
            }
        });
    sum_partials(dw, &partials);
    arena::recycle(Buffer::F32(partials));
    arena::recycle(Buffer::F32(scratch));
}

thread_local! {
    /// The tap rows [`ImageColumns::pack_taps`] transposes, for a thread that packs panels
    /// of a product split among threads (each packs its own).
    static TAP_ROWS: std::cell::RefCell<Vec<Vec<f32>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Every tap-rows vector holds the longest depth block, so one reserved ahead serves all.
const TAP_ROWS_KEEP: crate::scratch::Keep = crate::scratch::Keep {
    min: NR * sgemm::MAX_DEPTH_BLOCK,
    max: usize::MAX,
};

/// Gives this thread `depth` tap-rows vectors (a worker waiting inside one product may
/// pack for another), so that a compiled step's split filter gradients allocate nothing;
/// called with the GEMM's own reservation ([`crate::matmul::reserve_gemm_scratch`]).
pub(crate) fn reserve_tap_rows(depth: usize) {
    let _ = TAP_ROWS.try_with(|stack| {
        let mut stack = stack.borrow_mut();
        let missing = depth.saturating_sub(stack.len());
        stack.reserve(missing + 2);
        while stack.len() < depth {
            stack.push(vec![0.0; TAP_ROWS_KEEP.min]);
        }
    });
}

/// [`filter_gradient`] where a block of the batch per thread would leave threads idle (see
/// [`split_products_pay`]): no partial gradients; the images go one chunk after another,
/// each chunk's product `dW += dY · colsᵀ` split among the threads over `dW`'s rows and
/// columns.
fn filter_gradient_split_products(
    dy: &[f32],
    x: &[f32],
    g: &ConvGeometry,
    dw: &mut [f32],
    threads: usize,
) {
    let (ohw, og, ckk) = (g.ohw(), g.og(), g.ckk());
    let nb = images_per_gemm(g, g.n);
    let dy_len = if nb > 1 { og * nb * ohw } else { 0 };
    let pad_len = padded_len(g, nb);
    let mut scratch = arena::for_overwrite::<f32>((dy_len + pad_len).max(1));
    let (gathered, padded) = scratch.split_at_mut(dy_len);
    let rows_len = NR * sgemm::depth_block_bound(nb * ohw);
    let mut s0 = 0;
    while s0 < g.n {
        let k = nb.min(g.n - s0);
        for group in 0..g.groups {
            let cols = ImageColumns::new(x, g, group, (s0, k), padded);
            let panels = |dst: &mut [f32], p0, kc, j0, width| {
                crate::scratch::with_scratch(&TAP_ROWS, rows_len, TAP_ROWS_KEEP, |rows| {
                    cols.pack_taps(dst, p0, kc, j0, width, rows)
                })
            };
            let (dyg, dm) = group_output_gradient(dy, g, (s0, k), group, gathered);
            let a = PanelsA::Strided(dyg, dm);
            let dw_g = &mut dw[group * og * ckk..][..og * ckk];
            sgemm::blocked_with_threads(dw_g, s0 > 0, (og, ckk, k * ohw), a, &panels, threads);
        }
        s0 += k;
    }
    arena::recycle(Buffer::F32(scratch));
}
