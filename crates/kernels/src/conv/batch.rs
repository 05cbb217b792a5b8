//! How the strategies split a batch among threads and share its operands: blocks of
//! consecutive images per thread, a block's output gradient as one matrix, and the sum
//! of per-block partial weight gradients.
//!
//! ```text
//! let (blocks, per) = batch_blocks(g.n);            // one block of `per` images per thread
//! let (dy_g, at) = group_output_gradient(dy, &g, (s0, k), group, &mut tmp);
//! sum_partials(&mut dw, &partials);                 // the blocks' weight gradients, added
//! ```

use rayon::prelude::*;

use super::geometry::ConvGeometry;
use crate::elementwise::{BinaryFn, Num};
use crate::matmul::MatRef;

/// Whether one block of the batch per thread keeps the threads at least 3/4 busy. Where
/// it does not (ResNet-50's 8 images on 16 threads: half of them idle; one image on two),
/// the paths split each product among all threads instead and take the images one chunk
/// after another.
pub(crate) fn batch_split_pays(n: usize) -> bool {
    let threads = rayon::current_num_threads().max(1);
    let per = n.div_ceil(threads).max(1);
    4 * n >= 3 * per * threads
}

/// Whether a pass whose batch leaves threads idle ([`batch_split_pays`] false) should split
/// each of its products, of `work` multiply-adds, among the threads instead: only where
/// the product is large enough to be split at all (`sgemm::PARALLEL_PRODUCT_MIN`), since
/// a smaller one runs on one thread and the images would then go one after another.
pub(crate) fn split_products_pay(n: usize, work: usize) -> bool {
    rayon::current_num_threads() > 1
        && !batch_split_pays(n)
        && work >= crate::sgemm::PARALLEL_PRODUCT_MIN
}

/// The batch split into one block of consecutive samples per thread: (blocks, per block).
/// Scratch is taken once per block, on the calling thread, so that a graph's buffer pool
/// (see [`crate::arena`]) serves it.
pub(crate) fn batch_blocks(n: usize) -> (usize, usize) {
    let blocks = rayon::current_num_threads().max(1).min(n.max(1));
    let per = n.div_ceil(blocks).max(1);
    (n.div_ceil(per).max(1), per)
}

/// `dY` of images `s0..s0 + k`, group `group`, as one [og, k * ohw] matrix (image `s` at
/// column `s * ohw`): read in place for one image, else gathered into `tmp` first.
pub(crate) fn group_output_gradient<'a, T: Num>(
    dy: &'a [T],
    g: &ConvGeometry,
    (s0, k): (usize, usize),
    group: usize,
    tmp: &'a mut [T],
) -> (&'a [T], MatRef) {
    let ohw = g.ohw();
    if k == 1 {
        let in_place = MatRef {
            offset: (s0 * g.o + group * g.og()) * ohw,
            row_stride: ohw as isize,
            col_stride: 1,
        };
        return (dy, in_place);
    }
    gather_dy(dy, g, s0, k, group, tmp);
    let gathered = MatRef {
        offset: 0,
        row_stride: (k * ohw) as isize,
        col_stride: 1,
    };
    (tmp, gathered)
}

/// Copies `dy` of images `s0..s0 + k`, group `group`, into `tmp` as one [og, k * ohw]
/// matrix (image `s` at column `s * ohw`).
fn gather_dy<T: Num>(dy: &[T], g: &ConvGeometry, s0: usize, k: usize, group: usize, tmp: &mut [T]) {
    let (ohw, og) = (g.ohw(), g.og());
    let ld = k * ohw;
    for s in 0..k {
        for o in 0..og {
            tmp[o * ld + s * ohw..][..ohw]
                .copy_from_slice(&dy[((s0 + s) * g.o + group * og + o) * ohw..][..ohw]);
        }
    }
}

/// Copies image `s` of a product of several images side by side (`og` rows of `ld`, image
/// `s` from column `s * ohw`) into group `group`'s planes of that image's output `image`
/// ([O, OH, OW]): the way back of [`group_output_gradient`]'s gathering.
pub(crate) fn scatter_image<T: Copy>(
    product: &[T],
    ld: usize,
    s: usize,
    (group, og, ohw): (usize, usize, usize),
    image: &mut [T],
) {
    for o in 0..og {
        image[(group * og + o) * ohw..][..ohw].copy_from_slice(&product[o * ld + s * ohw..][..ohw]);
    }
}

/// `dw` = the sum of the `dw.len()`-long partial gradients in `partials` (one per block of
/// the batch), on all threads: each sums one stretch of `dw` over every partial. Why in
/// parallel: with 16 blocks, a serial sum read 16 copies of ResNet-50's 2048 x 1024
/// gradients on one thread while the others waited.
pub(crate) fn sum_partials<T: Num>(dw: &mut [T], partials: &[T]) {
    // A stretch: 16 KiB of f32, large enough that a task's cost dwarfs its scheduling.
    const STRETCH: usize = 4096;
    let len = dw.len();
    dw.par_chunks_mut(STRETCH)
        .enumerate()
        .for_each(|(i, stretch)| {
            let at = i * STRETCH;
            stretch.copy_from_slice(&partials[at..][..stretch.len()]);
            for p in partials.chunks(len.max(1)).skip(1) {
                for (d, &v) in stretch.iter_mut().zip(&p[at..]) {
                    *d = d.binary(BinaryFn::Add, v);
                }
            }
        });
}
