//! A GEMM whose B is never stored: row `p` of B is the run of `src` starting at
//! `depth[p]`, so `B[p][j] = src[depth[p] + j]`. A stride-1 convolution is such a product
//! when its output positions are counted across whole image rows ("wide" positions
//! `oy * W + ox`, including the `KW - 1` columns per row that no window starts at): row
//! `tap` of B is then the image shifted by the tap's offset, read in place.
//!
//! ```text
//! for p in 0..kc:  b0, b1 = src[depth[p] + j0 .. + 16]       (B read in place)
//!                  for r in 0..6:  acc[r] += A[r, p] * (b0, b1)   (A packed)
//! ```
//!
//! Why: for a layer with few output channels (LeNet's `conv1`: 6), gathering A from the
//! image ([`super::gather`]) would waste most of each 16-wide B panel, and im2col copies
//! the image 25 times. Wide positions waste only the columns past the last window
//! (`conv1`: 892 computed for 784 outputs) and copy nothing but the result.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[cfg(target_arch = "x86_64")]
use super::kernel::store_tile;
use super::kernel::write_edge;
use super::pack::pack_a;
use super::{MR, NR, SHARED, depth_blocks, max_depth_block, with_scratch};
use crate::operand::MatRef;

/// B, described by where its rows start: `b[p][j] = src[depth[p] + j]`.
#[derive(Clone, Copy)]
pub(crate) struct Shifted<'a> {
    pub src: &'a [f32],
    pub depth: &'a [i32],
}

/// `C[m x n] (+)= A * B` on this thread: A is `m` rows of `k = b.depth.len()` values,
/// `lda` apart, B is shifted runs of `b.src`, and C's rows are `ldc` apart.
///
/// # Panics
/// When an offset is negative, a row of B reaches past `b.src`, A is too short, or C
/// cannot hold the product (the kernel reads through raw pointers; checked once here).
pub(crate) fn shifted_gemm(
    c: &mut [f32],
    ldc: usize,
    (m, n): (usize, usize),
    accumulate: bool,
    (a, lda): (&[f32], usize),
    b: Shifted,
) {
    let k = b.depth.len();
    if m == 0 || n == 0 {
        return;
    }
    assert!(super::available(), "shifted_gemm: needs AVX2 and FMA");
    assert!(
        b.depth.iter().all(|&o| o >= 0)
            && b.depth.iter().map(|&o| o as usize).max().unwrap_or(0) + n <= b.src.len(),
        "shifted_gemm: B reaches past its source"
    );
    assert!(
        k == 0 || (lda >= k && a.len() >= (m - 1) * lda + k),
        "shifted_gemm: A too short"
    );
    assert!(
        ldc >= n && c.len() >= (m - 1) * ldc + n,
        "shifted_gemm: C too small"
    );
    if k == 0 {
        if !accumulate {
            c.chunks_mut(ldc).take(m).for_each(|row| row[..n].fill(0.0));
        }
        return;
    }
    let kc_max = max_depth_block(k);
    let a_len = m.div_ceil(MR) * MR * kc_max;
    let ma = MatRef {
        offset: 0,
        row_stride: lda as isize,
        col_stride: 1,
    };
    with_scratch(&SHARED, a_len + kc_max * NR, |scratch| {
        let (packed_a, edge) = scratch.split_at_mut(a_len);
        for (p0, kc) in depth_blocks(k) {
            let packed_a = &mut packed_a[..m.div_ceil(MR) * MR * kc];
            pack_a(packed_a, a, ma, 0..m, p0, kc);
            let depth = &b.depth[p0..p0 + kc];
            let acc = accumulate || p0 > 0;
            for j0 in (0..n).step_by(NR) {
                let width = NR.min(n - j0);
                // The last panel may be narrower than NR: its rows are copied into `edge`
                // (zero-padded), since reading 16 values in place could pass `src`'s end.
                let panel = if width < NR {
                    let edge = &mut edge[..kc * NR];
                    for (row, &o) in edge.chunks_exact_mut(NR).zip(depth) {
                        row[..width].copy_from_slice(&b.src[o as usize + j0..][..width]);
                        row[width..].fill(0.0);
                    }
                    Panel::Packed(edge.as_ptr())
                } else {
                    Panel::InPlace(b.src[j0..].as_ptr(), depth.as_ptr())
                };
                for (ip, ap) in packed_a.chunks_exact(MR * kc).enumerate() {
                    let i0 = ip * MR;
                    let height = MR.min(m - i0);
                    // SAFETY: AVX2/FMA checked; `ap` is a packed MR x kc panel; the panel's
                    // rows hold 16 readable values (in place: depth + j0 + 16 <= n + max
                    // depth <= src.len(), checked above; packed: `edge`); the tile lies
                    // inside C (checked above).
                    unsafe {
                        tile_at(
                            c,
                            ldc,
                            (i0, j0),
                            (height, width),
                            (kc, ap.as_ptr()),
                            panel,
                            acc,
                        )
                    };
                }
            }
        }
    })
}

