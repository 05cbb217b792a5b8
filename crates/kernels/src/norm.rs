//! Normalisation loops: BatchNorm over the channels of an `[n, c, l]` tensor and LayerNorm
//! over the rows of an `[r, d]` one, each forward pass and gradient in one or two sweeps
//! over memory. PyNative mode runs them as whole operators (`spore-nn`'s eager norms);
//! `jit` graphs run LayerNorm whole too, and BatchNorm when training (in evaluation they
//! keep its composite, one multiply-add that fusion merges with the ReLU and residual
//! addition after it).
//!
//! ```
//! use spore_kernels::norm;
//! // Two samples, one channel of two values each: mean 2.5, biased variance 1.25.
//! let x = [1.0f32, 2.0, 3.0, 4.0];
//! let moments = norm::channel_moments(&x, 2, 1, 2);
//! assert_eq!(moments, vec![2.5, 1.25]);
//! ```
//!
//! Sums run in 16 float32 lanes within one contiguous run (a sample's values of one
//! channel, or one row) and in float64 across runs: more accurate than the composites'
//! float32 reductions.

use rayon::prelude::*;

use crate::widest::widest;

/// Lanes of the float32 partial sums: enough independent adds to fill both FMA ports.
const LANES: usize = 16;

/// `Σ f(a[i], b[i], c[i])` over slices of one length, in [`LANES`] float32 lanes (lane
/// `k` takes `i ≡ k mod LANES`), returned in float64. Why slices and whole blocks of
/// `LANES`: indexing through a closure kept a bounds check per value, and the lanes then
/// ran as scalar adds; blocks of a known length vectorise.
#[inline(always)]
fn lane_sum3(a: &[f32], b: &[f32], c: &[f32], f: impl Fn(f32, f32, f32) -> f32) -> f64 {
    let len = a.len();
    let (b, c) = (&b[..len], &c[..len]);
    let mut acc = [0.0f32; LANES];
    let whole = len - len % LANES;
    let blocks = a[..whole]
        .chunks_exact(LANES)
        .zip(b[..whole].chunks_exact(LANES))
        .zip(c[..whole].chunks_exact(LANES));
    for ((xa, xb), xc) in blocks {
        for k in 0..LANES {
            acc[k] += f(xa[k], xb[k], xc[k]);
        }
    }
    let mut total: f64 = acc.iter().map(|&v| v as f64).sum();
    for i in whole..len {
        total += f(a[i], b[i], c[i]) as f64;
    }
    total
}

/// [`lane_sum3`] over one slice: `Σ f(a[i])`.
#[inline(always)]
fn lane_sum1(a: &[f32], f: impl Fn(f32) -> f32) -> f64 {
    lane_sum3(a, a, a, |x, _, _| f(x))
}

/// [`lane_sum3`] over two slices of one length: `Σ f(a[i], b[i])`.
#[inline(always)]
fn lane_sum2(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32) -> f64 {
    lane_sum3(a, b, b, |x, y, _| f(x, y))
}

/// Chunks of about a quarter of a thread's share, in whole runs of `run` values.
pub(crate) fn chunk_len(runs: usize, run: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    runs.div_ceil(threads * 4).max(1) * run.max(1)
}

/// `pair(ch)` for every channel in parallel, laid out as `[firsts .., seconds ..]`.
fn per_channel_pairs(c: usize, pair: impl Fn(usize) -> (f32, f32) + Sync + Send) -> Vec<f32> {
    let pairs: Vec<(f32, f32)> = (0..c).into_par_iter().map(pair).collect();
    pairs
        .iter()
        .map(|p| p.0)
        .chain(pairs.iter().map(|p| p.1))
        .collect()
}

