//! Batched matrix multiplication with arbitrary strides (transposed views multiply without
//! a copy): f32 on x86-64 with AVX2/FMA runs Spore's own GEMM (`sgemm`), f64 and other
//! machines the `gemm` crate, integers a plain loop.
//!
//! ```
//! use spore_kernels::{matmul, Buffer, Layout};
//! let a = Buffer::F32(vec![1.0, 2.0, 3.0, 4.0]);
//! let l = Layout::contiguous(&[2, 2]);
//! // No batch axes: out_batch is empty.
//! let c = matmul::matmul(&a, &l, &a, &l.permute(&[1, 0]), &[]).unwrap();
//! assert_eq!(c, Buffer::F32(vec![5.0, 11.0, 11.0, 25.0]));
//! ```

use gemm::Parallelism;
use rayon::prelude::*;

use crate::buffer::Buffer;
use crate::elementwise::{BinaryFn, Num};
use crate::layout::{Dims, Layout, Strides, walk_rows};
use crate::operand::Epilogue;
pub use crate::operand::MatRef;
pub(crate) use crate::operand::{as_f32, as_f32_mut};
use crate::sgemm;

/// Work (m*n*k) above which one product is split across threads.
pub(crate) const GEMM_PARALLEL_WORK: usize = 1 << 18;

/// Whether a batch of `nb` products, one per task, keeps the threads at least 3/4 busy:
/// then each product runs on one thread, even a large one. Why: the attention products
/// of a BERT step (64 of 128 x 128 x 64) were each split among all threads, whose parts
/// were too small to pay for the split (BENCHMARKS.md, "16-core host").
#[doc(hidden)]
pub fn batch_fills_threads(nb: usize) -> bool {
    let threads = rayon::current_num_threads().max(1);
    4 * nb >= 3 * nb.div_ceil(threads) * threads
}

/// Whether Spore's f32 GEMM can run its 12x16 AVX-512 kernel on this CPU, and makes it
/// take that kernel from now on (it is off unless `SPORE_AVX512_GEMM=on`): for tests that
/// check its products on whichever AVX-512 machine runs them. Returns false (and changes
/// nothing) on a CPU without AVX-512.
#[doc(hidden)]
pub fn force_avx512_gemm_pairs() -> bool {
    crate::sgemm::kernel512::force_pairs();
    crate::sgemm::kernel512::runs_here()
}

/// Whether f32 products run on Spore's own GEMM (x86-64 with AVX2 and FMA, unless
/// `SPORE_GEMM=crate`); otherwise they go through the `gemm` crate, which allocates its
/// packing buffers inside every call.
pub fn own_f32_gemm() -> bool {
    sgemm::available()
}

