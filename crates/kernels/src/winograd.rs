//! Winograd F(4x4, 3x3) convolution: 3x3, stride-1, "same"-padded f32 layers (ResNet's)
//! as 36 products over transformed tiles, 4x fewer multiply-adds than the direct form.
//!
//! ```
//! use spore_kernels::conv::{conv2d, ConvGeometry};
//! use spore_kernels::winograd;
//! // 16 -> 16 channels over 8x8 images: Winograd applies (AVX2/FMA machines).
//! let g = ConvGeometry::new([1, 16, 8, 8], [16, 16, 3, 3], [1, 1], [1, 1], [1; 4], 1);
//! let x = vec![1.0f32; 16 * 64];
//! let w = vec![0.5f32; 16 * 16 * 9];
//! let y = conv2d(&x, &w, &g);
//! // An interior output sums 9 taps of 16 channels: 144 * 0.5; a corner sees 4 taps.
//! assert!((y[9] - 72.0).abs() < 1e-3 && (y[0] - 32.0).abs() < 1e-3);
//! assert_eq!(winograd::applies(&g), spore_kernels::matmul::own_f32_gemm());
//! ```
//!
//! Each 4x4 block of outputs (a tile) reads a 6x6 block of the padded input. With the
//! transforms of Lavin & Gray ("Fast Algorithms for Convolutional Neural Networks"):
//! `Y = Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A`. Summed over input channels, the elementwise product
//! becomes one matrix product per tile position ξ (36 of them):
//! `M[ξ] (O x tiles) = U[ξ] (O x C) · V[ξ] (C x tiles)`, with `U` the transformed filters
//! and `V` the transformed input tiles. The products run on Spore's GEMM, with `U`
//! written straight into its packed layout; the transforms take eight tiles per vector
//! (each lane one tile: four-value loads per tile row, transposed 4x4 in registers).
//!
//! Why F(4x4, 3x3) and not F(2x2, 3x3): it needs 36 multiply-adds per 16 outputs and
//! channel pair (the direct form needs 144; F(2x2) needs 64 per 16 outputs), and inflates
//! the input less (36 values per 16 outputs against 64). Its rounding error is larger
//! (coefficients up to 8 and 1/24): at most 3e-7 per summed term in the tests, against
//! f64.
//!
//! Why this is worth it: ResNet-18's 3x3 layers already ran near the machine's FMA peak
//! (150-180 GFLOP/s), so only fewer multiply-adds could make them faster.

use crate::conv::ConvGeometry;

/// Outputs per tile side.
const M: usize = 4;
/// Input values per tile side (`M + 3 - 1`).
const ALPHA: usize = M + 2;
/// Positions in a transformed tile: one product each.
const XI: usize = ALPHA * ALPHA;

