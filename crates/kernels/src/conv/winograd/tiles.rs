//! The tile transforms, eight tiles per vector: inputs (`V = Bᵀ d B`), outputs (`Y = Aᵀ M
//! A`) and output gradients (`dM = A dY Aᵀ`), and the walk over a block's tiles.

use std::arch::x86_64::*;

use super::simd::*;
use super::*;

/// One block of images: `tiles` tiles, stored in `cols` columns (a multiple of
/// [`LANES`]; the columns past `tiles` repeat the last tile).
pub(super) struct Block<'a> {
    pub(super) g: &'a ConvGeometry,
    pub(super) s0: usize,
    pub(super) images: usize,
    pub(super) tiles: usize,
    pub(super) cols: usize,
}

/// Walks a block's tiles in column order, eight at a time: where each tile's 6x6
/// input starts in the padded planes of one channel, where its 4x4 output starts
/// in the block's outputs of one channel (from image `s0`'s plane of that channel), and
/// how many of its output rows and columns lie inside the image (4 and 4 but in the
/// last row or column of tiles of a side that is not a multiple of 4).
/// Why a walk: dividing the column by the tile counts cost a visible share of a layer's
/// time (measured: BENCHMARKS.md, "Figures moved from code comments").
pub(super) struct TileWalk {
    th: usize,
    tw: usize,
    pw: usize,
    phw: usize,
    h: usize,
    w: usize,
    ohw: usize,
    images: usize,
    at: (usize, usize, usize),
    last: (usize, usize, Extent),
}

/// Output rows and columns of a tile inside the image.
#[derive(Clone, Copy, Default)]
pub(super) struct Extent {
    rows: usize,
    cols: usize,
}

impl Extent {
    fn whole(self) -> bool {
        self.rows == M && self.cols == M
    }
}

/// Eight tiles' input offsets, output offsets and extents.
type Lanes = ([usize; LANES], [usize; LANES], [Extent; LANES]);

impl TileWalk {
    fn new(b: &Block) -> TileWalk {
        let (th, tw) = tiles(b.g);
        let (ph, pw) = padded_sides(b.g);
        let (h, w) = (b.g.h, b.g.w);
        TileWalk {
            th,
            tw,
            pw,
            phw: ph * pw,
            h,
            w,
            ohw: b.g.o * h * w,
            images: b.images,
            at: (0, 0, 0),
            last: (0, 0, Extent::default()),
        }
    }

    /// The next eight tiles' (source, target, extent); past the last tile, the last
    /// tile's again.
    #[inline(always)]
    fn next_lanes(&mut self) -> Lanes {
        let (mut source, mut target) = ([0; LANES], [0; LANES]);
        let mut extent = [Extent::default(); LANES];
        for l in 0..LANES {
            let (k, ty, tx) = self.at;
            if k < self.images {
                self.last = (
                    k * self.phw + M * (ty * self.pw + tx),
                    k * self.ohw + M * (ty * self.w + tx),
                    Extent {
                        rows: (self.h - M * ty).min(M),
                        cols: (self.w - M * tx).min(M),
                    },
                );
                self.at = if tx + 1 < self.tw {
                    (k, ty, tx + 1)
                } else if ty + 1 < self.th {
                    (k, ty + 1, 0)
                } else {
                    (k + 1, 0, 0)
                };
            }
            (source[l], target[l], extent[l]) = self.last;
        }
        (source, target, extent)
    }
}

/// Transforms input channel `ch` of every tile of the block into `vc` ([XI, cols]):
/// copies the channel's planes into `padded` with a zero border (widened to whole
/// tiles), then takes eight tiles at a time, each lane one tile.
#[target_feature(enable = "avx2,fma")]
pub(super) fn transform_input(x: &[f32], b: &Block, ch: usize, vc: &mut [f32], padded: &mut [f32]) {
    let g = b.g;
    let (h, w) = (g.h, g.w);
    let (ph, pw) = padded_sides(g);
    let phw = ph * pw;
    for k in 0..b.images {
        let plane = &x[((b.s0 + k) * g.c + ch) * h * w..][..h * w];
        let dst = &mut padded[k * phw..][..phw];
        dst[..pw].fill(0.0);
        dst[(h + 1) * pw..].fill(0.0);
        for (r, src) in plane.chunks_exact(w).enumerate() {
            let row = &mut dst[(r + 1) * pw..][..pw];
            row[0] = 0.0;
            if pw == w + 2 {
                row[pw - 1] = 0.0;
            } else {
                row[w + 1..].fill(0.0);
            }
            // Four at a time: for 32 values a `copy_from_slice` became a `memmove`
            // call, a visible share of the layer's time (measured: BENCHMARKS.md,
            // "Figures moved from code comments").
            let whole = w / 4 * 4;
            for (d, s) in row[1..=whole].chunks_exact_mut(4).zip(src.chunks_exact(4)) {
                store4(d, load4(s));
            }
            for (d, s) in row[1 + whole..=w].iter_mut().zip(&src[whole..]) {
                *d = *s;
            }
        }
    }
    padded[b.images * phw..][..SLACK].fill(0.0);
    let padded = &padded[..b.images * phw + SLACK];
    // The furthest value a tile reads: its last row's second group of four.
    let reach = 5 * pw + 8;
    let mut walk = TileWalk::new(b);
    for t in (0..b.cols).step_by(LANES) {
        let (base, _, _) = walk.next_lanes();
        for &at in &base {
            assert!(
                at + reach <= padded.len(),
                "winograd: tile outside its image"
            );
        }
        // d[r][q]: row r, column q of each lane's 6x6 tile, rows transformed. Written as
        // one array of six rows, not zeroed first: a zeroed array of vectors cost a
        // `memset` per eight tiles.
        // SAFETY: every read is below `base + reach`, checked above.
        let d = unsafe {
            [
                tile_row(padded, &base, 0),
                tile_row(padded, &base, pw),
                tile_row(padded, &base, 2 * pw),
                tile_row(padded, &base, 3 * pw),
                tile_row(padded, &base, 4 * pw),
                tile_row(padded, &base, 5 * pw),
            ]
        };
        for j in 0..ALPHA {
            let col = bt([d[0][j], d[1][j], d[2][j], d[3][j], d[4][j], d[5][j]]);
            for (i, value) in col.into_iter().enumerate() {
                store8(&mut vc[(i * ALPHA + j) * b.cols + t..][..LANES], value);
            }
        }
    }
}