/// Products running in the `gemm` crate right now, on any thread.
static CRATE_GEMMS_RUNNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether a product is running in the `gemm` crate (which allocates its packing buffers in
/// every call) on some thread. Why: a counting allocator can then tell the crate's
/// allocations from everyone else's, so the steady-state test holds every other allocation
/// to zero on CPUs without Spore's own f32 GEMM too.
pub fn crate_gemm_running() -> bool {
    CRATE_GEMMS_RUNNING.load(std::sync::atomic::Ordering::Relaxed) > 0
}

/// Prepares every thread of the kernel pool for GEMMs without allocation: each gets the
/// packing scratch that LeNet- and MLP-sized products need, also for one nested GEMM (a
/// worker waiting inside one product may run a task of another). Compiled graphs call
/// this once, so their steady state allocates nothing from the first step on, whichever
/// thread steals which task; larger products grow a thread's scratch once.
pub fn reserve_gemm_scratch() {
    if sgemm::available() {
        rayon::broadcast(|_| {
            sgemm::reserve_scratch(2);
            crate::conv::reserve_tap_rows(2);
        });
    }
}

/// Parallelism for one product of `m*n*k` multiply-adds.
pub fn parallelism_for(work: usize) -> Parallelism {
    if work >= GEMM_PARALLEL_WORK && rayon::current_num_threads() > 1 {
        Parallelism::Rayon(rayon::current_num_threads())
    } else {
        Parallelism::None
    }
}

/// `c (m x n, row-major, stride n) (+)= a (m x k) * b (k x n)`. f32 goes to Spore's own
/// GEMM where the CPU has AVX2 and FMA, other floats to `gemm`, integers to a plain loop.
///
/// # Safety-free contract
/// The caller guarantees that every index reached through the strides is inside `a` and `b`.
#[allow(clippy::too_many_arguments)]
pub fn gemm_into<T: Num>(
    c: &mut [T],
    accumulate: bool,
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    ma: MatRef,
    b: &[T],
    mb: MatRef,
    par: Parallelism,
) {
    gemm_with(c, accumulate, None, m, n, k, (a, ma), (b, mb), par);
}

/// [`gemm_into`] and [`crate::matmul_epilogue::gemm_epilogue_into`]: the product, then
/// the epilogue (in the tiles on Spore's own GEMM, as a pass after it elsewhere).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_with<T: Num>(
    c: &mut [T],
    accumulate: bool,
    epilogue: Option<&Epilogue<'_, T>>,
    m: usize,
    n: usize,
    k: usize,
    (a, ma): (&[T], MatRef),
    (b, mb): (&[T], MatRef),
    par: Parallelism,
) {
    assert!(c.len() >= m * n, "gemm_into: output too small");
    if m == 0 || n == 0 {
        return;
    }
    let add_after = |c: &mut [T]| {
        if let Some(e) = epilogue {
            e.apply_after(&mut c[..m * n], n);
        }
    };
    if k == 0 {
        if !accumulate {
            c[..m * n].iter_mut().for_each(|x| *x = T::zero());
        }
        return add_after(c);
    }
    let is_f32 = T::DTYPE == crate::DType::F32;
    let is_f64 = T::DTYPE == crate::DType::F64;
    if is_f32 || is_f64 {
        check_reach(ma, m, k, a.len());
        check_reach(mb, k, n, b.len());
        if let (Some(c), Some(a), Some(b)) = (as_f32_mut(c), as_f32(a), as_f32(b))
            && sgemm::available()
        {
            let threads = threads_of(par);
            let epilogue = epilogue.map(|e| {
                e.as_f32()
                    .unwrap_or_else(|| unreachable!("T is f32 when C is"))
            });
            sgemm::sgemm(c, accumulate, epilogue, m, n, k, a, ma, b, mb, threads);
            return;
        }
        let (one, zero) = (T::one(), T::zero());
        struct Running;
        impl Drop for Running {
            fn drop(&mut self) {
                CRATE_GEMMS_RUNNING.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        CRATE_GEMMS_RUNNING.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let running = Running;
        // SAFETY: the asserts above keep every strided access inside `a`, `b` and `c`;
        // gemm's generic entry dispatches on the concrete type (f32 or f64 here).
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                c.as_mut_ptr(),
                1,
                n as isize,
                accumulate,
                a.as_ptr().add(ma.offset),
                ma.col_stride,
                ma.row_stride,
                b.as_ptr().add(mb.offset),
                mb.col_stride,
                mb.row_stride,
                if accumulate { one } else { zero },
                one,
                false,
                false,
                false,
                par,
            );
        }
        drop(running);
        return add_after(c);
    }
    for i in 0..m {
        for j in 0..n {
            let mut s = if accumulate { c[i * n + j] } else { T::zero() };
            for p in 0..k {
                let x = a[(ma.offset as isize
                    + i as isize * ma.row_stride
                    + p as isize * ma.col_stride) as usize];
                let y = b[(mb.offset as isize
                    + p as isize * mb.row_stride
                    + j as isize * mb.col_stride) as usize];
                s = s.binary(BinaryFn::Add, x.binary(BinaryFn::Mul, y));
            }
            c[i * n + j] = s;
        }
    }
    add_after(c);
}

/// Bounds of a strided `rows x cols` operand over `len` values: the furthest element
/// reachable through the strides must be in range.
///
/// # Panics
/// When it is not.
pub(crate) fn check_reach(r: MatRef, rows: usize, cols: usize, len: usize) {
    let far = r.offset as isize
        + (rows as isize - 1) * r.row_stride.max(0)
        + (cols as isize - 1) * r.col_stride.max(0);
    let near = r.offset as isize
        + (rows as isize - 1) * r.row_stride.min(0)
        + (cols as isize - 1) * r.col_stride.min(0);
    assert!(
        near >= 0 && (far as usize) < len,
        "matrix product: a {rows} x {cols} operand with strides ({}, {}) from offset {} reaches outside its {len} values",
        r.row_stride,
        r.col_stride,
        r.offset
    );
}