/// Where one 16-wide panel of B lies: in place (`base + depth[p]` for step `p`) or
/// packed (`kc` rows of NR).
#[derive(Clone, Copy)]
enum Panel {
    InPlace(*const f32, *const i32),
    Packed(*const f32),
}

/// One `height x width` tile of C at (`i0`, `j0`); edge tiles go through a small buffer.
///
/// # Safety
/// As [`tile`].
unsafe fn tile_at(
    c: &mut [f32],
    ldc: usize,
    (i0, j0): (usize, usize),
    (height, width): (usize, usize),
    (kc, ap): (usize, *const f32),
    panel: Panel,
    accumulate: bool,
) {
    // SAFETY (both calls): the caller's contract; `tmp` is one full tile.
    unsafe {
        if height == MR && width == NR {
            tile(
                kc,
                ap,
                panel,
                c.as_mut_ptr().add(i0 * ldc + j0),
                ldc,
                accumulate,
            );
            return;
        }
        let mut tmp = [0.0f32; MR * NR];
        tile(kc, ap, panel, tmp.as_mut_ptr(), NR, false);
        write_edge(c, ldc, (i0, j0), (height, width), &tmp, accumulate);
    }
}

/// `C[6 x 16] (+)= A_panel * B_panel` (A packed depth-major, `MR` values per step).
///
/// # Safety
/// AVX2 and FMA are available; `a` has `MR * kc` readable values; each of the panel's
/// `kc` rows has 16 readable values; `c` six writable rows of sixteen, `ldc` apart.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile(kc: usize, a: *const f32, panel: Panel, c: *mut f32, ldc: usize, accumulate: bool) {
    // SAFETY (whole body): pointer arithmetic stays inside the ranges the caller promised.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        // One step of the depth: two vectors of B, six broadcasts of A. (A macro, not a
        // closure, so that both loops are plain AVX2 code whatever the inliner decides.)
        macro_rules! step {
            ($a:expr, $b:expr) => {{
                let (a, b): (*const f32, *const f32) = ($a, $b);
                let b0 = _mm256_loadu_ps(b);
                let b1 = _mm256_loadu_ps(b.add(8));
                for (r, row) in acc.iter_mut().enumerate() {
                    let av = _mm256_broadcast_ss(&*a.add(r));
                    row[0] = _mm256_fmadd_ps(av, b0, row[0]);
                    row[1] = _mm256_fmadd_ps(av, b1, row[1]);
                }
            }};
        }
        match panel {
            Panel::InPlace(base, depth) => {
                for p in 0..kc {
                    step!(a.add(p * MR), base.add(*depth.add(p) as usize));
                }
            }
            Panel::Packed(b) => {
                for p in 0..kc {
                    step!(a.add(p * MR), b.add(p * NR));
                }
            }
        }
        store_tile(&acc, c, ldc, accumulate, None);
    }
}

/// Never called: [`super::available`] is false off x86-64, and [`shifted_gemm`] checks it.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn tile(_kc: usize, _a: *const f32, _panel: Panel, _c: *mut f32, _ldc: usize, _acc: bool) {
    unreachable!("the AVX2 microkernel exists only on x86-64")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shifted_product_matches_naive_for_edge_tiles_and_depth_blocks() {
        if !super::super::available() {
            return;
        }
        // 8 rows (a short second tile), 37 columns (a short last panel read near the end
        // of `src`), depth 3 and 600 (three blocks, so C accumulates between blocks).
        for k in [3, 600] {
            let (m, n) = (8, 37);
            let src: Vec<f32> = (0..1000).map(|i| ((i * 7) % 23) as f32 - 11.0).collect();
            let depth: Vec<i32> = (0..k as i32)
                .map(|p| (p * 13) % (1000 - n as i32 + 1))
                .collect();
            let lda = k + 3;
            let a: Vec<f32> = (0..m * lda).map(|i| ((i * 5) % 19) as f32 - 9.0).collect();
            let ldc = n + 1;
            let mut c = vec![2.0f32; m * ldc];
            let b = Shifted {
                src: &src,
                depth: &depth,
            };
            shifted_gemm(&mut c, ldc, (m, n), true, (&a, lda), b);
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = 2.0
                        + (0..k)
                            .map(|p| a[i * lda + p] as f64 * src[depth[p] as usize + j] as f64)
                            .sum::<f64>();
                    assert_eq!(c[i * ldc + j] as f64, want, "k {k}, ({i}, {j})");
                }
                assert_eq!(c[i * ldc + n], 2.0, "padding between rows untouched");
            }
        }
    }
}
