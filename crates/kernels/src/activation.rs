//! Softmax over the last axis and GELU (erf form), forward and gradient, and ReLU's
//! gradient, each one sweep over memory. PyNative mode runs them as whole operators (`spore-core`'s
//! `eager` module), and so do `jit` graphs for softmax and GELU; ReLU's gradient keeps its
//! primitives there, which fusion merges into products and pooling.
//!
//! ```
//! use spore_kernels::activation;
//! let mut p = [0.0f32; 3];
//! activation::softmax_rows(&[1.0, 1.0, 1.0], 3, &mut p);
//! assert!(p.iter().all(|&v| (v - 1.0 / 3.0).abs() < 1e-7));
//! ```
//!
//! The exponential and the error function are [`vmath`]'s, the ones the `Exp` and `Erf`
//! primitives use, so the eager operators and the composites differ only in the order
//! of their sums.

use rayon::prelude::*;

use crate::vmath;
use crate::widest::widest;

/// Lanes of a row's max and sums: independent accumulators, so the loop vectorises.
const LANES: usize = 16;

#[inline(always)]
fn lanes(row: &[f32], init: f32, f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [init; LANES];
    let mut rest = row.chunks_exact(LANES);
    for block in &mut rest {
        for (a, &v) in acc.iter_mut().zip(block) {
            *a = f(*a, v);
        }
    }
    let mut total = acc.iter().fold(init, |t, &a| f(t, a));
    for &v in rest.remainder() {
        total = f(total, v);
    }
    total
}

/// Rows per parallel task: about four tasks per thread, at least one row.
fn chunk(len: usize, row: usize) -> usize {
    crate::norm::chunk_len(len / row.max(1), row)
}

/// `block(g, v, dst)` over matching `step`-long pieces of `g`, `v` and `dx`, in parallel:
/// the gradients' one shape of loop.
fn zip_pieces(
    g: &[f32],
    v: &[f32],
    dx: &mut [f32],
    step: usize,
    block: impl Fn(&[f32], &[f32], &mut [f32]) + Sync,
) {
    dx.par_chunks_mut(step)
        .zip(v.par_chunks(step).zip(g.par_chunks(step)))
        .for_each(|(dst, (vs, gs))| block(gs, vs, dst));
}

widest! {
    fn softmax_block(src: &[f32], row: usize, dst: &mut [f32]) {
        for (y, r) in dst.chunks_mut(row).zip(src.chunks(row)) {
            let max = lanes(r, f32::NEG_INFINITY, f32::max);
            for (e, &v) in y.iter_mut().zip(r) {
                *e = vmath::exp(v - max);
            }
            let total = lanes(y, 0.0, |a, b| a + b);
            for e in y.iter_mut() {
                *e /= total;
            }
        }
    }
}

/// `exp(x - max) / Σ exp(x - max)` along each `row`-long row of `x`.
pub fn softmax_rows(x: &[f32], row: usize, out: &mut [f32]) {
    debug_assert!(row > 0 && x.len() == out.len() && x.len().is_multiple_of(row));
    let step = chunk(x.len(), row);
    out.par_chunks_mut(step)
        .zip(x.par_chunks(step))
        .for_each(|(dst, src)| softmax_block(src, row, dst));
}

widest! {
    fn softmax_grad_block(g: &[f32], y: &[f32], row: usize, dx: &mut [f32]) {
        let mut products = [0.0f32; 64];
        for ((d, y), g) in dx.chunks_mut(row).zip(y.chunks(row)).zip(g.chunks(row)) {
            // Σ g·y in lanes: the products a block at a time, then summed.
            let mut dot = 0.0f32;
            for (yb, gb) in y.chunks(64).zip(g.chunks(64)) {
                let p = &mut products[..yb.len()];
                for ((p, &a), &b) in p.iter_mut().zip(yb).zip(gb) {
                    *p = a * b;
                }
                dot += lanes(p, 0.0, |a, b| a + b);
            }
            for ((d, &y), &g) in d.iter_mut().zip(y).zip(g) {
                *d = y * (g - dot);
            }
        }
    }
}

/// Softmax's input gradient from its output `y`: `y · (g - Σ g · y)` per row.
pub fn softmax_rows_grad(g: &[f32], y: &[f32], row: usize, dx: &mut [f32]) {
    debug_assert!(
        row > 0 && g.len() == y.len() && dx.len() == y.len() && y.len().is_multiple_of(row)
    );
    zip_pieces(g, y, dx, chunk(y.len(), row), |g, y, d| {
        softmax_grad_block(g, y, row, d)
    });
}

/// Elements per parallel task of an elementwise loop.
fn flat_chunk(len: usize) -> usize {
    len.div_ceil(rayon::current_num_threads().max(1) * 4)
        .max(4096)
}

widest! {
    fn gelu_block(src: &[f32], dst: &mut [f32]) {
        for (y, &v) in dst.iter_mut().zip(src) {
            let cdf = vmath::erf(v * std::f32::consts::FRAC_1_SQRT_2) + 1.0;
            *y = v * cdf * 0.5;
        }
    }
}

/// `x · (1 + erf(x / √2)) / 2`, in the composite's order of operations.
pub fn gelu_erf(x: &[f32], out: &mut [f32]) {
    debug_assert_eq!(x.len(), out.len());
    let step = flat_chunk(x.len());
    out.par_chunks_mut(step)
        .zip(x.par_chunks(step))
        .for_each(|(dst, src)| gelu_block(src, dst));
}

widest! {
    fn gelu_grad_block(g: &[f32], x: &[f32], dx: &mut [f32]) {
        // 1 / √(2π)
        const INV_SQRT_2PI: f32 = 0.398_942_3;
        for ((d, &v), &g) in dx.iter_mut().zip(x).zip(g) {
            let cdf = (vmath::erf(v * std::f32::consts::FRAC_1_SQRT_2) + 1.0) * 0.5;
            let pdf = vmath::exp(-0.5 * v * v) * INV_SQRT_2PI;
            *d = g * (cdf + v * pdf);
        }
    }
}

/// GELU's input gradient: `g · ((1 + erf(x / √2)) / 2 + x · exp(-x² / 2) / √(2π))`.
pub fn gelu_erf_grad(g: &[f32], x: &[f32], dx: &mut [f32]) {
    debug_assert!(g.len() == x.len() && dx.len() == x.len());
    zip_pieces(g, x, dx, flat_chunk(x.len()), gelu_grad_block);
}

widest! {
    fn relu_grad_block(g: &[f32], y: &[f32], dx: &mut [f32]) {
        for ((d, &y), &g) in dx.iter_mut().zip(y).zip(g) {
            *d = std::hint::select_unpredictable(y > 0.0, g, 0.0);
        }
    }
}

/// ReLU's input gradient from its output: `g` where `y > 0`, else 0 (NaN included), in
/// one pass where a comparison and a select took two.
pub fn relu_grad(g: &[f32], y: &[f32], dx: &mut [f32]) {
    debug_assert!(g.len() == y.len() && dx.len() == y.len());
    zip_pieces(g, y, dx, flat_chunk(y.len()), relu_grad_block);
}