/// Threads a product runs on under `par`.
pub(crate) fn threads_of(par: Parallelism) -> usize {
    match par {
        // As in `gemm`: zero threads means all of the pool's.
        Parallelism::Rayon(0) => rayon::current_num_threads(),
        Parallelism::Rayon(t) => t,
        Parallelism::None => 1,
    }
}

/// Where each batch item of `[..., m, k] x [..., k, n]` starts in a and in b, as (a, b)
/// pairs, in a pooled vector (a compiled step allocates nothing here, whatever the batch;
/// the caller recycles it).
pub(crate) fn batch_offsets(la: &Layout, lb: &Layout, batch: &[usize]) -> Vec<i64> {
    let r = la.rank();
    let nb: usize = batch.iter().product();
    let mut offsets = crate::arena::for_overwrite::<i64>(2 * nb);
    let bshape: Dims = batch.iter().copied().chain([1]).collect();
    let sa: Strides = la.strides[..r - 2].iter().copied().chain([0]).collect();
    let sb: Strides = lb.strides[..r - 2].iter().copied().chain([0]).collect();
    let mut next = 0;
    walk_rows(&bshape, [&sa, &sb], [la.offset, lb.offset], 0..nb, |row| {
        offsets[next] = row.starts[0] as i64;
        offsets[next + 1] = row.starts[1] as i64;
        next += 2;
    });
    offsets
}

/// `[..., m, k] x [..., k, n] -> [..., m, n]`; `la` and `lb` are already broadcast to the
/// output's batch shape `out_batch`. bfloat16 products accumulate in float32 and round
/// once (see [`crate::bf16_gemm`]).
pub fn matmul(
    a: &Buffer,
    la: &Layout,
    b: &Buffer,
    lb: &Layout,
    out_batch: &[usize],
) -> Result<Buffer, String> {
    fn go<T: Num>(a: &[T], la: &Layout, b: &[T], lb: &Layout, batch: &[usize]) -> Vec<T> {
        let r = la.rank();
        let (m, k, n) = (la.shape[r - 2], la.shape[r - 1], lb.shape[r - 1]);
        let nb: usize = batch.iter().product();
        // A GEMM overwrites all of C when the depth is not zero; an empty sum is zero.
        let mut out = if k > 0 {
            crate::arena::for_overwrite::<T>(nb * m * n)
        } else {
            crate::arena::zeroed::<T>(nb * m * n)
        };
        let offsets = batch_offsets(la, lb, batch);
        let mat = |off: usize, l: &Layout| MatRef::of_last_two(l, off);
        let work = m * n * k;
        if nb > 1 && (work < GEMM_PARALLEL_WORK || batch_fills_threads(nb)) && m * n > 0 {
            out.par_chunks_mut(m * n)
                .zip(offsets.par_chunks(2))
                .for_each(|(c, o)| {
                    let (oa, ob) = (o[0] as usize, o[1] as usize);
                    gemm_into(
                        c,
                        false,
                        m,
                        n,
                        k,
                        a,
                        mat(oa, la),
                        b,
                        mat(ob, lb),
                        Parallelism::None,
                    )
                });
        } else if m * n > 0 {
            for (c, o) in out.chunks_mut(m * n).zip(offsets.chunks(2)) {
                let (oa, ob) = (o[0] as usize, o[1] as usize);
                gemm_into(
                    c,
                    false,
                    m,
                    n,
                    k,
                    a,
                    mat(oa, la),
                    b,
                    mat(ob, lb),
                    parallelism_for(work),
                );
            }
        }
        crate::arena::recycle(Buffer::I64(offsets));
        out
    }
    Ok(match (a, b) {
        (Buffer::F32(a), Buffer::F32(b)) => Buffer::F32(go(a, la, b, lb, out_batch)),
        (Buffer::BF16(a), Buffer::BF16(b)) => {
            Buffer::BF16(crate::bf16_gemm::batched(a, la, b, lb, out_batch))
        }
        (Buffer::F64(a), Buffer::F64(b)) => Buffer::F64(go(a, la, b, lb, out_batch)),
        (Buffer::I32(a), Buffer::I32(b)) => Buffer::I32(go(a, la, b, lb, out_batch)),
        (Buffer::I64(a), Buffer::I64(b)) => Buffer::I64(go(a, la, b, lb, out_batch)),
        (Buffer::U8(a), Buffer::U8(b)) => Buffer::U8(go(a, la, b, lb, out_batch)),
        _ => {
            return Err(format!(
                "MatMul: unsupported dtypes {} and {}",
                a.dtype(),
                b.dtype()
            ));
        }
    })
}
