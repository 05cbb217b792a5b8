//! Batched bfloat16 matrix products for [`crate::matmul::matmul`]: each item's product
//! accumulates in float32 ([`super::gemm_bf16`]) and is rounded once to bfloat16.

use half::bf16;
use rayon::prelude::*;

use super::{Path, gemm_bf16};
use crate::layout::Layout;
use crate::matmul::{
    GEMM_PARALLEL_WORK, MatRef, batch_fills_threads, batch_offsets, parallelism_for, threads_of,
};

/// `[..., m, k] x [..., k, n] -> [..., m, n]` in bfloat16; `la` and `lb` are already
/// broadcast to the output's batch shape `batch`.
pub(crate) fn batched(
    a: &[bf16],
    la: &Layout,
    b: &[bf16],
    lb: &Layout,
    batch: &[usize],
) -> Vec<bf16> {
    let r = la.rank();
    let (m, k, n) = (la.shape[r - 2], la.shape[r - 1], lb.shape[r - 1]);
    let nb: usize = batch.iter().product();
    let offsets = batch_offsets(la, lb, batch);
    let mut wide = crate::arena::for_overwrite::<f32>(nb * m * n);
    let path = Path::best();
    let work = m * n * k;
    let item = |c: &mut [f32], o: &[i64], threads: usize| {
        let (oa, ob) = (o[0] as usize, o[1] as usize);
        let (ma, mb) = (MatRef::of_last_two(la, oa), MatRef::of_last_two(lb, ob));
        gemm_bf16(path, c, false, (m, n, k), (a, ma), (b, mb), threads);
    };
    if m * n > 0 && nb > 1 && (work < GEMM_PARALLEL_WORK || batch_fills_threads(nb)) {
        wide.par_chunks_mut(m * n)
            .zip(offsets.par_chunks(2))
            .for_each(|(c, o)| item(c, o, 1));
    } else if m * n > 0 {
        let threads = threads_of(parallelism_for(work));
        for (c, o) in wide.chunks_mut(m * n).zip(offsets.chunks(2)) {
            item(c, o, threads);
        }
    }
    let mut out = crate::arena::for_overwrite::<bf16>(nb * m * n);
    crate::half_float::round_to_bf16(&wide, &mut out);
    crate::arena::recycle(crate::Buffer::F32(wide));
    crate::arena::recycle(crate::Buffer::I64(offsets));
    out
}