/// Per channel of `x` (`[n, c, l]`, row-major): the mean and the biased variance, as
/// `[mean_0 .. mean_{c-1}, var_0 .. var_{c-1}]`. The variance is taken around the mean (a
/// second sweep over the channel, from cache when it fits), not as `E[x²] - E[x]²`.
pub fn channel_moments(x: &[f32], n: usize, c: usize, l: usize) -> Vec<f32> {
    debug_assert_eq!(x.len(), n * c * l);
    let count = (n * l).max(1) as f64;
    per_channel_pairs(c, |ch| {
        let run = |i: usize| &x[(i * c + ch) * l..(i * c + ch + 1) * l];
        let sum: f64 = (0..n).map(|i| lane_sum1(run(i), |v| v)).sum();
        let mean = (sum / count) as f32;
        let sq: f64 = (0..n)
            .map(|i| {
                let r = run(i);
                lane_sum1(r, |v| (v - mean) * (v - mean))
            })
            .sum();
        (mean, (sq / count) as f32)
    })
}

/// Values per chunk of [`channel_grad_sums`]: whole runs of about this many (ResNet-50's
/// largest BatchNorm input, 6.4M values, makes about a hundred chunks).
const GRAD_SUM_BLOCK: usize = 1 << 16;

/// Per channel: `Σ dy` and `Σ dy · (x - mean_c)`, as `[sums of dy .., sums of dy·(x-mean) ..]`.
pub fn channel_grad_sums(
    dy: &[f32],
    x: &[f32],
    mean: &[f32],
    n: usize,
    c: usize,
    l: usize,
) -> Vec<f32> {
    debug_assert!(dy.len() == n * c * l && x.len() == dy.len() && mean.len() == c);
    // The runs in memory order, split among the threads in contiguous chunks; each chunk
    // sums its runs into per-channel partials, and the partials are added at the end.
    // Why: a thread per channel, reading `n` runs `c · l` values apart from each of two
    // tensors in SSE2's lanes, took twice the time per byte of BatchNorm's input
    // gradient, which sweeps its tensors in order (measured: BENCHMARKS.md, "BatchNorm's
    // parameter gradient").
    let runs = n * c;
    // Chunks of a size the shape alone sets, so that the partials, and the bits of
    // their sum, do not depend on the thread count.
    let per_chunk = (GRAD_SUM_BLOCK / l.max(1)).max(1);
    let partials: Vec<Vec<f64>> = (0..runs.div_ceil(per_chunk))
        .into_par_iter()
        .map(|index| {
            let first = index * per_chunk;
            let count = per_chunk.min(runs - first);
            let mut sums = vec![0.0f64; 2 * c];
            let span = first * l..(first + count) * l;
            run_grad_sums(&dy[span.clone()], &x[span], mean, (first, count), &mut sums);
            sums
        })
        .collect();
    let mut out = vec![0.0f32; 2 * c];
    for (k, total) in out.iter_mut().enumerate() {
        *total = partials.iter().map(|p| p[k]).sum::<f64>() as f32;
    }
    out
}

widest! {
    /// [`channel_grad_sums`] over `count` whole runs from run `first` (`dy` and `x` hold
    /// exactly those): each run's `Σ dy` and `Σ dy·(x - mean_c)` added to its channel's
    /// `sums[ch]` and `sums[c + ch]`. Compiled per vector width (the two sums are
    /// separate sweeps: one loop keeping both did not vectorise).
    fn run_grad_sums(
        dy: &[f32],
        x: &[f32],
        mean: &[f32],
        runs: (usize, usize),
        sums: &mut [f64],
    ) {
        let ((first, count), c) = (runs, mean.len());
        let l = dy.len() / count.max(1);
        // The channel is counted on, not divided out per run.
        let mut ch = first % c.max(1);
        for r in 0..count {
            let at = r * l;
            let m = mean[ch];
            let (g, v) = (&dy[at..at + l], &x[at..at + l]);
            sums[ch] += lane_sum1(g, |gv| gv);
            sums[c + ch] += lane_sum2(g, v, |gv, xv| gv * (xv - m));
            ch += 1;
            if ch == c {
                ch = 0;
            }
        }
    }
}

