//! `Select` (`cond ? a : b` elementwise over broadcast views), with a vector loop for each
//! combination of contiguous and single-value operands: ReLU's gradient selects between a
//! tensor and a scalar zero.
//!
//! ```
//! use spore_kernels::{elementwise, Buffer, Layout};
//! let cond = Buffer::Bool(vec![true, false]);
//! let a = Buffer::F32(vec![1.0, 2.0]);
//! let zero = Buffer::F32(vec![0.0]);
//! let l = Layout::contiguous(&[2]);
//! let lz = Layout::contiguous(&[1]).broadcast_to(&[2]);
//! let out = elementwise::select(&cond, &l, &a, &l, &zero, &lz, &[2]).unwrap();
//! assert_eq!(out, Buffer::F32(vec![1.0, 0.0]));
//! ```

use crate::buffer::{Buffer, Element};
use crate::elementwise::mismatch;
use crate::layout::{Layout, fill_rows};

/// `cond ? a : b` elementwise; all three views are broadcast to `shape`.
pub fn select(
    cond: &Buffer,
    lc: &Layout,
    a: &Buffer,
    la: &Layout,
    b: &Buffer,
    lb: &Layout,
    shape: &[usize],
) -> Result<Buffer, String> {
    let Buffer::Bool(c) = cond else {
        return Err(format!(
            "Select: condition must be Bool, got {}",
            cond.dtype()
        ));
    };
    fn go<T: Element>(
        c: &[bool],
        lc: &Layout,
        a: &[T],
        la: &Layout,
        b: &[T],
        lb: &Layout,
        shape: &[usize],
    ) -> Vec<T> {
        let n: usize = shape.iter().product();
        let mut out = crate::arena::for_overwrite::<T>(n);
        // Fast path: every operand contiguous over the whole shape or a single broadcast
        // value (relu's gradient selects between a tensor and a scalar zero).
        let flat = |l: &Layout| -> Option<(usize, bool)> {
            if l.is_contiguous() {
                Some((l.offset, true))
            } else if l.strides.iter().all(|&s| s == 0) {
                Some((l.offset, false))
            } else {
                None
            }
        };
        if let (Some((oc, vc)), Some((oa, va)), Some((ob, vb))) = (flat(lc), flat(la), flat(lb)) {
            // Stride 1 or 0 per operand, each combination its own loop (a multiplied stride
            // keeps the compiler from vectorising it).
            let stretch: Stretch<T> = match (vc, va, vb) {
                (true, true, true) => select_stretch::<T, true, true, true>,
                (true, true, false) => select_stretch::<T, true, true, false>,
                (true, false, true) => select_stretch::<T, true, false, true>,
                (true, false, false) => select_stretch::<T, true, false, false>,
                (false, true, true) => select_stretch::<T, false, true, true>,
                (false, true, false) => select_stretch::<T, false, true, false>,
                (false, false, true) => select_stretch::<T, false, false, true>,
                (false, false, false) => select_stretch::<T, false, false, false>,
            };
            let (sc, sa, sb) = (vc as usize, va as usize, vb as usize);
            let fill = |start: usize, dst: &mut [T]| {
                if dst.is_empty() {
                    return;
                }
                let (c, a, b) = (
                    &c[oc + start * sc..],
                    &a[oa + start * sa..],
                    &b[ob + start * sb..],
                );
                stretch(c, a, b, dst);
            };
            if n >= crate::layout::PARALLEL_THRESHOLD {
                use rayon::prelude::*;
                let chunk = n.div_ceil(rayon::current_num_threads().max(1) * 4);
                out.par_chunks_mut(chunk)
                    .enumerate()
                    .for_each(|(j, dst)| fill(j * chunk, dst));
            } else {
                fill(0, &mut out);
            }
            return out;
        }
        fill_rows(
            &mut out,
            shape,
            [&lc.strides, &la.strides, &lb.strides],
            [lc.offset, la.offset, lb.offset],
            |r, o| {
                for (i, o) in o.iter_mut().enumerate() {
                    let i = i as isize;
                    let [pc, pa, pb] = r.starts;
                    let [dc, da, db] = r.steps;
                    *o = if c[(pc + i * dc) as usize] {
                        a[(pa + i * da) as usize]
                    } else {
                        b[(pb + i * db) as usize]
                    };
                }
            },
        );
        out
    }
    Ok(match (a, b) {
        (Buffer::F32(a), Buffer::F32(b)) => Buffer::F32(go(c, lc, a, la, b, lb, shape)),
        (Buffer::F64(a), Buffer::F64(b)) => Buffer::F64(go(c, lc, a, la, b, lb, shape)),
        (Buffer::F16(a), Buffer::F16(b)) => Buffer::F16(go(c, lc, a, la, b, lb, shape)),
        (Buffer::BF16(a), Buffer::BF16(b)) => Buffer::BF16(go(c, lc, a, la, b, lb, shape)),
        (Buffer::I32(a), Buffer::I32(b)) => Buffer::I32(go(c, lc, a, la, b, lb, shape)),
        (Buffer::I64(a), Buffer::I64(b)) => Buffer::I64(go(c, lc, a, la, b, lb, shape)),
        (Buffer::U8(a), Buffer::U8(b)) => Buffer::U8(go(c, lc, a, la, b, lb, shape)),
        (Buffer::Bool(a), Buffer::Bool(b)) => Buffer::Bool(go(c, lc, a, la, b, lb, shape)),
        _ => return Err(mismatch("Select", a.dtype(), b.dtype())),
    })
}

/// A stretch of a Select from operands positioned at its start.
type Stretch<T> = fn(&[bool], &[T], &[T], &mut [T]);

/// One stretch of a Select whose operands each step by one (`C`, `A`, `B` true) or stay on
/// one value (false): constants, so each combination compiles to a vector loop.
#[inline(always)]
fn select_stretch<T: Element, const C: bool, const A: bool, const B: bool>(
    c: &[bool],
    a: &[T],
    b: &[T],
    dst: &mut [T],
) {
    let n = dst.len();
    if n == 0 {
        return;
    }
    let (c, a, b) = (
        &c[..if C { n } else { 1 }],
        &a[..if A { n } else { 1 }],
        &b[..if B { n } else { 1 }],
    );
    // Both values loaded and chosen without a branch, so the loop vectorises.
    for (k, o) in dst.iter_mut().enumerate() {
        let keep = c[if C { k } else { 0 }];
        let (yes, no) = (a[if A { k } else { 0 }], b[if B { k } else { 0 }]);
        *o = std::hint::select_unpredictable(keep, yes, no);
    }
}