/// Row `offset / pw` of eight tiles starting at `base` (one tile per lane), `Bᵀ` applied.
///
/// # Safety
/// Every `base[l] + offset + 8` lies within `padded`.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn tile_row(padded: &[f32], base: &[usize; LANES], offset: usize) -> [__m256; ALPHA] {
    let p = padded.as_ptr();
    // SAFETY (each load): the caller keeps every read within `padded`.
    let (lo, hi) = unsafe {
        (
            [0, 1, 2, 3].map(|l| p.add(base[l] + offset)),
            [4, 5, 6, 7].map(|l| p.add(base[l] + offset)),
        )
    };
    let front = unsafe {
        [
            _mm256_loadu2_m128(hi[0], lo[0]),
            _mm256_loadu2_m128(hi[1], lo[1]),
            _mm256_loadu2_m128(hi[2], lo[2]),
            _mm256_loadu2_m128(hi[3], lo[3]),
        ]
    };
    let back = unsafe {
        [
            _mm256_loadu2_m128(hi[0].add(4), lo[0].add(4)),
            _mm256_loadu2_m128(hi[1].add(4), lo[1].add(4)),
            _mm256_loadu2_m128(hi[2].add(4), lo[2].add(4)),
            _mm256_loadu2_m128(hi[3].add(4), lo[3].add(4)),
        ]
    };
    let [q0, q1, q2, q3] = transpose4(front);
    let [q4, q5, _, _] = transpose4(back);
    bt([q0, q1, q2, q3, q4, q5])
}

/// Writes output channel `oc` of every image of the block from the products `m`
/// ([XI, O, cols]): `Y = Aᵀ M A` for eight tiles at a time, stored row by row.
///
/// # Safety
/// `y` is the whole output ([N, O, H, W]); no other thread writes channel `oc`.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn transform_output(m: &[f32], b: &Block, oc: usize, y: *mut f32) {
    let g = b.g;
    let (o, w, hw) = (g.o, g.w, g.h * g.w);
    let plane = ((b.s0 * o) + oc) * hw;
    let mut walk = TileWalk::new(b);
    for t in (0..b.cols).step_by(LANES) {
        let (_, target, extent) = walk.next_lanes();
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
            for (l, (&dst, e)) in target[..lanes].iter().zip(extent).enumerate() {
                if a >= e.rows {
                    continue;
                }
                let quad = quads[l % 4];
                let half = if l < 4 {
                    _mm256_castps256_ps128(quad)
                } else {
                    _mm256_extractf128_ps::<1>(quad)
                };
                // SAFETY: the caller's contract; the `e.cols` values stored are inside
                // row `M·ty + a` of the tile's plane (`a < e.rows`).
                unsafe {
                    let row = y.add(plane + dst + a * w);
                    if e.cols == M {
                        _mm_storeu_ps(row, half);
                    } else {
                        let mut four = [0.0f32; 4];
                        _mm_storeu_ps(four.as_mut_ptr(), half);
                        std::ptr::copy_nonoverlapping(four.as_ptr(), row, e.cols);
                    }
                }
            }
        }
    }
}

/// Transforms output channel `oc` of the block's output gradient into `dmo` ([XI,
/// cols]): `dM = A dY Aᵀ` per tile, the adjoint of [`transform_output`], eight tiles
/// at a time (the columns past the last tile are zero).
#[target_feature(enable = "avx2,fma")]
pub(super) fn transform_output_gradient(dy: &[f32], b: &Block, oc: usize, dmo: &mut [f32]) {
    let g = b.g;
    let (o, w, hw) = (g.o, g.w, g.h * g.w);
    let planes = &dy[(b.s0 * o + oc) * hw..(b.s0 + b.images) * o * hw];
    let mut walk = TileWalk::new(b);
    for t in (0..b.cols).step_by(LANES) {
        let (_, target, extent) = walk.next_lanes();
        // by_row[a][j] = Σ_b Aᵀ[b][j] · dY[a][b]
        let mut by_row = [[_mm256_setzero_ps(); ALPHA]; M];
        for (a, row) in by_row.iter_mut().enumerate() {
            // Row `a` of lane `l`'s tile, zero outside the image (the adjoint of
            // dropping those outputs).
            let at = |l: usize| {
                let e = extent[l];
                if e.whole() {
                    return load4(&planes[target[l] + a * w..][..4]);
                }
                let mut four = [0.0f32; 4];
                if a < e.rows {
                    four[..e.cols].copy_from_slice(&planes[target[l] + a * w..][..e.cols]);
                }
                load4(&four)
            };
            let quads: [__m256; 4] = [0, 1, 2, 3].map(|l| _mm256_set_m128(at(l + 4), at(l)));
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