/// `out = a_c · u + b_c · v + k_c` over an `[n, c, l]` layout (`v` and `b` together, or
/// neither): BatchNorm's forward pass (`u = x`) and its input gradient (`u = dy`, `v = x`).
pub fn channel_affine(
    u: &[f32],
    v: Option<(&[f32], &[f32])>,
    a: &[f32],
    k: &[f32],
    shape: (usize, usize, usize),
    out: &mut [f32],
) {
    let (n, c, l) = shape;
    debug_assert!(u.len() == n * c * l && out.len() == u.len() && a.len() == c && k.len() == c);
    if out.is_empty() {
        return;
    }
    let chunk = chunk_len(n * c, l);
    out.par_chunks_mut(chunk)
        .enumerate()
        .for_each(|(index, block)| {
            let first = index * chunk;
            for (r, dst) in block.chunks_mut(l.max(1)).enumerate() {
                let at = first + r * l;
                let ch = (at / l.max(1)) % c;
                let src = &u[at..at + dst.len()];
                match v {
                    Some((v, b)) => {
                        let w = &v[at..at + dst.len()];
                        let (a, b, k) = (a[ch], b[ch], k[ch]);
                        for ((d, &p), &q) in dst.iter_mut().zip(src).zip(w) {
                            *d = a * p + b * q + k;
                        }
                    }
                    None => {
                        let (a, k) = (a[ch], k[ch]);
                        for (d, &p) in dst.iter_mut().zip(src) {
                            *d = a * p + k;
                        }
                    }
                }
            }
        });
}

/// Mean and `1 / sqrt(var + eps)` of one row.
#[inline(always)]
fn row_moments(row: &[f32], eps: f32) -> (f32, f32) {
    let d = row.len().max(1) as f64;
    let mean = (lane_sum1(row, |v| v) / d) as f32;
    let var = (lane_sum1(row, |v| (v - mean) * (v - mean)) / d) as f32;
    (mean, 1.0 / (var + eps).sqrt())
}

/// LayerNorm of each `d`-long row of `x`: `(x - mean) / sqrt(var + eps) · gamma + beta`.
pub fn row_norm(x: &[f32], gamma: &[f32], beta: &[f32], eps: f32, out: &mut [f32]) {
    let d = gamma.len();
    debug_assert!(beta.len() == d && x.len() == out.len() && x.len().is_multiple_of(d));
    if d == 0 {
        return; // no rows to normalise (and `chunks(0)` would panic)
    }
    let chunk = chunk_len(x.len() / d, d);
    out.par_chunks_mut(chunk)
        .zip(x.par_chunks(chunk))
        .for_each(|(dst, src)| norm_rows(src, gamma, beta, eps, dst));
}

// The row loops below are compiled per vector width (`widest!`): the rows sit in L1, so
// they are bound by arithmetic, which the baseline's 4-lane vectors left at a quarter of
// AVX-512's rate (`norm_micro`, BENCHMARKS.md). The arithmetic, and so the bits, are the
// same at every width.
widest! {
    /// [`row_norm`] of the whole rows of `src` into `dst`.
    fn norm_rows(src: &[f32], gamma: &[f32], beta: &[f32], eps: f32, dst: &mut [f32]) {
        let d = gamma.len();
        for (y, row) in dst.chunks_mut(d).zip(src.chunks(d)) {
            let (mean, rstd) = row_moments(row, eps);
            for ((y, &v), (&g, &b)) in y.iter_mut().zip(row).zip(gamma.iter().zip(beta)) {
                *y = (v - mean) * rstd * g + b;
            }
        }
    }
}

