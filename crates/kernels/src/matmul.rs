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
use crate::dtype::DType;
use crate::elementwise::{BinaryFn, Num};
use crate::layout::{Dims, Layout, Strides, walk_rows};
use crate::sgemm;

/// Work (m*n*k) above which one product is split across threads.
const GEMM_PARALLEL_WORK: usize = 1 << 18;

/// Parallelism for one product of `m*n*k` multiply-adds.
/// Whether f32 products run on Spore's own GEMM (x86-64 with AVX2 and FMA, unless
/// `SPORE_GEMM=crate`); otherwise they go through the `gemm` crate, which allocates its
/// packing buffers inside every call.
pub fn own_f32_gemm() -> bool {
    sgemm::available()
}

/// Prepares every thread of the kernel pool for GEMMs without allocation: each gets the
/// packing scratch that LeNet- and MLP-sized products need, also for one nested GEMM (a
/// worker waiting inside one product may run a task of another). Compiled graphs call
/// this once, so their steady state allocates nothing from the first step on, whichever
/// thread steals which task; larger products grow a thread's scratch once.
pub fn reserve_gemm_scratch() {
    if sgemm::available() {
        rayon::broadcast(|_| sgemm::reserve_scratch(2));
    }
}

pub fn parallelism_for(work: usize) -> Parallelism {
    if work >= GEMM_PARALLEL_WORK && rayon::current_num_threads() > 1 {
        Parallelism::Rayon(rayon::current_num_threads())
    } else {
        Parallelism::None
    }
}

/// One strided matrix operand: pointer offset, row stride, column stride.
#[derive(Clone, Copy, Debug, Default)]
pub struct MatRef {
    pub offset: usize,
    pub row_stride: isize,
    pub col_stride: isize,
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

/// What [`gemm_plus_into`] adds to a product: `beta * values`, laid out as C.
pub struct Addend<'a, T> {
    pub values: &'a [T],
    pub beta: T,
}

impl<T: Num> Addend<'_, T> {
    /// Its arithmetic as a pass over a finished product `c` (every path but Spore's own
    /// GEMM, which runs it in its tiles): `beta * d` rounded before the sum.
    pub(crate) fn apply_after(self, c: &mut [T]) {
        for (c, &d) in c.iter_mut().zip(self.values) {
            *c = c.binary(BinaryFn::Add, self.beta.binary(BinaryFn::Mul, d));
        }
    }
}

/// `c = a · b + beta · d` (`c` and `d` both `m x n`, row-major, stride `n`), each
/// `beta · d` rounded before it is added, so the result has the bits of a product
/// followed by a separate multiply-add pass. On Spore's own GEMM the addend joins the
/// tiles' epilogue: D is read while C is written, and no pass over C follows (an
/// optimizer's `m * 0.9 + dW`: one sweep over memory instead of three).
///
/// # Panics
/// As [`gemm_into`], and when `d` has fewer than `m * n` values.
#[allow(clippy::too_many_arguments)]
pub fn gemm_plus_into<T: Num>(
    c: &mut [T],
    addend: Addend<'_, T>,
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    ma: MatRef,
    b: &[T],
    mb: MatRef,
    par: Parallelism,
) {
    assert!(
        addend.values.len() >= m * n,
        "gemm_plus_into: addend too small"
    );
    gemm_with(c, false, Some(addend), m, n, k, (a, ma), (b, mb), par);
}

/// [`gemm_into`] and [`gemm_plus_into`].
#[allow(clippy::too_many_arguments)]
fn gemm_with<T: Num>(
    c: &mut [T],
    accumulate: bool,
    addend: Option<Addend<'_, T>>,
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
    // Everything but Spore's own GEMM runs the addend as a pass after the product.
    let add_after = |c: &mut [T], addend: Option<Addend<'_, T>>| {
        if let Some(addend) = addend {
            addend.apply_after(&mut c[..m * n]);
        }
    };
    if k == 0 {
        if !accumulate {
            c[..m * n].iter_mut().for_each(|x| *x = T::zero());
        }
        return add_after(c, addend);
    }
    let is_f32 = T::DTYPE == crate::DType::F32;
    let is_f64 = T::DTYPE == crate::DType::F64;
    if is_f32 || is_f64 {
        // Bounds: the furthest element reachable through the strides must be in range.
        let reach = |r: MatRef, rows: usize, cols: usize, len: usize| {
            let far = r.offset as isize
                + (rows as isize - 1) * r.row_stride.max(0)
                + (cols as isize - 1) * r.col_stride.max(0);
            let near = r.offset as isize
                + (rows as isize - 1) * r.row_stride.min(0)
                + (cols as isize - 1) * r.col_stride.min(0);
            assert!(
                near >= 0 && (far as usize) < len,
                "gemm_into: operand out of bounds"
            );
        };
        reach(ma, m, k, a.len());
        reach(mb, k, n, b.len());
        if let (Some(c), Some(a), Some(b)) = (as_f32_mut(c), as_f32(a), as_f32(b))
            && sgemm::available()
        {
            let threads = match par {
                // As in `gemm`: zero threads means all of the pool's.
                Parallelism::Rayon(0) => rayon::current_num_threads(),
                Parallelism::Rayon(t) => t,
                Parallelism::None => 1,
            };
            let addend = addend
                .map(|d| as_f32_addend(d).unwrap_or_else(|| unreachable!("T is f32 when C is")));
            sgemm::sgemm(c, accumulate, addend, m, n, k, a, ma, b, mb, threads);
            return;
        }
        let (one, zero) = (T::one(), T::zero());
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
        return add_after(c, addend);
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
    add_after(c, addend);
}

