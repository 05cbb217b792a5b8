//! Matrix products that finish their result before storing it: `+ beta * D` (an
//! optimizer's moment update `m * 0.9 + dW`), `+ bias` per column and ReLU (a Dense
//! layer's `relu(x · Wᵀ + b)`), and a mask that keeps a value only where another matrix
//! is positive (ReLU's gradient `y > 0 ? dy · W : 0`). On Spore's own GEMM the epilogue runs in the tiles, on
//! values still in registers, so the product is written once and never read back; every
//! other path runs it as a pass after the product.
//!
//! ```
//! use spore_kernels::{matmul_epilogue as me, Buffer, Layout};
//! let a = Buffer::F32(vec![1.0, 2.0, 3.0, 4.0]);
//! let l = Layout::contiguous(&[2, 2]);
//! // relu([[1, 2], [3, 4]] · [[1, 2], [3, 4]] + [-10, -20]) = relu([[-3, -10], [5, 2]])
//! let bias = Buffer::F32(vec![-10.0, -20.0]);
//! let e = me::BufferEpilogue { addend: None, bias: Some((&bias, 0)), relu: true, mask: None };
//! let c = me::matmul_with_epilogue(&a, &l, &a, &l, &e).unwrap();
//! assert_eq!(c, Buffer::F32(vec![0.0, 0.0, 5.0, 2.0]));
//! ```
//!
//! Every step rounds as the separate ops do (`beta * D` is a multiply, then an add: no
//! fused multiply-add; ReLU is `x > 0 ? x : 0`; the mask gives `+0` where it is not
//! positive, as `Select(y > 0, v, 0)` does), so results have their bits.

use gemm::Parallelism;

use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::elementwise::Num;
use crate::layout::Layout;
use crate::matmul::{MatRef, check_reach, gemm_with, parallelism_for, threads_of};
pub use crate::operand::Epilogue;

/// `c = epilogue(a · b)` for an `m x n` C (row-major, stride `n`); see the module doc.
///
/// # Panics
/// As [`crate::matmul::gemm_into`], and when the addend or the mask has fewer than `m * n`
/// values or the bias fewer than `n`.
#[allow(clippy::too_many_arguments)]
pub fn gemm_epilogue_into<T: Num>(
    c: &mut [T],
    epilogue: &Epilogue<'_, T>,
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    ma: MatRef,
    b: &[T],
    mb: MatRef,
    par: Parallelism,
) {
    if let Some((d, _)) = epilogue.addend {
        assert!(d.len() >= m * n, "gemm_epilogue_into: addend too small");
    }
    if let Some(bias) = epilogue.bias {
        assert!(bias.len() >= n, "gemm_epilogue_into: bias too small");
    }
    if let Some(mask) = epilogue.mask {
        assert!(mask.len() >= m * n, "gemm_epilogue_into: mask too small");
    }
    gemm_with(c, false, Some(epilogue), m, n, k, (a, ma), (b, mb), par);
}

/// A contiguous operand of [`matmul_with_epilogue`]: its buffer and the offset of its
/// first value (a contiguous view of a larger buffer needs no copy).
pub type Contiguous<'a> = (&'a Buffer, usize);

/// [`Epilogue`] over buffers: the addend (`m x n` values, with its `beta`), the bias (`n`
/// values) and the mask (`m x n` values). The default does nothing.
#[derive(Default)]
pub struct BufferEpilogue<'a> {
    pub addend: Option<(Contiguous<'a>, f64)>,
    pub bias: Option<Contiguous<'a>>,
    pub relu: bool,
    pub mask: Option<Contiguous<'a>>,
}

/// `epilogue(a · b)` for matrices (`[m, k] x [k, n]`, no batch axes) whose operands all
/// have one float dtype: see [`gemm_epilogue_into`].
pub fn matmul_with_epilogue(
    a: &Buffer,
    la: &Layout,
    b: &Buffer,
    lb: &Layout,
    epilogue: &BufferEpilogue<'_>,
) -> Result<Buffer, String> {
    if la.rank() != 2 || lb.rank() != 2 || la.shape[1] != lb.shape[0] {
        return Err(format!(
            "expected two matrices [m, k] x [k, n], got {:?} x {:?}",
            la.shape, lb.shape
        ));
    }
    let (m, k, n) = (la.shape[0], la.shape[1], lb.shape[1]);
    let needs = [
        epilogue.addend.map(|(d, _)| (d, m * n, "addend")),
        epilogue.bias.map(|b| (b, n, "bias")),
        epilogue.mask.map(|y| (y, m * n, "mask")),
    ];
    for ((buffer, offset), len, what) in needs.into_iter().flatten() {
        if buffer.len() < offset + len {
            return Err(format!(
                "the {what} needs {len} values from offset {offset}, its buffer has {}",
                buffer.len()
            ));
        }
    }
    let sizes = (m, n, k);
    let result = match a.dtype() {
        DType::F32 => run::<f32>((a, la), (b, lb), epilogue, sizes).map(Buffer::F32),
        DType::F64 => run::<f64>((a, la), (b, lb), epilogue, sizes).map(Buffer::F64),
        _ => None,
    };
    result.ok_or_else(|| {
        let dtypes: Vec<String> = [Some(a), Some(b)]
            .into_iter()
            .chain([
                epilogue.addend.map(|d| d.0.0),
                epilogue.bias.map(|b| b.0),
                epilogue.mask.map(|y| y.0),
            ])
            .flatten()
            .map(|b| b.dtype().to_string())
            .collect();
        format!(
            "expected operands of one float dtype, got {}",
            dtypes.join(", ")
        )
    })
}