widest! {
    /// [`row_norm_input_grad`] of the whole rows of `src` (`x`) and `grad` (`dy`) into `dst`.
    fn norm_rows_input_grad(grad: &[f32], src: &[f32], gamma: &[f32], eps: f32, dst: &mut [f32]) {
        let d = gamma.len();
        for ((out, row), g) in dst.chunks_mut(d).zip(src.chunks(d)).zip(grad.chunks(d)) {
            let (mean, rstd) = row_moments(row, eps);
            let s = lane_sum2(g, gamma, |gv, w| gv * w) / d as f64;
            let sx = lane_sum3(g, gamma, row, |gv, w, v| gv * w * (v - mean) * rstd) / d as f64;
            let (s, sx) = (s as f32, sx as f32);
            for ((o, &v), (&g, &w)) in out.iter_mut().zip(row).zip(g.iter().zip(gamma)) {
                let xhat = (v - mean) * rstd;
                *o = rstd * (g * w - s - xhat * sx);
            }
        }
    }
}

widest! {
    /// Adds the rows of `src` (`x`) and `grad` (`dy`) into `acc`: `[Σ dy · x̂, Σ dy]`.
    fn norm_rows_param_grads(grad: &[f32], src: &[f32], d: usize, eps: f32, acc: &mut [f32]) {
        let (dgamma, dbeta) = acc.split_at_mut(d);
        for (row, g) in src.chunks(d).zip(grad.chunks(d)) {
            let (mean, rstd) = row_moments(row, eps);
            for ((dg, &v), &gv) in dgamma.iter_mut().zip(row).zip(g) {
                *dg += gv * (v - mean) * rstd;
            }
            for (db, &gv) in dbeta.iter_mut().zip(g) {
                *db += gv;
            }
        }
    }
}

/// LayerNorm's input gradient, row by row: with `g = dy · gamma` and `x̂` the normalised
/// row, `dx = rstd · (g - mean(g) - x̂ · mean(g · x̂))`.
pub fn row_norm_input_grad(dy: &[f32], x: &[f32], gamma: &[f32], eps: f32, dx: &mut [f32]) {
    let d = gamma.len();
    debug_assert!(dy.len() == x.len() && dx.len() == x.len() && x.len().is_multiple_of(d));
    if d == 0 {
        return;
    }
    let chunk = chunk_len(x.len() / d, d);
    dx.par_chunks_mut(chunk)
        .zip(x.par_chunks(chunk).zip(dy.par_chunks(chunk)))
        .for_each(|(dst, (src, grad))| norm_rows_input_grad(grad, src, gamma, eps, dst));
}

/// Rows per block of LayerNorm's parameter gradients: fixed, so that the blocks, and the
/// bits of the result, follow from the shape alone, whatever the thread count.
const GRAD_BLOCK_ROWS: usize = 64;

/// LayerNorm's parameter gradients over all rows: `[Σ dy · x̂ (d values), Σ dy (d values)]`,
/// summed in float32 within blocks of [`GRAD_BLOCK_ROWS`] rows and in float64 across them.
pub fn row_norm_param_grads(dy: &[f32], x: &[f32], d: usize, eps: f32) -> Vec<f32> {
    debug_assert!(dy.len() == x.len() && x.len().is_multiple_of(d));
    if d == 0 {
        return Vec::new();
    }
    let block = GRAD_BLOCK_ROWS * d;
    // One pooled buffer of every block's partial sums: a compiled graph's steady state
    // then allocates nothing here.
    let mut partials = crate::arena::zeroed::<f32>(x.len().div_ceil(block) * 2 * d);
    partials
        .par_chunks_mut(2 * d)
        .zip(x.par_chunks(block).zip(dy.par_chunks(block)))
        .for_each(|(acc, (src, grad))| norm_rows_param_grads(grad, src, d, eps, acc));
    let mut sums = vec![0.0f64; 2 * d];
    for p in partials.chunks(2 * d) {
        for (s, &v) in sums.iter_mut().zip(p) {
            *s += v as f64;
        }
    }
    crate::arena::recycle(crate::Buffer::F32(partials));
    crate::arena::collect_exact(2 * d, sums.iter().map(|&s| s as f32))
}