/// An addend of `f32` values when `T` is `f32`.
fn as_f32_addend<T: Num>(d: Addend<'_, T>) -> Option<Addend<'_, f32>> {
    Some(Addend {
        values: as_f32(d.values)?,
        beta: as_f32(std::slice::from_ref(&d.beta))?[0],
    })
}

/// `s` as `f32` values when `T` is `f32`.
pub(crate) fn as_f32<T: Num>(s: &[T]) -> Option<&[f32]> {
    // SAFETY: only `f32` implements `Element` with dtype F32, so `T` is `f32` here.
    (T::DTYPE == crate::DType::F32)
        .then(|| unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<f32>(), s.len()) })
}

/// `s` as mutable `f32` values when `T` is `f32`.
pub(crate) fn as_f32_mut<T: Num>(s: &mut [T]) -> Option<&mut [f32]> {
    // SAFETY: as in `as_f32`.
    (T::DTYPE == crate::DType::F32)
        .then(|| unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<f32>(), s.len()) })
}

/// `[..., m, k] x [..., k, n] -> [..., m, n]`; `la` and `lb` are already broadcast to the
/// output's batch shape `out_batch`.
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
        // Offsets of each batch item in a and b, as (a, b) pairs in a pooled vector (a
        // compiled step allocates nothing here, whatever the batch).
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
        let mat = |off: usize, l: &Layout| MatRef {
            offset: off,
            row_stride: l.strides[r - 2],
            col_stride: l.strides[r - 1],
        };
        let work = m * n * k;
        if nb > 1 && work < GEMM_PARALLEL_WORK && m * n > 0 {
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

/// A contiguous `m x n` operand of [`matmul_plus`]: its buffer and the offset of its first
/// value (a contiguous view of a larger buffer needs no copy).
pub type Contiguous<'a> = (&'a Buffer, usize);

/// `a · b + beta · d` for matrices (`[m, k] x [k, n]`, no batch axes) of one float dtype,
/// `d` a contiguous `m x n` run: see [`gemm_plus_into`].
///
/// ```
/// use spore_kernels::{matmul, Buffer, Layout};
/// let a = Buffer::F32(vec![1.0, 2.0, 3.0, 4.0]);
/// let l = Layout::contiguous(&[2, 2]);
/// let d = Buffer::F32(vec![0.0, 10.0, 20.0, 30.0, 40.0]);
/// // d's values from offset 1.
/// let c = matmul::matmul_plus(&a, &l, &a, &l, (&d, 1), 0.5).unwrap();
/// assert_eq!(c, Buffer::F32(vec![12.0, 20.0, 30.0, 42.0]));
/// ```
pub fn matmul_plus(
    a: &Buffer,
    la: &Layout,
    b: &Buffer,
    lb: &Layout,
    (d, offset): Contiguous<'_>,
    beta: f64,
) -> Result<Buffer, String> {
    if la.rank() != 2 || lb.rank() != 2 || la.shape[1] != lb.shape[0] {
        return Err(format!(
            "MatMulAdd: expected two matrices [m, k] x [k, n], got {:?} x {:?}",
            la.shape, lb.shape
        ));
    }
    let (m, k, n) = (la.shape[0], la.shape[1], lb.shape[1]);
    let cells = m * n;
    if d.len() < offset + cells {
        return Err(format!(
            "MatMulAdd: the addend needs {cells} values from offset {offset}, its buffer has {}",
            d.len()
        ));
    }
    fn go<T: Num>(
        (a, la): (&Buffer, &Layout),
        (b, lb): (&Buffer, &Layout),
        (d, offset): Contiguous<'_>,
        beta: T,
        (m, n, k): (usize, usize, usize),
    ) -> Option<Vec<T>> {
        let (a, b) = (a.as_slice::<T>()?, b.as_slice::<T>()?);
        let values = &d.as_slice::<T>()?[offset..][..m * n];
        let mut out = crate::arena::for_overwrite::<T>(m * n);
        let mat = |l: &Layout| MatRef {
            offset: l.offset,
            row_stride: l.strides[0],
            col_stride: l.strides[1],
        };
        let par = parallelism_for(m * n * k);
        let addend = Addend { values, beta };
        gemm_plus_into(&mut out, addend, m, n, k, a, mat(la), b, mat(lb), par);
        Some(out)
    }
    let sizes = (m, n, k);
    let result = match a.dtype() {
        DType::F32 => go((a, la), (b, lb), (d, offset), beta as f32, sizes).map(Buffer::F32),
        DType::F64 => go((a, la), (b, lb), (d, offset), beta, sizes).map(Buffer::F64),
        _ => None,
    };
    result.ok_or_else(|| {
        format!(
            "MatMulAdd: expected operands of one float dtype, got {}, {} and {}",
            a.dtype(),
            b.dtype(),
            d.dtype()
        )
    })
}
