//! `FusedElementwise`: a chain of elementwise ops compiled into one loop over memory.
//!
//! The graph compiler's fusion pass builds a [`FusedProgram`]: registers `0..num_inputs`
//! hold the (broadcast) inputs, instruction `k` writes register `num_inputs + k`, and the
//! last register is the result. Evaluation runs the instructions chunk by chunk (512
//! elements), so intermediates live in L1 cache instead of full-size temporaries.
//! Comparison results are kept as 0/1 in the compute dtype.
//!
//! ```
//! use spore_core::prims::fused::{FusedInstr, FusedProgram};
//! use spore_core::op::Op;
//! use spore_core::{apply::apply, DType, Tensor};
//! use spore_kernels::{BinaryFn, UnaryFn};
//! // relu(a * b + a)
//! let p = FusedProgram {
//!     num_inputs: 2,
//!     instrs: vec![FusedInstr::Binary(BinaryFn::Mul, 0, 1), FusedInstr::Binary(BinaryFn::Add, 2, 0), FusedInstr::Unary(UnaryFn::Relu, 3)],
//!     compute: DType::F32,
//!     out_dtype: DType::F32,
//! };
//! let a = Tensor::from_vec(vec![1.0f32, -2.0], &[2]).unwrap();
//! let b = Tensor::from_vec(vec![3.0f32], &[1]).unwrap();
//! let y = apply(Op::Fused(p), &[&a, &b], std::panic::Location::caller()).unwrap();
//! assert_eq!(y.to_vec::<f32>().unwrap(), vec![4.0, 0.0]);
//! ```

use std::borrow::Cow;

use rayon::prelude::*;
use smallvec::SmallVec;
use spore_kernels::arena;

use spore_kernels::elementwise::{
    binary_slice, binary_slice_over, mul_add_slice, mul_add_slice_over_addend, unary_slice,
};
use spore_kernels::{BinaryFn, Buffer, CompareFn, DType, Dims, Layout, Num, Strides, bf16, f16};

use super::broadcast_shapes;
use super::in_place::EvalContext;
use crate::error::Result;
use crate::op::Op;
pub use crate::op::program::{FusedInstr, FusedProgram};
use crate::tensor::{Storage, Tensor, TensorType};

/// Elements a program evaluates at a time (its registers are chunks of this length).
pub(crate) const CHUNK: usize = 512;

/// The `n` elements of a result split for the threads: (blocks, elements per block, a
/// multiple of [`CHUNK`]). One block below nine chunks: a fork costs more than it saves.
pub(crate) fn thread_blocks(n: usize) -> (usize, usize) {
    let chunks = n.div_ceil(CHUNK);
    let blocks = if chunks > 8 {
        rayon::current_num_threads().clamp(1, chunks)
    } else {
        1
    };
    (blocks, chunks.div_ceil(blocks).max(1) * CHUNK)
}

/// `block` on each block of `per_block` result values with its `regs_len` registers
/// (block index, its values, its registers), on several threads when there are several
/// blocks.
fn over_blocks<D: Send, R: Send>(
    out: &mut [D],
    regs: &mut [R],
    (per_block, regs_len): (usize, usize),
    block: impl Fn((usize, (&mut [D], &mut [R]))) + Sync + Send,
) {
    if out.len() > per_block {
        out.par_chunks_mut(per_block)
            .zip(regs.par_chunks_mut(regs_len))
            .enumerate()
            .for_each(block);
    } else if !out.is_empty() {
        block((0, (out, regs)));
    }
}