/// Filter transform `G` (3 taps to 6 positions).
const G: [[f32; 3]; ALPHA] = [
    [1.0 / 4.0, 0.0, 0.0],
    [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
    [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
    [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
    [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
    [0.0, 0.0, 1.0],
];

/// Bytes of transformed inputs and products (`V` and `M`) one block of images may take:
/// they are written and read back within the block, from the 32 MiB L3.
const BLOCK_BYTES: usize = 8 << 20;

/// Fewest input and output channels for which the transforms pay: with fewer, the
/// products are too shallow to amortise them (ResNet's first layer has 3).
const MIN_CHANNELS: usize = 16;

/// Whether [`forward`] computes `g` (f32): 3x3 filters, stride 1, no dilation or groups,
/// one pixel of padding on every side (so the output is the input's size), sides a
/// multiple of 4, at least [`MIN_CHANNELS`] in and out, on machines where Spore's GEMM
/// runs (AVX2 and FMA), unless `SPORE_WINOGRAD=off`.
pub fn applies(g: &ConvGeometry) -> bool {
    g.kh == 3
        && g.kw == 3
        && g.stride == [1, 1]
        && g.dilation == [1, 1]
        && g.groups == 1
        && g.pads == [1; 4]
        && g.h.is_multiple_of(M)
        && g.w.is_multiple_of(M)
        && g.h > 0
        && g.w > 0
        && g.c >= MIN_CHANNELS
        && g.o >= MIN_CHANNELS
        && enabled()
}

/// Spore's GEMM runs here and the environment does not turn Winograd off (checked once).
fn enabled() -> bool {
    use std::sync::OnceLock;
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        crate::sgemm::available() && std::env::var("SPORE_WINOGRAD").as_deref() != Ok("off")
    })
}

/// Tiles one vector transforms at a time.
const LANES: usize = 8;

/// Zero values after the padded images: a tile's row is read as two groups of four (six
/// used), so the last tile reads a little past its image.
const SLACK: usize = 8;

/// Tile counts of `g`: (tile rows, tiles per row).
fn tiles(g: &ConvGeometry) -> (usize, usize) {
    (g.h / M, g.w / M)
}

/// `y = conv2d(x, w)` for a geometry where [`applies`] holds: x [N, C, H, W], w [O, C, 3,
/// 3], y [N, O, H, W], all contiguous.
///
/// The batch goes in blocks of images whose transformed tiles fit [`BLOCK_BYTES`]; per
/// block the threads split the input channels (input transform), then the 36 products,
/// then the output channels (output transform).
pub fn forward(x: &[f32], w: &[f32], g: &ConvGeometry, y: &mut [f32]) {
    assert!(
        applies(g),
        "winograd::forward: geometry {g:?} does not apply"
    );
    let (c, o, hw) = (g.c, g.o, g.h * g.w);
    assert!(
        x.len() >= g.n * c * hw && w.len() >= o * c * 9 && y.len() >= g.n * o * hw,
        "winograd::forward: buffers too small for {g:?}"
    );
    #[cfg(target_arch = "x86_64")]
    x86::forward(x, w, g, y, BLOCK_BYTES);
}

/// `dw = conv2d_backward_filter(dy, x)` for a geometry where [`applies`] holds: dy [N, O,
/// H, W], x [N, C, H, W], dw [O, C, 3, 3]. The gradient of the Winograd form is exact
/// (the form equals the convolution), so it runs the same way backwards:
/// `dU[ξ] = Σ_tiles dM[ξ] · V[ξ]ᵀ` with `dM = A dY Aᵀ` per tile, then `dw = Gᵀ dU G`.
pub fn filter_gradient(dy: &[f32], x: &[f32], g: &ConvGeometry, dw: &mut [f32]) {
    assert!(
        applies(g),
        "winograd::filter_gradient: geometry {g:?} does not apply"
    );
    let (c, o, hw) = (g.c, g.o, g.h * g.w);
    assert!(
        x.len() >= g.n * c * hw && dy.len() >= g.n * o * hw && dw.len() >= o * c * 9,
        "winograd::filter_gradient: buffers too small for {g:?}"
    );
    #[cfg(target_arch = "x86_64")]
    x86::filter_gradient(dy, x, g, dw, BLOCK_BYTES);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use gemm::Parallelism;
    use rayon::prelude::*;

    use super::*;
    use crate::arena;
    use crate::matmul::{MatRef, gemm_into};
    use crate::sgemm::{MR, PanelsA, blocked_with, depth_blocks, pack_b_panel, prepacked_a_len};

    /// [`super::forward`] in blocks of images whose `V` and `M` take about `block_bytes`.
    pub(super) fn forward(
        x: &[f32],
        w: &[f32],
        g: &ConvGeometry,
        y: &mut [f32],
        block_bytes: usize,
    ) {
        let (c, o) = (g.c, g.o);
        let plan = Plan::new(g, block_bytes);
        let threads = plan.threads;
        // Every buffer from the pool, taken on this thread (see `arena`).
        // U: each ξ's filters packed once for the GEMM, as `sgemm::prepack_a` lays them
        // out. Why: packing them per product was a second pass over 37 MB in ResNet's
        // last stage, 22 % of its forward pass.
        let packed = prepacked_a_len(o, c);
        let mut u = arena::for_overwrite::<f32>(XI * packed);
        let mut v = arena::for_overwrite::<f32>(c * XI * plan.max_cols);
        let mut m = arena::for_overwrite::<f32>(XI * o * plan.max_cols);
        let mut scratch = arena::for_overwrite::<f32>(threads * plan.scratch_len);
        let panels = o.div_ceil(MR);
        let per = panels.div_ceil(threads);
        let filters = Dst(u.as_mut_ptr());
        (0..threads).into_par_iter().for_each(|t| {
            let filters = &filters; // the whole `Dst` (Sync), not its raw pointer field
            for panel in (t * per).min(panels)..((t + 1) * per).min(panels) {
                // SAFETY: `applies` checked that the CPU has AVX2 and FMA; each row
                // panel of every ξ is written by one thread only, inside `u`.
                unsafe { transform_filter_panel(w, o, c, panel, filters.0) };
            }
        });
        let dst = Dst(y.as_mut_ptr());
        for block in plan.blocks(g) {
            let v = &mut v[..c * XI * block.cols];
            transform_inputs(x, &block, v, &mut scratch, plan.scratch_len);
            let m = &mut m[..XI * o * block.cols];
            let (v, u) = (&*v, &*u);
            m.par_chunks_mut(o * block.cols)
                .enumerate()
                .for_each(|(xi, mx)| {
                    let vx = MatRef {
                        offset: xi * block.cols,
                        row_stride: (XI * block.cols) as isize,
                        col_stride: 1,
                    };
                    let ux = PanelsA::Prepacked(&u[xi * packed..][..packed]);
                    let mut panels = |dst: &mut [f32], p0, kc, j0, width| {
                        pack_b_panel(dst, v, vx, p0, kc, j0, width)
                    };
                    blocked_with(mx, false, o, block.cols, c, ux, &mut panels);
                });
            let m = &*m;
            let per = o.div_ceil(threads);
            (0..threads).into_par_iter().for_each(|t| {
                let dst = &dst; // the whole `Dst` (Sync), not its raw pointer field
                for oc in (t * per).min(o)..((t + 1) * per).min(o) {
                    // SAFETY: as above; each output channel is written by one thread
                    // only, inside `y` (its length was checked in `forward`).
                    unsafe { transform_output(m, &block, oc, dst.0) };
                }
            });
        }
        for buf in [u, v, m, scratch] {
            arena::recycle(crate::Buffer::F32(buf));
        }
    }

    /// [`super::filter_gradient`] in blocks of images as in [`forward`].
    pub(super) fn filter_gradient(
        dy: &[f32],
        x: &[f32],
        g: &ConvGeometry,
        dw: &mut [f32],
        block_bytes: usize,
    ) {
        let (c, o) = (g.c, g.o);
        let plan = Plan::new(g, block_bytes);
        let scratch_len = plan.scratch_len;
        let mut du = arena::for_overwrite::<f32>(XI * o * c);
        let mut v = arena::for_overwrite::<f32>(c * XI * plan.max_cols);
        let mut dm = arena::for_overwrite::<f32>(o * XI * plan.max_cols);
        let mut scratch = arena::for_overwrite::<f32>(plan.threads * scratch_len);
        for (index, block) in plan.blocks(g).enumerate() {
            let cols = block.cols;
            let v = &mut v[..c * XI * cols];
            transform_inputs(x, &block, v, &mut scratch, scratch_len);
            let dm = &mut dm[..o * XI * cols];
            per_thread(
                dm,
                XI * cols,
                &mut scratch,
                scratch_len,
                |first, chunk, _| {
                    for (i, dmo) in chunk.chunks_mut(XI * cols).enumerate() {
                        // SAFETY: `applies` checked that the CPU has AVX2 and FMA.
                        unsafe { transform_output_gradient(dy, &block, first + i, dmo) };
                    }
                },
            );
            let (v, dm) = (&*v, &*dm);
            du.par_chunks_mut(o * c).enumerate().for_each(|(xi, dux)| {
                // dU[ξ] (O x C) (+)= dM[ξ] (O x cols) · V[ξ]ᵀ (cols x C)
                let dmx = MatRef {
                    offset: xi * cols,
                    row_stride: (XI * cols) as isize,
                    col_stride: 1,
                };
                let vt = MatRef {
                    offset: xi * cols,
                    row_stride: 1,
                    col_stride: (XI * cols) as isize,
                };
                gemm_into(
                    dux,
                    index > 0,
                    o,
                    c,
                    cols,
                    dm,
                    dmx,
                    v,
                    vt,
                    Parallelism::None,
                );
            });
        }
        let du_ref = &*du;
        per_thread(
            &mut dw[..o * c * 9],
            c * 9,
            &mut scratch,
            scratch_len,
            |first, chunk, s| {
                for (i, dwo) in chunk.chunks_mut(c * 9).enumerate() {
                    // SAFETY: as above.
                    unsafe { untransform_filter(du_ref, first + i, o, dwo, s) };
                }
            },
        );
        for buf in [du, v, dm, scratch] {
            arena::recycle(crate::Buffer::F32(buf));
        }
    }

    /// The sizes both kernels share: how the batch splits into blocks, the most columns
    /// a block has, and the scratch each thread needs.
    struct Plan {
        per_image: usize,
        per_block: usize,
        max_cols: usize,
        scratch_len: usize,
        threads: usize,
    }

    impl Plan {
        fn new(g: &ConvGeometry, block_bytes: usize) -> Plan {
            let (th, tw) = tiles(g);
            let per_block = images_per_block(g, block_bytes);
            let padded_len = per_block * (g.h + 2) * (g.w + 2) + SLACK;
            Plan {
                per_image: th * tw,
                per_block,
                max_cols: (per_block * th * tw).next_multiple_of(LANES),
                scratch_len: filter_scratch(g.c).max(padded_len),
                threads: rayon::current_num_threads().max(1),
            }
        }

        /// The batch's blocks of images, in order.
        fn blocks<'a>(&self, g: &'a ConvGeometry) -> impl Iterator<Item = Block<'a>> {
            let (per_block, per_image) = (self.per_block, self.per_image);
            (0..g.n).step_by(per_block).map(move |s0| {
                let images = per_block.min(g.n - s0);
                Block {
                    g,
                    s0,
                    images,
                    tiles: images * per_image,
                    cols: (images * per_image).next_multiple_of(LANES),
                }
            })
        }
    }

    /// `V` of one block (`v`, [C, XI, cols]): every input channel's tiles transformed,
    /// the threads splitting the channels.
    fn transform_inputs(
        x: &[f32],
        block: &Block,
        v: &mut [f32],
        scratch: &mut [f32],
        scratch_len: usize,
    ) {
        let row = XI * block.cols;
        per_thread(v, row, scratch, scratch_len, |first, chunk, s| {
            for (i, vc) in chunk.chunks_mut(row).enumerate() {
                // SAFETY: the kernels run only where `applies` checked AVX2 and FMA.
                unsafe { transform_input(x, block, first + i, vc, s) };
            }
        });
    }

    /// Images per block: as many as keep the block's `V` and `M` (or `dM`) within
    /// `block_bytes`, at least one.
    pub(super) fn images_per_block(g: &ConvGeometry, block_bytes: usize) -> usize {
        let (th, tw) = tiles(g);
        let image_bytes = (g.c + g.o) * XI * th * tw * std::mem::size_of::<f32>();
        (block_bytes / image_bytes).clamp(1, g.n.max(1))
    }

    /// A raw pointer that may cross threads: to the output, where each thread writes the
    /// planes of its own output channels, or to the packed filters, where each thread
    /// writes its own row panels.
    #[derive(Clone, Copy)]
    struct Dst(*mut f32);
    // SAFETY: threads write disjoint parts, and the pointer outlives the parallel
    // section (it borrows the caller's `y` or `u`).
    unsafe impl Send for Dst {}
    unsafe impl Sync for Dst {}

    /// One block of images: `tiles` tiles, stored in `cols` columns (a multiple of
    /// [`LANES`]; the columns past `tiles` repeat the last tile).
    struct Block<'a> {
        g: &'a ConvGeometry,
        s0: usize,
        images: usize,
        tiles: usize,
        cols: usize,
    }

    /// Walks a block's tiles in column order, eight at a time: where each tile's 6x6
    /// input starts in the padded planes of one channel, and where its 4x4 output starts
    /// in the block's outputs of one channel (from image `s0`'s plane of that channel).
    /// Why a walk: dividing the column by the tile counts cost 8 % of a layer's time.
    struct TileWalk {
        th: usize,
        tw: usize,
        pw: usize,
        phw: usize,
        w: usize,
        ohw: usize,
        images: usize,
        at: (usize, usize, usize),
        last: (usize, usize),
    }

    impl TileWalk {
        fn new(b: &Block) -> TileWalk {
            let (th, tw) = tiles(b.g);
            let (pw, w) = (b.g.w + 2, b.g.w);
            TileWalk {
                th,
                tw,
                pw,
                phw: (b.g.h + 2) * pw,
                w,
                ohw: b.g.o * b.g.h * w,
                images: b.images,
                at: (0, 0, 0),
                last: (0, 0),
            }
        }

        /// The next eight tiles' (source, target) offsets; past the last tile, the last
        /// tile's again.
        #[inline(always)]
        fn next_lanes(&mut self) -> ([usize; LANES], [usize; LANES]) {
            let (mut source, mut target) = ([0; LANES], [0; LANES]);
            for l in 0..LANES {
                let (k, ty, tx) = self.at;
                if k < self.images {
                    self.last = (
                        k * self.phw + M * (ty * self.pw + tx),
                        k * self.ohw + M * (ty * self.w + tx),
                    );
                    self.at = if tx + 1 < self.tw {
                        (k, ty, tx + 1)
                    } else if ty + 1 < self.th {
                        (k, ty + 1, 0)
                    } else {
                        (k + 1, 0, 0)
                    };
                }
                (source[l], target[l]) = self.last;
            }
            (source, target)
        }
    }

    /// Runs `f(first_item, items, scratch)` on one run of consecutive `item_len`-long
    /// items of `out` per thread, each with its own `scratch_len` values of `scratch`.
    fn per_thread(
        out: &mut [f32],
        item_len: usize,
        scratch: &mut [f32],
        scratch_len: usize,
        f: impl Fn(usize, &mut [f32], &mut [f32]) + Sync,
    ) {
        let items = out.len() / item_len.max(1);
        let threads = scratch.len() / scratch_len.max(1);
        let per = items.div_ceil(threads.max(1)).max(1);
        out.par_chunks_mut(per * item_len)
            .zip(scratch.par_chunks_mut(scratch_len.max(1)))
            .enumerate()
            .for_each(|(b, (chunk, s))| f(b * per, chunk, s));
    }

    /// Scratch values [`transform_filter`] needs: the 9 taps, then `G` applied to the rows.
    fn filter_scratch(c: usize) -> usize {
        (9 + ALPHA * 3) * c
    }

    // The packed filters' panels are six rows (`store_panel`).
    const _: () = assert!(MR == 6);

    /// Writes `U[ξ] = G w Gᵀ` of output channels `MR·panel..` (rows past `o` zero) into
    /// every ξ's packed filters at `u` (`XI` blocks of `prepacked_a_len(o, c)`, each laid
    /// out as `sgemm::prepack_a` does): eight input channels at a time, then one by one.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `u` holds the `XI` packed blocks; no other thread
    /// writes this panel.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn transform_filter_panel(w: &[f32], o: usize, c: usize, panel: usize, u: *mut f32) {
        let (len, rows) = (prepacked_a_len(o, c), o.div_ceil(MR) * MR);
        for (p0, kc) in depth_blocks(c) {
            // This panel's [kc][MR] values of ξ start at `start(ξ)`.
            let start = |xi: usize| xi * len + p0 * rows + panel * MR * kc;
            let mut ch = p0;
            // Depth blocks start at multiples of 256: eight channels never straddle two.
            while ch + LANES <= p0 + kc {
                // values[ξ][r]: ξ of output channel `MR·panel + r`, eight input channels.
                let mut values = [[_mm256_setzero_ps(); MR]; XI];
                for r in 0..MR.min(o - panel * MR) {
                    let oc = panel * MR + r;
                    let transformed = transform_filters8(&w[(oc * c + ch) * 9..][..LANES * 9]);
                    for (slot, value) in values.iter_mut().zip(transformed) {
                        slot[r] = value;
                    }
                }
                for (xi, &column) in values.iter().enumerate() {
                    // SAFETY: the caller's contract; eight depth steps of MR values
                    // inside this panel's block.
                    unsafe { store_panel(column, u.add(start(xi) + (ch - p0) * MR)) };
                }
                ch += LANES;
            }
            for ch in ch..p0 + kc {
                for r in 0..MR {
                    let oc = panel * MR + r;
                    let values = if oc < o {
                        transform_filter1(&w[(oc * c + ch) * 9..][..9])
                    } else {
                        [0.0; XI]
                    };
                    for (xi, &value) in values.iter().enumerate() {
                        // SAFETY: as above.
                        unsafe { *u.add(start(xi) + (ch - p0) * MR + r) = value };
                    }
                }
            }
        }
    }

    /// `G w Gᵀ` of eight consecutive 3x3 filters (`w`, 72 values), one per lane.
    #[target_feature(enable = "avx2,fma")]
    fn transform_filters8(w: &[f32]) -> [__m256; XI] {
        let mut taps = [[0.0f32; LANES]; 9];
        for (lane, filter) in w.chunks_exact(9).enumerate() {
            for (k, &value) in filter.iter().enumerate() {
                taps[k][lane] = value;
            }
        }
        let taps = taps.map(|t| load8(&t));
        // rows[i][l] = Σ_k G[i][k] · w[k][l], then U[i·α + j] = Σ_l G[j][l] · rows[i][l]
        let mut rows = [[_mm256_setzero_ps(); 3]; ALPHA];
        for (i, row) in rows.iter_mut().enumerate() {
            for (l, value) in row.iter_mut().enumerate() {
                *value = weigh(&G[i], [taps[l], taps[3 + l], taps[6 + l]]);
            }
        }
        let mut u = [_mm256_setzero_ps(); XI];
        for (i, row) in rows.iter().enumerate() {
            for j in 0..ALPHA {
                u[i * ALPHA + j] = weigh(&G[j], *row);
            }
        }
        u
    }

    /// `Σ coef[k] · v[k]` over the nonzero coefficients.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn weigh(coef: &[f32; 3], v: [__m256; 3]) -> __m256 {
        let mut sum = _mm256_setzero_ps();
        for (&k, v) in coef.iter().zip(v) {
            if k != 0.0 {
                sum = _mm256_fmadd_ps(_mm256_set1_ps(k), v, sum);
            }
        }
        sum
    }

    /// `G w Gᵀ` of one 3x3 filter, for the channels past the last group of eight.
    fn transform_filter1(w: &[f32]) -> [f32; XI] {
        let mut rows = [[0.0f32; 3]; ALPHA];
        for (i, row) in rows.iter_mut().enumerate() {
            for (l, value) in row.iter_mut().enumerate() {
                *value = (0..3).map(|k| G[i][k] * w[k * 3 + l]).sum();
            }
        }
        std::array::from_fn(|xi| (0..3).map(|l| G[xi % ALPHA][l] * rows[xi / ALPHA][l]).sum())
    }

    /// Stores six rows of eight depth steps (`rows[r]`, lane = step) depth-major, as a
    /// packed panel holds them: step `s`'s six values at `dst + 6·s`.
    ///
    /// # Safety
    /// AVX2 is available; `dst` has 48 writable values.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn store_panel(rows: [__m256; MR], dst: *mut f32) {
        let quads = transpose4([rows[0], rows[1], rows[2], rows[3]]);
        // Rows 4 and 5 of steps (0, 1 | 4, 5) and (2, 3 | 6, 7), paired.
        let pairs = [
            _mm256_unpacklo_ps(rows[4], rows[5]),
            _mm256_unpackhi_ps(rows[4], rows[5]),
        ];
        for step in 0..LANES {
            let half = |v: __m256| {
                if step < 4 {
                    _mm256_castps256_ps128(v)
                } else {
                    _mm256_extractf128_ps::<1>(v)
                }
            };
            let quad = half(quads[step % 4]);
            let pair = half(pairs[(step % 4) / 2]);
            let pair = if step % 2 == 0 {
                pair
            } else {
                _mm_movehl_ps(pair, pair)
            };
            // SAFETY: the caller's contract. The pair is stored as four values; its
            // last two land on the next step's first two, stored after it. The last
            // step stores its pair one value at a time, staying inside the 48.
            unsafe {
                let at = dst.add(step * MR);
                _mm_storeu_ps(at, quad);
                if step + 1 < LANES {
                    _mm_storeu_ps(at.add(4), pair);
                } else {
                    _mm_store_ss(at.add(4), pair);
                    _mm_store_ss(at.add(5), _mm_movehdup_ps(pair));
                }
            }
        }
    }

    /// `dst = Σ coef · src` over the terms with a nonzero coefficient (zero where none
    /// is). Why skip zeros: `G` is a third zeros, and `0 · inf` would be NaN.
    #[inline(always)]
    fn combine<'a>(dst: &mut [f32], terms: impl Iterator<Item = (f32, &'a [f32])>) {
        let mut first = true;
        for (coef, src) in terms {
            if coef == 0.0 {
                continue;
            }
            let src = &src[..dst.len()];
            if first {
                dst.iter_mut().zip(src).for_each(|(d, &s)| *d = coef * s);
                first = false;
            } else {
                dst.iter_mut()
                    .zip(src)
                    .for_each(|(d, &s)| *d = coef.mul_add(s, *d));
            }
        }
        if first {
            dst.fill(0.0);
        }
    }

    /// Transforms input channel `ch` of every tile of the block into `vc` ([XI, cols]):
    /// copies the channel's planes into `padded` with a zero border, then takes eight
    /// tiles at a time, each lane one tile.
    #[target_feature(enable = "avx2,fma")]
    fn transform_input(x: &[f32], b: &Block, ch: usize, vc: &mut [f32], padded: &mut [f32]) {
        let g = b.g;
        let (h, w, pw) = (g.h, g.w, g.w + 2);
        let phw = (h + 2) * pw;
        for k in 0..b.images {
            let plane = &x[((b.s0 + k) * g.c + ch) * h * w..][..h * w];
            let dst = &mut padded[k * phw..][..phw];
            dst[..pw].fill(0.0);
            dst[(h + 1) * pw..].fill(0.0);
            for (r, src) in plane.chunks_exact(w).enumerate() {
                let row = &mut dst[(r + 1) * pw..][..pw];
                row[0] = 0.0;
                row[pw - 1] = 0.0;
                // Four at a time (`applies` made `w` a multiple of 4): for 32 values a
                // `copy_from_slice` became a `memmove` call, 5 % of the layer's time.
                for (d, s) in row[1..=w].chunks_exact_mut(4).zip(src.chunks_exact(4)) {
                    store4(d, load4(s));
                }
            }
        }
        padded[b.images * phw..][..SLACK].fill(0.0);
        let padded = &padded[..b.images * phw + SLACK];
        // The furthest value a tile reads: its last row's second group of four.
        let reach = 5 * pw + 8;
        let mut walk = TileWalk::new(b);
        for t in (0..b.cols).step_by(LANES) {
            let (base, _) = walk.next_lanes();
            for &at in &base {
                assert!(
                    at + reach <= padded.len(),
                    "winograd: tile outside its image"
                );
            }
            // d[r][q]: row r, column q of each lane's 6x6 tile, rows transformed.
            let mut d = [[_mm256_setzero_ps(); ALPHA]; ALPHA];
            for (r, dr) in d.iter_mut().enumerate() {
                let mut front = [_mm256_setzero_ps(); 4];
                let mut back = [_mm256_setzero_ps(); 4];
                for l in 0..4 {
                    // SAFETY: every read is below `base + reach`, checked above.
                    unsafe {
                        let lo = padded.as_ptr().add(base[l] + r * pw);
                        let hi = padded.as_ptr().add(base[l + 4] + r * pw);
                        front[l] = _mm256_loadu2_m128(hi, lo);
                        back[l] = _mm256_loadu2_m128(hi.add(4), lo.add(4));
                    }
                }
                let [q0, q1, q2, q3] = transpose4(front);
                let [q4, q5, _, _] = transpose4(back);
                *dr = bt([q0, q1, q2, q3, q4, q5]);
            }
            for j in 0..ALPHA {
                let col = bt([d[0][j], d[1][j], d[2][j], d[3][j], d[4][j], d[5][j]]);
                for (i, value) in col.into_iter().enumerate() {
                    store8(&mut vc[(i * ALPHA + j) * b.cols + t..][..LANES], value);
                }
            }
        }
    }

    /// Writes output channel `oc` of every image of the block from the products `m`
    /// ([XI, O, cols]): `Y = Aᵀ M A` for eight tiles at a time, stored row by row.
    ///
    /// # Safety
    /// `y` is the whole output ([N, O, H, W]); no other thread writes channel `oc`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn transform_output(m: &[f32], b: &Block, oc: usize, y: *mut f32) {
        let g = b.g;
        let (o, w, hw) = (g.o, g.w, g.h * g.w);
        let plane = ((b.s0 * o) + oc) * hw;
        let mut walk = TileWalk::new(b);
        for t in (0..b.cols).step_by(LANES) {
            let (_, target) = walk.next_lanes();
            // by_row[a][j] = Σ_i Aᵀ[a][i] · M[i·α + j]
            let mut by_row = [[_mm256_setzero_ps(); ALPHA]; M];
            for j in 0..ALPHA {
                let mut products = [_mm256_setzero_ps(); ALPHA];
                for (i, p) in products.iter_mut().enumerate() {
                    *p = load8(&m[((i * ALPHA + j) * o + oc) * b.cols + t..][..LANES]);
                }
                for (row, value) in by_row.iter_mut().zip(at(products)) {
                    row[j] = value;
                }
            }
            let lanes = (b.tiles - t).min(LANES);
            for (a, row) in by_row.into_iter().enumerate() {
                let row = at(row);
                let quads = transpose4(row);
                for (l, &dst) in target[..lanes].iter().enumerate() {
                    let quad = quads[l % 4];
                    let half = if l < 4 {
                        _mm256_castps256_ps128(quad)
                    } else {
                        _mm256_extractf128_ps::<1>(quad)
                    };
                    // SAFETY: the caller's contract; the four values are inside row
                    // `M·ty + a` of the tile's plane.
                    unsafe { _mm_storeu_ps(y.add(plane + dst + a * w), half) };
                }
            }
        }
    }

    /// `dw[oc][ch] = Gᵀ dU[·][oc][ch] G` for every input channel: the adjoint of
    /// [`transform_filter`], from `du` ([XI, O, C]) into `dw` ([C, 3, 3]).
    #[target_feature(enable = "avx2,fma")]
    fn untransform_filter(du: &[f32], oc: usize, o: usize, dw: &mut [f32], scratch: &mut [f32]) {
        let c = dw.len() / 9;
        let (taps, rows) = scratch[..filter_scratch(c)].split_at_mut(9 * c);
        let du_at = |xi: usize| &du[(xi * o + oc) * c..][..c];
        // rows[k][j][ch] = Σ_i G[i][k] · dU[i·α + j][ch]
        for k in 0..3 {
            for j in 0..ALPHA {
                let dst = &mut rows[(k * ALPHA + j) * c..][..c];
                combine(dst, (0..ALPHA).map(|i| (G[i][k], du_at(i * ALPHA + j))));
            }
        }
        // taps[k][l][ch] = Σ_j G[j][l] · rows[k][j][ch]
        for k in 0..3 {
            for l in 0..3 {
                let dst = &mut taps[(k * 3 + l) * c..][..c];
                combine(
                    dst,
                    (0..ALPHA).map(|j| (G[j][l], &rows[(k * ALPHA + j) * c..][..c])),
                );
            }
        }
        for (ch, f) in dw.chunks_exact_mut(9).enumerate() {
            for (kl, v) in f.iter_mut().enumerate() {
                *v = taps[kl * c + ch];
            }
        }
    }

    /// Transforms output channel `oc` of the block's output gradient into `dmo` ([XI,
    /// cols]): `dM = A dY Aᵀ` per tile, the adjoint of [`transform_output`], eight tiles
    /// at a time (the columns past the last tile are zero).
    #[target_feature(enable = "avx2,fma")]
    fn transform_output_gradient(dy: &[f32], b: &Block, oc: usize, dmo: &mut [f32]) {
        let g = b.g;
        let (o, w, hw) = (g.o, g.w, g.h * g.w);
        let planes = &dy[(b.s0 * o + oc) * hw..(b.s0 + b.images) * o * hw];
        let mut walk = TileWalk::new(b);
        for t in (0..b.cols).step_by(LANES) {
            let (_, target) = walk.next_lanes();
            // by_row[a][j] = Σ_b Aᵀ[b][j] · dY[a][b]
            let mut by_row = [[_mm256_setzero_ps(); ALPHA]; M];
            for (a, row) in by_row.iter_mut().enumerate() {
                let at = |l: usize| &planes[target[l] + a * w..][..4];
                let quads: [__m256; 4] = [0, 1, 2, 3].map(|l| {
                    // SAFETY: `at` checked four values in each half.
                    unsafe { _mm256_loadu2_m128(at(l + 4).as_ptr(), at(l).as_ptr()) }
                });
                *row = a_t(transpose4(quads));
            }
            for j in 0..ALPHA {
                let col = a_t([by_row[0][j], by_row[1][j], by_row[2][j], by_row[3][j]]);
                for (i, value) in col.into_iter().enumerate() {
                    store8(&mut dmo[(i * ALPHA + j) * b.cols + t..][..LANES], value);
                }
            }
        }
        // The padding columns repeat the last tile; zero here, they add nothing to dU.
        for row in dmo.chunks_exact_mut(b.cols) {
            row[b.tiles..].fill(0.0);
        }
    }

    /// `A d` for four vectors (one per row, or column, of a tile's output gradient): the
    /// six values `Aᵀ`'s columns weigh them with.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(super) fn a_t(d: [__m256; M]) -> [__m256; ALPHA] {
        let e = _mm256_add_ps(d[0], d[2]);
        let f = _mm256_add_ps(d[1], d[3]);
        let e4 = _mm256_fmadd_ps(_mm256_set1_ps(4.0), d[2], d[0]);
        let f8 = _mm256_fmadd_ps(
            _mm256_set1_ps(8.0),
            d[3],
            _mm256_mul_ps(_mm256_set1_ps(2.0), d[1]),
        );
        [
            d[0],
            _mm256_add_ps(e, f),
            _mm256_sub_ps(e, f),
            _mm256_add_ps(e4, f8),
            _mm256_sub_ps(e4, f8),
            d[3],
        ]
    }

    /// `Bᵀ d` for six vectors (one per row, or column, of a tile).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(super) fn bt(d: [__m256; ALPHA]) -> [__m256; ALPHA] {
        let (four, five, two) = (
            _mm256_set1_ps(4.0),
            _mm256_set1_ps(5.0),
            _mm256_set1_ps(2.0),
        );
        let a = _mm256_fnmadd_ps(four, d[2], d[4]); // d4 - 4 d2
        let b = _mm256_fnmadd_ps(four, d[1], d[3]); // d3 - 4 d1
        let c = _mm256_sub_ps(d[4], d[2]);
        let e = _mm256_sub_ps(d[3], d[1]);
        [
            _mm256_fmadd_ps(four, d[0], _mm256_fnmadd_ps(five, d[2], d[4])),
            _mm256_add_ps(a, b),
            _mm256_sub_ps(a, b),
            _mm256_fmadd_ps(two, e, c),
            _mm256_fnmadd_ps(two, e, c),
            _mm256_fmadd_ps(four, d[1], _mm256_fnmadd_ps(five, d[3], d[5])),
        ]
    }

    /// `Aᵀ m` for six vectors: the four outputs of a tile's row (or column).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(super) fn at(m: [__m256; ALPHA]) -> [__m256; M] {
        let p = _mm256_add_ps(m[1], m[2]);
        let q = _mm256_sub_ps(m[1], m[2]);
        let r = _mm256_add_ps(m[3], m[4]);
        let s = _mm256_sub_ps(m[3], m[4]);
        [
            _mm256_add_ps(_mm256_add_ps(m[0], p), r),
            _mm256_fmadd_ps(_mm256_set1_ps(2.0), s, q),
            _mm256_fmadd_ps(_mm256_set1_ps(4.0), r, p),
            _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8.0), s, q), m[5]),
        ]
    }

    /// Transposes the 4x4 block in each 128-bit half: element `q` of vector `l` becomes
    /// element `l` of vector `q`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn transpose4(c: [__m256; 4]) -> [__m256; 4] {
        let t0 = _mm256_unpacklo_ps(c[0], c[1]);
        let t1 = _mm256_unpackhi_ps(c[0], c[1]);
        let t2 = _mm256_unpacklo_ps(c[2], c[3]);
        let t3 = _mm256_unpackhi_ps(c[2], c[3]);
        [
            _mm256_shuffle_ps::<0x44>(t0, t2),
            _mm256_shuffle_ps::<0xEE>(t0, t2),
            _mm256_shuffle_ps::<0x44>(t1, t3),
            _mm256_shuffle_ps::<0xEE>(t1, t3),
        ]
    }

    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn load4(s: &[f32]) -> __m128 {
        assert!(s.len() >= 4);
        // SAFETY: four values, checked above.
        unsafe { _mm_loadu_ps(s.as_ptr()) }
    }

    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn load8(s: &[f32]) -> __m256 {
        assert!(s.len() >= LANES);
        // SAFETY: eight values, checked above.
        unsafe { _mm256_loadu_ps(s.as_ptr()) }
    }

    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn store4(d: &mut [f32], v: __m128) {
        assert!(d.len() >= 4);
        // SAFETY: four values, checked above.
        unsafe { _mm_storeu_ps(d.as_mut_ptr(), v) }
    }

    #[target_feature(enable = "avx2,fma")]
    #[inline]
    fn store8(d: &mut [f32], v: __m256) {
        assert!(d.len() >= LANES);
        // SAFETY: eight values, checked above.
        unsafe { _mm256_storeu_ps(d.as_mut_ptr(), v) }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use std::arch::x86_64::*;

    use super::*;

    /// Input transform `Bᵀ` (applied to the rows, then the columns, of a 6x6 input tile).
    const BT: [[f32; ALPHA]; ALPHA] = [
        [4.0, 0.0, -5.0, 0.0, 1.0, 0.0],
        [0.0, -4.0, -4.0, 1.0, 1.0, 0.0],
        [0.0, 4.0, -4.0, -1.0, 1.0, 0.0],
        [0.0, -2.0, -1.0, 2.0, 1.0, 0.0],
        [0.0, 2.0, -1.0, -2.0, 1.0, 0.0],
        [0.0, 4.0, 0.0, -5.0, 0.0, 1.0],
    ];

    /// Output transform `Aᵀ` (6 positions to 4 outputs).
    const AT: [[f32; ALPHA]; M] = [
        [1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
        [0.0, 1.0, -1.0, 2.0, -2.0, 0.0],
        [0.0, 1.0, 1.0, 4.0, 4.0, 0.0],
        [0.0, 1.0, -1.0, 8.0, -8.0, 1.0],
    ];

    /// Pseudo-random values in [-1, 1), reproducible.
    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    fn lanes(v: __m256) -> [f32; 8] {
        // SAFETY: `__m256` and `[f32; 8]` have the same size.
        unsafe { std::mem::transmute(v) }
    }

    /// The vector transforms equal their matrices: `bt` is `Bᵀ`, `at` is `Aᵀ`, and `a_t`
    /// is `A` (the transpose of `Aᵀ`), lane by lane, against f64 products.
    #[test]
    fn vector_transforms_equal_the_matrices_of_lavin_and_gray() {
        if !enabled() {
            return;
        }
        let input: [__m256; ALPHA] =
            std::array::from_fn(|i| unsafe { _mm256_loadu_ps(values(8, i as u64).as_ptr()) });
        let check = |got: &[__m256], rows: usize, coef: &dyn Fn(usize, usize) -> f32, n: usize| {
            for (r, &v) in got.iter().enumerate().take(rows) {
                for l in 0..8 {
                    let want: f64 = (0..n)
                        .map(|k| coef(r, k) as f64 * lanes(input[k])[l] as f64)
                        .sum();
                    let got = lanes(v)[l] as f64;
                    assert!(
                        (got - want).abs() < 1e-5,
                        "row {r} lane {l}: {got} vs {want}"
                    );
                }
            }
        };
        // SAFETY: `enabled` checked AVX2 and FMA.
        let (b, a, adj) = unsafe {
            (
                x86::bt(input),
                x86::at(input),
                x86::a_t([input[0], input[1], input[2], input[3]]),
            )
        };
        check(&b, ALPHA, &|r, k| BT[r][k], ALPHA);
        check(&a, M, &|r, k| AT[r][k], ALPHA);
        check(&adj, ALPHA, &|r, k| AT[k][r], M);
    }

    /// Naive f64 forward pass and weight gradient of a "same" 3x3 convolution.
    fn naive(x: &[f32], w: &[f32], dy: &[f32], g: &ConvGeometry) -> (Vec<f64>, Vec<f64>) {
        let (n, c, o, h, wd) = (g.n, g.c, g.o, g.h, g.w);
        let mut y = vec![0.0; n * o * h * wd];
        let mut dw = vec![0.0; o * c * 9];
        for (s, oc, i, j) in (0..n).flat_map(|s| {
            (0..o).flat_map(move |oc| (0..h).flat_map(move |i| (0..wd).map(move |j| (s, oc, i, j))))
        }) {
            let yi = ((s * o + oc) * h + i) * wd + j;
            for (ch, k, l) in
                (0..c).flat_map(|ch| (0..3).flat_map(move |k| (0..3).map(move |l| (ch, k, l))))
            {
                let (Some(r), Some(q)) = ((i + k).checked_sub(1), (j + l).checked_sub(1)) else {
                    continue;
                };
                if r >= h || q >= wd {
                    continue;
                }
                let xv = x[((s * c + ch) * h + r) * wd + q] as f64;
                let wi = (oc * c + ch) * 9 + k * 3 + l;
                y[yi] += xv * w[wi] as f64;
                dw[wi] += xv * dy[yi] as f64;
            }
        }
        (y, dw)
    }

    /// Both kernels equal the naive loops within f32 rounding, over shapes that split the
    /// batch into blocks (the last one short), put tiles of several images in one vector,
    /// leave a partial last vector, and have rows of tiles longer than a vector.
    #[test]
    fn forward_and_filter_gradient_match_naive_f64_across_blocks() {
        if !enabled() {
            return;
        }
        // (batch, channels in, out, height, width, bytes per block, images per block)
        let cases = [
            (3, 17, 19, 8, 12, 1, 1),       // 6 tiles per image
            (5, 16, 16, 4, 4, 1 << 20, 5),  // 5 tiles, 3 lanes of padding
            (4, 16, 20, 4, 36, 100_000, 2), // 9 tiles per row
            (7, 24, 16, 12, 8, 120_000, 3), // blocks of 3, 3 and 1 images
            // two depth blocks of packed filters (256 and 74 channels)
            (2, 330, 17, 4, 4, 1 << 20, 2),
        ];
        for (n, c, o, h, w, block_bytes, per_block) in cases {
            let g = ConvGeometry::new([n, c, h, w], [o, c, 3, 3], [1, 1], [1, 1], [1; 4], 1);
            assert!(applies(&g), "{g:?}");
            assert_eq!(x86::images_per_block(&g, block_bytes), per_block, "{g:?}");
            let x = values(n * c * h * w, 1);
            let wt = values(o * c * 9, 2);
            let dy = values(n * o * h * w, 3);
            let (want_y, want_dw) = naive(&x, &wt, &dy, &g);
            let mut y = vec![f32::NAN; n * o * h * w];
            let mut dw = vec![f32::NAN; o * c * 9];
            x86::forward(&x, &wt, &g, &mut y, block_bytes);
            x86::filter_gradient(&dy, &x, &g, &mut dw, block_bytes);
            // Rounding grows with the sum's length and the transforms' coefficients
            // (up to 8 and 1/24): bound it by the terms' count, not the result's size.
            for (name, got, want, terms) in [
                ("y", &y, &want_y, (9 * c) as f64),
                ("dw", &dw, &want_dw, (n * h * w) as f64),
            ] {
                for (i, (&a, &b)) in got.iter().zip(want.iter()).enumerate() {
                    assert!(
                        (a as f64 - b).abs() <= 1e-6 * terms,
                        "{name}[{i}] of {g:?} in blocks of {block_bytes} bytes: {a} vs {b}"
                    );
                }
            }
        }
    }
}
