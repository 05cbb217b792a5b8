//! The two kernels' plans: blocks of images, the threads' split of each phase, and the
//! products between the transforms (see the parent module for the method).

use gemm::Parallelism;
use rayon::prelude::*;

use super::filters::*;
use super::tiles::*;
use super::*;
use crate::arena;
use crate::matmul::{MatRef, gemm_into};
use crate::sgemm::{MR, PanelsA, blocked_with, pack_b_panel, prepacked_a_len};

/// [`super::forward`] in blocks of images whose `V` and `M` take about `block_bytes`.
pub(super) fn forward(x: &[f32], w: &[f32], g: &ConvGeometry, y: &mut [f32], block_bytes: usize) {
    let plan = Plan::new(g, block_bytes);
    let u = transform_filters(w, g, plan.threads);
    forward_transformed(x, &u, g, y, &plan);
    arena::recycle(crate::Buffer::F32(u));
}

/// U: each ξ's filters packed for the GEMM, as `sgemm::prepack_a` lays them out, split
/// among `threads`. Why packed once per call: packing them per product was a second
/// pass over 37 MB in ResNet's last stage, a large share of its forward pass (measured:
/// BENCHMARKS.md, "Figures moved from code comments").
pub(super) fn transform_filters(w: &[f32], g: &ConvGeometry, threads: usize) -> Vec<f32> {
    let (c, o) = (g.c, g.o);
    let packed = prepacked_a_len(o, c);
    // From the pool, taken on this thread (see `arena`).
    let mut u = arena::for_overwrite::<f32>(XI * packed);
    let panels = o.div_ceil(MR);
    let per = panels.div_ceil(threads.max(1));
    let filters = Dst(u.as_mut_ptr());
    (0..threads.max(1)).into_par_iter().for_each(|t| {
        let filters = &filters; // the whole `Dst` (Sync), not its raw pointer field
        for panel in (t * per).min(panels)..((t + 1) * per).min(panels) {
            // SAFETY: the planner checked that the CPU has AVX2 and FMA; each row
            // panel of every ξ is written by one thread only, inside `u`.
            unsafe { transform_filter_panel(w, o, c, panel, filters.0) };
        }
    });
    u
}

/// The forward pass with the filters already transformed by [`transform_filters`].
pub(super) fn forward_transformed(
    x: &[f32],
    u: &[f32],
    g: &ConvGeometry,
    y: &mut [f32],
    plan: &Plan,
) {
    let (c, o) = (g.c, g.o);
    let threads = plan.threads;
    let packed = prepacked_a_len(o, c);
    // Every buffer from the pool, taken on this thread (see `arena`).
    let mut v = arena::for_overwrite::<f32>(c * XI * plan.max_cols);
    let mut m = arena::for_overwrite::<f32>(XI * o * plan.max_cols);
    let mut scratch = arena::for_overwrite::<f32>(threads * plan.scratch_len);
    let dst = Dst(y.as_mut_ptr());
    for block in plan.blocks(g) {
        let v = &mut v[..c * XI * block.cols];
        transform_inputs(x, &block, v, &mut scratch, plan.scratch_len);
        let m = &mut m[..XI * o * block.cols];
        let v = &*v;
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
    for buf in [v, m, scratch] {
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
    // Its filter transform runs on the same scratch after the blocks.
    let scratch_len = plan.scratch_len.max(filter_scratch(c));
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
                    // SAFETY: the planner checked that the CPU has AVX2 and FMA.
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
/// a block has, and the scratch each thread needs for its padded input planes.
pub(super) struct Plan {
    per_image: usize,
    per_block: usize,
    max_cols: usize,
    scratch_len: usize,
    threads: usize,
}

impl Plan {
    pub(super) fn new(g: &ConvGeometry, block_bytes: usize) -> Plan {
        let (th, tw) = tiles(g);
        let per_block = images_per_block(g, block_bytes);
        let (ph, pw) = padded_sides(g);
        let padded_len = per_block * ph * pw + SLACK;
        Plan {
            per_image: th * tw,
            per_block,
            max_cols: (per_block * th * tw).next_multiple_of(LANES),
            scratch_len: padded_len,
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
pub(super) fn transform_inputs(
    x: &[f32],
    block: &Block,
    v: &mut [f32],
    scratch: &mut [f32],
    scratch_len: usize,
) {
    let row = XI * block.cols;
    per_thread(v, row, scratch, scratch_len, |first, chunk, s| {
        for (i, vc) in chunk.chunks_mut(row).enumerate() {
            // SAFETY: the kernels run only where the planner checked AVX2 and FMA.
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
pub(super) struct Dst(*mut f32);
// SAFETY: threads write disjoint parts, and the pointer outlives the parallel
// section (it borrows the caller's `y` or `u`).
unsafe impl Send for Dst {}
unsafe impl Sync for Dst {}

/// Runs `f(first_item, items, scratch)` on one run of consecutive `item_len`-long
/// items of `out` per thread, each with its own `scratch_len` values of `scratch`.
pub(super) fn per_thread(
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