/// A program's inputs prepared for evaluation over flat ranges of its result: values in
/// the compute dtype (inputs already in it are borrowed, Bool conditions converted to
/// 0/1 in a pooled vector), layouts broadcast to the result's shape, and which inputs are
/// read in place. Inline vectors: a compiled step allocates nothing here.
pub(crate) struct Operands<'a, T: Clone> {
    loaded: SmallVec<[(Cow<'a, [T]>, Layout); 8]>,
    in_place: SmallVec<[bool; 8]>,
    /// Inputs of one value broadcast over the whole result, held as one chunk of copies
    /// and read in place for every chunk. Why: filling a register with the same value
    /// for every chunk was a pass of its own (Momentum's factors, ReLU's zero).
    repeated: SmallVec<[bool; 8]>,
    /// The input whose buffer the result is written into, if any (see [`super::in_place`]).
    lent_input: Option<usize>,
    /// Set by the program when only its last instruction reads the lent input, which it
    /// then reads from the result's chunk itself (see [`FusedProgram::reads_lent_at_end`]).
    lent_read_at_end: Option<LastRead>,
    /// The 16-bit type every instruction's result is rounded to, for a program over
    /// float16 or bfloat16 values (see [`FusedProgram::eval`]).
    pub(crate) round_to: Option<DType>,
    /// The 16-bit inputs, read from their buffers and widened chunk by chunk (their entry
    /// in `loaded` is then empty). Why: widening whole inputs first took full-size float32
    /// copies of them, more memory than the unfused ops needed.
    halves: SmallVec<[Option<&'a Buffer>; 8]>,
}

/// How a program's last instruction reads the lent input, the only one to read it: the
/// input's chunk is then still in the result's chunk, and is read there, not copied into
/// a register first. Why: for an optimizer's `w - lr * m` written over `w`, the copy was
/// a visible share of the MLP training step, which ran faster without it (measured:
/// BENCHMARKS.md, "Figures moved from code comments").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LastRead {
    /// `MulAdd`'s addend `c`.
    Addend,
    /// A `Binary`'s left (`true`) or right operand.
    Binary { lhs: bool },
}

impl<'a, T: Num> Operands<'a, T> {
    pub(crate) fn load(inputs: &[&'a Tensor], shape: &[usize], lent_input: Option<usize>) -> Self {
        let mut halves: SmallVec<[Option<&'a Buffer>; 8]> = SmallVec::new();
        let mut loaded: SmallVec<[(Cow<'a, [T]>, Layout); 8]> = inputs
            .iter()
            .map(|t| {
                let s = t.buf();
                let half = matches!(*s.buffer, Buffer::F16(_) | Buffer::BF16(_));
                halves.push(half.then_some(&*s.buffer));
                let values = match (T::slice_of(&s.buffer), &*s.buffer) {
                    (Some(v), _) => Cow::Borrowed(v),
                    // Read and widened chunk by chunk (see `gather_range`).
                    (None, _) if half => Cow::Owned(vec![]),
                    (None, Buffer::Bool(flags)) => Cow::Owned(arena::collect_exact(
                        flags.len(),
                        flags.iter().map(|&f| if f { T::one() } else { T::zero() }),
                    )),
                    (None, other) => {
                        Cow::Owned(other.to_f64_vec().into_iter().map(T::from_f64).collect())
                    }
                };
                (values, coalesce(&s.layout.broadcast_to(shape)))
            })
            .collect();
        let numel: usize = shape.iter().product();
        let mut repeated = SmallVec::new();
        for (r, (values, layout)) in loaded.iter_mut().enumerate() {
            // A result of one chunk fills the register once anyway.
            let one_value = numel > CHUNK && layout.strides.iter().all(|&s| s == 0);
            if one_value {
                let value = match halves[r].take() {
                    Some(half) => {
                        let mut one = [T::zero()];
                        let at = Layout {
                            offset: layout.offset,
                            ..Layout::contiguous(&[1])
                        };
                        gather_half(half, &at, 0, &mut one);
                        one[0]
                    }
                    None => values[layout.offset],
                };
                let copies = arena::collect_exact(CHUNK, std::iter::repeat_n(value, CHUNK));
                if let Cow::Owned(v) = std::mem::replace(values, Cow::Owned(copies)) {
                    arena::recycle(T::into_buffer(v));
                }
                *layout = Layout::contiguous(&[CHUNK]);
            }
            repeated.push(one_value);
        }
        let in_place = loaded
            .iter()
            .enumerate()
            .map(|(r, (_, l))| l.is_contiguous() && Some(r) != lent_input && halves[r].is_none())
            .collect();
        Operands {
            loaded,
            in_place,
            repeated,
            lent_input,
            lent_read_at_end: None,
            round_to: None,
            halves,
        }
    }

    /// Gives converted inputs' vectors back to the pool.
    pub(crate) fn recycle(self) {
        for (values, _) in self.loaded {
            if let Cow::Owned(v) = values {
                arena::recycle(T::into_buffer(v));
            }
        }
    }
}

impl FusedProgram {
    pub(crate) fn infer(&self, inputs: &[&TensorType]) -> Result<TensorType, String> {
        if inputs.len() != self.num_inputs {
            return Err(format!(
                "expected {} inputs, got {}",
                self.num_inputs,
                inputs.len()
            ));
        }
        // A float32 program may round its result to 16 bits as it stores it (a narrowing
        // cast fused into its loop, see the compiler's `narrowing_casts` stage).
        let narrowed = self.out_dtype.is_half() && self.compute == DType::F32;
        if !self.compute.is_float()
            || (self.out_dtype != self.compute && self.out_dtype != DType::Bool && !narrowed)
        {
            return Err(format!(
                "unsupported dtypes: compute {}, output {}",
                self.compute, self.out_dtype
            ));
        }
        let mut shape = Dims::new();
        for t in inputs {
            // A float32 program may read 16-bit inputs: it widens them (exactly) as it loads
            // them (see the compiler's `widening_casts` stage).
            let widened = t.dtype.is_half() && self.compute == DType::F32;
            if t.dtype != self.compute && t.dtype != DType::Bool && !widened {
                return Err(format!(
                    "input of dtype {} in a {} program",
                    t.dtype, self.compute
                ));
            }
            shape = broadcast_shapes(&shape, &t.shape)?;
        }
        for (k, ins) in self.instrs.iter().enumerate() {
            let limit = self.num_inputs + k;
            if ins.operands().iter().any(|&r| r >= limit) {
                return Err(format!("instruction {k} reads a register not yet written"));
            }
        }
        // No instructions: the result is the one input (a sum of a widened 16-bit value,
        // see the compiler's `widening_casts` stage).
        if self.instrs.is_empty() && self.num_inputs != 1 {
            return Err("a program without instructions takes exactly one input".into());
        }
        Ok(TensorType {
            shape,
            dtype: self.out_dtype,
        })
    }

    pub(crate) fn eval(
        &self,
        inputs: &[&Tensor],
        out: &TensorType,
        ctx: &mut EvalContext,
    ) -> Result<Storage, String> {
        if let Some(resolved) = self.with_flags_resolved(inputs) {
            return resolved.eval(inputs, out, ctx);
        }
        // A 16-bit result is never written over an input (see `in_place`); a buffer lent
        // anyway stays with the context, for the executor to take back.
        let lent = if self.out_dtype.is_half() {
            None
        } else {
            ctx.take_lent()
        };
        let buf = match (self.compute, self.out_dtype) {
            // Registers in float32; a 16-bit program rounds each instruction's result to
            // 16 bits (the values the ops give run one by one, in PyNative mode), and a
            // 16-bit result is rounded chunk by chunk as it is stored. (A signalling NaN
            // passed through, by a Select, comes back quiet.)
            (DType::F32 | DType::BF16, DType::BF16) => {
                self.run_narrowed(inputs, &out.shape, |wide, out: &mut [bf16]| {
                    spore_kernels::half_float::round_to_bf16(wide, out)
                })?
            }
            (DType::F32 | DType::F16, DType::F16) => {
                self.run_narrowed(inputs, &out.shape, |wide, out: &mut [f16]| {
                    spore_kernels::half_float::round_to_f16(wide, out)
                })?
            }
            (DType::F32, DType::F32 | DType::Bool) | (DType::F16 | DType::BF16, DType::Bool) => {
                self.run::<f32>(inputs, &out.shape, lent)?
            }
            (DType::F64, DType::F64 | DType::Bool) => self.run::<f64>(inputs, &out.shape, lent)?,
            (d, o) => return Err(format!("unsupported dtypes: compute {d}, output {o}")),
        };
        Ok(Storage::contiguous(buf, &out.shape))
    }

    /// `lent`: (input position, its buffer), lent by the executor: the result is written
    /// into it, and that input is read from it chunk by chunk just before the chunk is
    /// overwritten.
    fn run<T: Num>(
        &self,
        inputs: &[&Tensor],
        shape: &[usize],
        lent: Option<(usize, Buffer)>,
    ) -> Result<Buffer, String> {
        let n: usize = shape.iter().product();
        let (lent_input, lent_out) = match lent {
            Some((r, b)) => match T::vec_of(b) {
                Some(v) if v.len() == n => (Some(r), Some(v)),
                _ => return Err("internal: a lent buffer does not fit the result".into()),
            },
            None => (None, None),
        };
        let mut operands = Operands::<T>::load(inputs, shape, lent_input);
        operands.lent_read_at_end = lent_input.and_then(|r| self.reads_lent_at_end(r));
        operands.round_to = self.compute.is_half().then_some(self.compute);
        let mut out = lent_out.unwrap_or_else(|| arena::for_overwrite::<T>(n));
        let n_regs = self.registers();
        // Registers: one set per block of chunks, taken on this thread before forking so a
        // graph's buffer pool serves them (see `spore_kernels::arena`).
        let (blocks, per_block) = thread_blocks(n);
        let mut regs = arena::for_overwrite::<T>(blocks * n_regs * CHUNK);
        let run_block = |(b, (dst, regs)): (usize, (&mut [T], &mut [T]))| {
            let mut regs: SmallVec<[&mut [T]; 32]> = regs.chunks_mut(CHUNK).collect();
            for (c, dst) in dst.chunks_mut(CHUNK).enumerate() {
                self.eval_chunk(&operands, &mut regs, b * per_block + c * CHUNK, dst);
            }
        };
        over_blocks(&mut out, &mut regs, (per_block, n_regs * CHUNK), run_block);
        arena::recycle(T::into_buffer(regs));
        operands.recycle();
        if self.out_dtype == DType::Bool {
            let flags = spore_kernels::arena::collect_exact(n, out.iter().map(|&v| v != T::zero()));
            spore_kernels::arena::recycle(T::into_buffer(out));
            Ok(Buffer::Bool(flags))
        } else {
            Ok(T::into_buffer(out))
        }
    }

    /// [`Self::run`] in float32 for a 16-bit result `H`: each chunk is computed into a
    /// float32 register and `narrow` rounds it into the result. Why: computed whole in
    /// float32 and then rounded, the result was written twice and read once more, and a
    /// mixed-precision step has such a loop beside every BatchNorm and activation.
    fn run_narrowed<H: Num>(
        &self,
        inputs: &[&Tensor],
        shape: &[usize],
        narrow: impl Fn(&[f32], &mut [H]) + Sync,
    ) -> Result<Buffer, String> {
        let n: usize = shape.iter().product();
        let mut operands = Operands::<f32>::load(inputs, shape, None);
        operands.round_to = self.compute.is_half().then_some(self.compute);
        let mut out = arena::for_overwrite::<H>(n);
        // The program's registers, then the chunk of float32 results.
        let n_regs = self.registers() + 1;
        let (blocks, per_block) = thread_blocks(n);
        let mut regs = arena::for_overwrite::<f32>(blocks * n_regs * CHUNK);
        let run_block = |(b, (dst, regs)): (usize, (&mut [H], &mut [f32]))| {
            let (regs, wide) = regs.split_at_mut((n_regs - 1) * CHUNK);
            let mut regs: SmallVec<[&mut [f32]; 32]> = regs.chunks_mut(CHUNK).collect();
            for (c, dst) in dst.chunks_mut(CHUNK).enumerate() {
                let wide = &mut wide[..dst.len()];
                self.eval_chunk(&operands, &mut regs, b * per_block + c * CHUNK, wide);
                narrow(wide, dst);
            }
        };
        over_blocks(&mut out, &mut regs, (per_block, n_regs * CHUNK), run_block);
        arena::recycle(Buffer::F32(regs));
        operands.recycle();
        Ok(H::into_buffer(out))
    }

    /// How the last instruction reads input `r` when it is the only one to read it, once,
    /// and in a form that has a kernel reading it from the result (see [`LastRead`]).
    fn reads_lent_at_end(&self, r: usize) -> Option<LastRead> {
        let (last, before) = self.instrs.split_last()?;
        if before.iter().any(|i| i.operands().contains(&r)) {
            return None;
        }
        match *last {
            FusedInstr::MulAdd { a, b, c, .. } if c == r && a != r && b != r => {
                Some(LastRead::Addend)
            }
            FusedInstr::Binary(_, a, b) if (a == r) != (b == r) => {
                Some(LastRead::Binary { lhs: a == r })
            }
            _ => None,
        }
    }

    /// Registers the program uses: its inputs, then one per instruction.
    pub(crate) fn registers(&self) -> usize {
        self.num_inputs + self.instrs.len()
    }

    /// Evaluates result elements `start..start + dst.len()` (at most [`CHUNK`]) into
    /// `dst`; `regs` holds [`Self::registers`] scratch chunks. Contiguous inputs are read
    /// in place; only strided or broadcast ones are gathered into their registers. The
    /// last instruction writes straight into `dst`.
    pub(crate) fn eval_chunk<T: Num>(
        &self,
        operands: &Operands<'_, T>,
        regs: &mut [&mut [T]],
        start: usize,
        dst: &mut [T],
    ) {
        let len = dst.len();
        for (r, (vals, layout)) in operands.loaded.iter().enumerate() {
            if Some(r) == operands.lent_input {
                // The lent input's values for this chunk are still in `dst`: the last
                // instruction reads them there, or a register takes a copy.
                if operands.lent_read_at_end.is_none() {
                    regs[r][..len].copy_from_slice(dst);
                }
            } else if let Some(half) = operands.halves[r] {
                gather_half(half, layout, start, &mut regs[r][..len]);
            } else if !operands.in_place[r] {
                gather_range(vals, layout, start, &mut regs[r][..len], |v| v);
            }
        }
        let Some(last) = self.instrs.len().checked_sub(1) else {
            let (vals, layout) = &operands.loaded[0];
            let input: &[T] = match (operands.repeated[0], operands.in_place[0]) {
                (true, _) => &vals[..len],
                (_, true) => &vals[layout.offset + start..][..len],
                _ => &regs[0][..len],
            };
            if Some(0) != operands.lent_input {
                dst.copy_from_slice(input);
            }
            return;
        };
        for (k, ins) in self.instrs.iter().enumerate() {
            let (before, after) = regs.split_at_mut(self.num_inputs + k);
            let src = |r: usize| -> &[T] {
                if r < self.num_inputs && operands.repeated[r] {
                    &operands.loaded[r].0[..len]
                } else if r < self.num_inputs && operands.in_place[r] {
                    let (vals, layout) = &operands.loaded[r];
                    &vals[layout.offset + start..][..len]
                } else {
                    &before[r][..len]
                }
            };
            let d: &mut [T] = if k == last {
                &mut dst[..]
            } else {
                &mut after[0][..len]
            };
            match (operands.lent_read_at_end.filter(|_| k == last), ins) {
                (Some(LastRead::Addend), &FusedInstr::MulAdd { a, b, subtract, .. }) => {
                    mul_add_slice_over_addend(src(a), src(b), subtract, d);
                    continue;
                }
                (Some(LastRead::Binary { lhs }), &FusedInstr::Binary(f, a, b)) => {
                    binary_slice_over(f, src(if lhs { b } else { a }), lhs, d);
                    continue;
                }
                _ => {}
            }
            if let Some(half) = operands.round_to {
                eval_rounded(ins, half, &src, d);
                continue;
            }
            match *ins {
                FusedInstr::Unary(f, a) => unary_slice(f, src(a), d),
                FusedInstr::Binary(f, a, b) => binary_slice(f, src(a), src(b), d),
                FusedInstr::Compare(f, a, b) => compare_slice(f, src(a), src(b), d),
                FusedInstr::Select(cnd, a, b) => select_slice(src(cnd), src(a), src(b), d),
                FusedInstr::MulAdd { a, b, c, subtract } => {
                    mul_add_slice(src(a), src(b), src(c), subtract, d)
                }
            }
        }
    }
}

/// One instruction of a program over 16-bit values, its registers holding float32 copies
/// of 16-bit values: computed in float32 (as a 16-bit op computes each element), then
/// rounded to `half`. Comparisons (0 or 1) and selections (one of two 16-bit values) need
/// no rounding; a multiply-add rounds its product first, as a `Mul` then an `Add` do.
fn eval_rounded<'s, T: Num + 's>(
    ins: &FusedInstr,
    half: DType,
    src: &impl Fn(usize) -> &'s [T],
    d: &mut [T],
) {
    let round = |d: &mut [T]| spore_kernels::half_float::round_in_place(half, d);
    match *ins {
        FusedInstr::Unary(f, a) => {
            unary_slice(f, src(a), d);
            round(d);
        }
        FusedInstr::Binary(f, a, b) => {
            binary_slice(f, src(a), src(b), d);
            round(d);
        }
        FusedInstr::Compare(f, a, b) => compare_slice(f, src(a), src(b), d),
        FusedInstr::Select(cnd, a, b) => select_slice(src(cnd), src(a), src(b), d),
        FusedInstr::MulAdd { a, b, c, subtract } => {
            binary_slice(BinaryFn::Mul, src(a), src(b), d);
            round(d);
            for (d, &c) in d.iter_mut().zip(src(c)) {
                *d = match subtract {
                    true => c.binary(BinaryFn::Sub, *d),
                    false => d.binary(BinaryFn::Add, c),
                };
            }
            round(d);
        }
    }
}

/// `FusedElementwise` and `FusedReduceSum`'s shape rule.
pub(crate) fn infer(op: &Op, inputs: &[&TensorType]) -> std::result::Result<TensorType, String> {
    match op {
        Op::Fused(p) => p.infer(inputs),
        Op::FusedReduceSum {
            program,
            axes,
            keep_dims,
        } => program.infer_sum(inputs, axes, *keep_dims),
        _ => Err(super::not_in_family(op, "fused")),
    }
}

pub(crate) fn eval(
    op: &Op,
    inputs: &[&Tensor],
    out: &TensorType,
    ctx: &mut EvalContext,
) -> std::result::Result<Storage, String> {
    match op {
        Op::Fused(p) => p.eval(inputs, out, ctx),
        Op::FusedReduceSum { program, axes, .. } => program.eval_sum(inputs, axes, out),
        _ => Err(super::not_in_family(op, "fused")),
    }
}

/// `d[i] = f(a[i], b[i]) ? 1 : 0`, monomorphised per comparison so each loop vectorises
/// (a runtime `match` inside the loop would keep it scalar).
fn compare_slice<T: Num>(f: CompareFn, a: &[T], b: &[T], d: &mut [T]) {
    fn each<T: Num>(a: &[T], b: &[T], d: &mut [T], test: impl Fn(T, T) -> bool) {
        for ((d, &x), &y) in d.iter_mut().zip(a).zip(b) {
            *d = if test(x, y) { T::one() } else { T::zero() };
        }
    }
    match f {
        CompareFn::Equal => each(a, b, d, |x, y| x == y),
        CompareFn::NotEqual => each(a, b, d, |x, y| x != y),
        CompareFn::Less => each(a, b, d, |x, y| x < y),
        CompareFn::LessEqual => each(a, b, d, |x, y| x <= y),
        CompareFn::Greater => each(a, b, d, |x, y| x > y),
        CompareFn::GreaterEqual => each(a, b, d, |x, y| x >= y),
    }
}

/// `d[i] = cond[i] != 0 ? a[i] : b[i]`, written as a branch-free zip so it vectorises.
fn select_slice<T: Num>(cond: &[T], a: &[T], b: &[T], d: &mut [T]) {
    for (((d, &c), &x), &y) in d.iter_mut().zip(cond).zip(a).zip(b) {
        *d = if c != T::zero() { x } else { y };
    }
}

/// The same view with adjacent axes merged wherever one stride walks both (a broadcast
/// run of zeros, or a contiguous run) and size-1 axes dropped, so that rows are as long
/// as possible: a per-channel scale over [N, C, H, W] becomes rows of H*W equal values.
fn coalesce(layout: &Layout) -> Layout {
    let mut shape = Dims::new();
    let mut strides = Strides::new();
    for (&n, &st) in layout.shape.iter().zip(&layout.strides) {
        if n == 1 {
            continue;
        }
        match (shape.last_mut(), strides.last()) {
            (Some(prev_n), Some(&prev_st)) if prev_st == st * n as isize => {
                *prev_n *= n;
                // `strides` grows with `shape`, and this arm matched a last element of it.
                #[allow(clippy::expect_used)]
                let last = strides.last_mut().expect("same length as shape");
                *last = st;
            }
            _ => {
                shape.push(n);
                strides.push(st);
            }
        }
    }
    if shape.is_empty() || layout.shape.contains(&0) {
        // A single element (or none): one axis, so the walk below has a row to read.
        return Layout {
            shape: Dims::from_slice(&[layout.numel()]),
            strides: Strides::from_slice(&[1]),
            offset: layout.offset,
        };
    }
    Layout {
        shape,
        strides,
        offset: layout.offset,
    }
}

/// [`gather_range`] from a 16-bit buffer, each value widened (exactly) to `T`.
fn gather_half<T: Num>(half: &Buffer, layout: &Layout, start: usize, dst: &mut [T]) {
    if layout.is_contiguous() {
        spore_kernels::half_float::widen_run(half, layout.offset + start, dst);
        return;
    }
    match half {
        Buffer::BF16(v) => gather_range(v, layout, start, dst, |x| {
            T::from_f64(f64::from(spore_kernels::half_float::bf16_to_f32(x)))
        }),
        Buffer::F16(v) => gather_range(v, layout, start, dst, |x| {
            T::from_f64(f64::from(x.to_f32()))
        }),
        _ => {}
    }
}

/// Writes elements `start..start + dst.len()` (row-major over the layout's shape) of a
/// strided view into `dst`, each converted by `conv`.
fn gather_range<S: Copy, T: Copy>(
    vals: &[S],
    layout: &Layout,
    start: usize,
    dst: &mut [T],
    conv: impl Fn(S) -> T,
) {
    if layout.is_contiguous() {
        let (o, len) = (layout.offset + start, dst.len());
        for (d, &v) in dst.iter_mut().zip(&vals[o..o + len]) {
            *d = conv(v);
        }
        return;
    }
    if layout.strides.iter().all(|&s| s == 0) {
        dst.fill(conv(vals[layout.offset]));
        return;
    }
    // Unravel `start`, then walk the rows of the last axis, stepping an odometer over
    // the outer axes once per row. A row is a copy (stride 1), a fill (stride 0: a value
    // broadcast along the row, like a per-channel scale) or a strided loop.
    let rank = layout.shape.len();
    let (inner, inner_stride) = (layout.shape[rank - 1], layout.strides[rank - 1]);
    // Coalesced layouts rarely have more than a few axes: no allocation per chunk then.
    let (mut small, mut large);
    let idx: &mut [usize] = if rank <= 8 {
        small = [0usize; 8];
        &mut small[..rank]
    } else {
        large = vec![0usize; rank];
        &mut large
    };
    let mut rem = start;
    for ax in (0..rank).rev() {
        idx[ax] = rem % layout.shape[ax];
        rem /= layout.shape[ax];
    }
    let mut row_start: isize = layout.offset as isize
        + (0..rank - 1)
            .map(|a| idx[a] as isize * layout.strides[a])
            .sum::<isize>();
    let mut col = idx[rank - 1];
    let mut done = 0;
    while done < dst.len() {
        let n = (inner - col).min(dst.len() - done);
        let d = &mut dst[done..done + n];
        let first = row_start + col as isize * inner_stride;
        match inner_stride {
            1 => {
                let run = &vals[first as usize..first as usize + n];
                d.iter_mut().zip(run).for_each(|(d, &v)| *d = conv(v));
            }
            0 => d.fill(conv(vals[first as usize])),
            st => {
                for (k, v) in d.iter_mut().enumerate() {
                    *v = conv(vals[(first + k as isize * st) as usize]);
                }
            }
        }
        done += n;
        col = 0;
        // Next row: step the odometer over the outer axes.
        let mut ax = rank - 1;
        while ax > 0 {
            ax -= 1;
            idx[ax] += 1;
            row_start += layout.strides[ax];
            if idx[ax] < layout.shape[ax] {
                break;
            }
            row_start -= layout.strides[ax] * layout.shape[ax] as isize;
            idx[ax] = 0;
        }
    }
}