/// [`matmul_with_epilogue`] in `T` (`None` when an operand is of another dtype).
fn run<'a, T: Num>(
    (a, la): (&Buffer, &Layout),
    (b, lb): (&Buffer, &Layout),
    epilogue: &BufferEpilogue<'a>,
    (m, n, k): (usize, usize, usize),
) -> Option<Vec<T>> {
    let run_of = |(buf, offset): Contiguous<'a>, len: usize| -> Option<&'a [T]> {
        Some(&buf.as_slice::<T>()?[offset..][..len])
    };
    let addend = match epilogue.addend {
        Some((d, beta)) => Some((run_of(d, m * n)?, T::from_f64(beta))),
        None => None,
    };
    let bias = match epilogue.bias {
        Some(b) => Some(run_of(b, n)?),
        None => None,
    };
    let mask = match epilogue.mask {
        Some(y) => Some(run_of(y, m * n)?),
        None => None,
    };
    let typed = Epilogue {
        addend,
        bias,
        relu: epilogue.relu,
        mask,
    };
    let (a, b) = (a.as_slice::<T>()?, b.as_slice::<T>()?);
    let mut out = crate::arena::for_overwrite::<T>(m * n);
    let mat = |l: &Layout| MatRef::of_last_two(l, l.offset);
    let par = parallelism_for(m * n * k);
    gemm_epilogue_into(&mut out, &typed, m, n, k, a, mat(la), b, mat(lb), par);
    Some(out)
}

/// True when [`matmul_add_in_place`] computes `C = A · B + beta · C` for these operands
/// without a copy of C: f32 on Spore's own GEMM, whose tiles then read each part of C
/// just before storing it (see `sgemm::adds_in_place`). Anything else works too, through
/// a copy, which gains nothing over a separate result.
pub fn adds_in_place(dtype: DType, la: &Layout, lb: &Layout) -> bool {
    let matrices = la.rank() == 2 && lb.rank() == 2 && la.shape[1] == lb.shape[0];
    matrices
        && dtype == DType::F32
        && la.shape[0] > 0
        && lb.shape[1] > 0
        && crate::sgemm::adds_in_place(
            la.shape[0],
            la.shape[1],
            MatRef::of_last_two(la, la.offset),
            MatRef::of_last_two(lb, lb.offset),
        )
}

/// `c = a · b + beta · c` for matrices `[m, k] x [k, n]`, with `c` holding the `m x n`
/// addend on entry: an optimizer's moment update written over the moment. The result has
/// the bits of [`matmul_with_epilogue`] with that addend (`beta · D` rounded, then added).
///
/// ```
/// use spore_kernels::{matmul_epilogue as me, Buffer, Layout};
/// let a = Buffer::F32(vec![1.0, 2.0, 3.0, 4.0]);
/// let l = Layout::contiguous(&[2, 2]);
/// let mut m = Buffer::F32(vec![10.0, 20.0, 30.0, 40.0]);
/// me::matmul_add_in_place(&mut m, &a, &l, &a, &l, 0.5).unwrap();
/// assert_eq!(m, Buffer::F32(vec![12.0, 20.0, 30.0, 42.0]));
/// ```
pub fn matmul_add_in_place(
    c: &mut Buffer,
    a: &Buffer,
    la: &Layout,
    b: &Buffer,
    lb: &Layout,
    beta: f64,
) -> Result<(), String> {
    if la.rank() != 2 || lb.rank() != 2 || la.shape[1] != lb.shape[0] {
        return Err(format!(
            "expected two matrices [m, k] x [k, n], got {:?} x {:?}",
            la.shape, lb.shape
        ));
    }
    let (m, k, n) = (la.shape[0], la.shape[1], lb.shape[1]);
    if c.len() != m * n {
        return Err(format!(
            "the addend must hold the product's {m} x {n} values, it has {}",
            c.len()
        ));
    }
    if a.dtype() != c.dtype() || b.dtype() != c.dtype() {
        return Err(format!(
            "expected operands of one float dtype, got {}, {} and an addend of {}",
            a.dtype(),
            b.dtype(),
            c.dtype()
        ));
    }
    let mat = |l: &Layout| MatRef::of_last_two(l, l.offset);
    let par = parallelism_for(m * n * k);
    if adds_in_place(c.dtype(), la, lb)
        && let (Buffer::F32(c), Buffer::F32(a), Buffer::F32(b)) = (&mut *c, a, b)
    {
        let (ma, mb) = (mat(la), mat(lb));
        check_reach(ma, m, k, a.len());
        check_reach(mb, k, n, b.len());
        let threads = threads_of(par);
        crate::sgemm::sgemm_add_in_place(c, beta as f32, m, n, k, (a, ma), (b, mb), threads);
        return Ok(());
    }
    // Elsewhere D is read after C is written: keep a copy of it.
    let d = c.clone();
    let e = BufferEpilogue {
        addend: Some(((&d, 0), beta)),
        ..Default::default()
    };
    *c = matmul_with_epilogue(a, la, b, lb, &e)?;
    Ok(())
}
