//! Elementwise kernels: unary maps, broadcasting binary maps, comparisons, `select` and
//! casts (`select` lives in `select.rs`). Inputs are strided views already broadcast to the output shape; outputs are
//! contiguous.
//!
//! ```
//! use spore_kernels::{elementwise, BinaryFn, Buffer, Layout};
//! let a = Buffer::F32(vec![1.0, 2.0, 3.0]);
//! let b = Buffer::F32(vec![10.0]);
//! let lb = Layout::contiguous(&[1]).broadcast_to(&[3]);
//! let out = elementwise::binary(BinaryFn::Add, &a, &Layout::contiguous(&[3]), &b, &lb, &[3]).unwrap();
//! assert_eq!(out, Buffer::F32(vec![11.0, 12.0, 13.0]));
//! ```

use crate::buffer::Buffer;
use crate::buffer::Element;
use crate::dtype::DType;
use crate::layout::{Dims, Layout, Strides, fill_rows};
use crate::vmath;
use smallvec::smallvec;

pub use crate::select::select;

/// The one list of one-input functions: the enum, its `ALL` list and every per-function
/// loop below are generated from it, so a new function is named here once (and given its
/// scalar rule in `Num::unary`).
macro_rules! with_unary_fns {
    ($then:ident) => {
        $then! { Neg, Exp, Log, Log1p, Sqrt, Rsqrt, Abs, Sign, Tanh, Sigmoid, Relu, Sin, Cos, Erf }
    };
}

macro_rules! define_unary_fn {
    ($($v:ident),*) => {
        /// One-input numeric functions.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum UnaryFn {
            $($v),*
        }

        impl UnaryFn {
            /// Every function, in declaration order.
            pub const ALL: &'static [UnaryFn] = &[$(UnaryFn::$v),*];
        }
    };
}
with_unary_fns!(define_unary_fn);

impl UnaryFn {
    /// True for functions that only make sense on floating-point inputs.
    pub fn needs_float(self) -> bool {
        !matches!(
            self,
            UnaryFn::Neg | UnaryFn::Abs | UnaryFn::Sign | UnaryFn::Relu
        )
    }

    /// Applies the function to one f64 (the reference semantics of the kernels).
    pub fn apply_f64(self, x: f64) -> f64 {
        x.unary(self)
    }
}

/// Two-input numeric functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryFn {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Maximum,
    Minimum,
}

impl BinaryFn {
    pub const ALL: [BinaryFn; 7] = [
        BinaryFn::Add,
        BinaryFn::Sub,
        BinaryFn::Mul,
        BinaryFn::Div,
        BinaryFn::Pow,
        BinaryFn::Maximum,
        BinaryFn::Minimum,
    ];

    pub fn apply_f64(self, a: f64, b: f64) -> f64 {
        a.binary(self, b)
    }
}

/// Comparisons; results are Bool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompareFn {
    Equal,
    NotEqual,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
}

impl CompareFn {
    pub const ALL: [CompareFn; 6] = [
        CompareFn::Equal,
        CompareFn::NotEqual,
        CompareFn::Less,
        CompareFn::LessEqual,
        CompareFn::Greater,
        CompareFn::GreaterEqual,
    ];

    #[inline(always)]
    pub fn test<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CompareFn::Equal => a == b,
            CompareFn::NotEqual => a != b,
            CompareFn::Less => a < b,
            CompareFn::LessEqual => a <= b,
            CompareFn::Greater => a > b,
            CompareFn::GreaterEqual => a >= b,
        }
    }
}

/// Arithmetic on every numeric element type. Integer arithmetic wraps and integer division
/// by zero gives 0 (no panic on user data); transcendental functions on integers go through
/// f64 (the op layer only allows them on floats).
pub trait Num: Element {
    fn unary(self, f: UnaryFn) -> Self;
    fn binary(self, f: BinaryFn, other: Self) -> Self;
    /// [`unary_slice`]; float32 overrides it with vectorised functions ([`Num::unary`]'s bits).
    fn unary_run(f: UnaryFn, src: &[Self], dst: &mut [Self]) {
        each_unary(f, src, dst)
    }
}

macro_rules! impl_num_float {
    ($t:ty, $exp:path, $erf:path, $sigmoid:expr, $run:path) => {
        impl Num for $t {
            fn unary_run(f: UnaryFn, src: &[Self], dst: &mut [Self]) {
                $run(f, src, dst)
            }
            #[inline(always)]
            fn unary(self, f: UnaryFn) -> Self {
                let x = self;
                match f {
                    UnaryFn::Neg => -x,
                    UnaryFn::Exp => $exp(x),
                    UnaryFn::Log => x.ln(),
                    UnaryFn::Log1p => x.ln_1p(),
                    UnaryFn::Sqrt => x.sqrt(),
                    UnaryFn::Rsqrt => 1.0 / x.sqrt(),
                    UnaryFn::Abs => x.abs(),
                    UnaryFn::Sign => {
                        if x > 0.0 {
                            1.0
                        } else if x < 0.0 {
                            -1.0
                        } else {
                            x * 0.0 // keeps NaN, maps +-0 to 0
                        }
                    }
                    UnaryFn::Tanh => x.tanh(),
                    UnaryFn::Sigmoid => ($sigmoid)(x),
                    UnaryFn::Relu => {
                        if x > 0.0 {
                            x
                        } else {
                            0.0
                        }
                    }
                    UnaryFn::Sin => x.sin(),
                    UnaryFn::Cos => x.cos(),
                    UnaryFn::Erf => $erf(x),
                }
            }
            #[inline(always)]
            fn binary(self, f: BinaryFn, y: Self) -> Self {
                let x = self;
                match f {
                    BinaryFn::Add => x + y,
                    BinaryFn::Sub => x - y,
                    BinaryFn::Mul => x * y,
                    BinaryFn::Div => x / y,
                    BinaryFn::Pow => x.powf(y),
                    // NaN in either input gives NaN, as NumPy's maximum does.
                    BinaryFn::Maximum => {
                        if x.is_nan() || y.is_nan() {
                            <$t>::NAN
                        } else if x >= y {
                            x
                        } else {
                            y
                        }
                    }
                    BinaryFn::Minimum => {
                        if x.is_nan() || y.is_nan() {
                            <$t>::NAN
                        } else if x <= y {
                            x
                        } else {
                            y
                        }
                    }
                }
            }
        }
    };
}
impl_num_float!(f32, vmath::exp, vmath::erf, vmath::sigmoid, f32_unary_run);
impl_num_float!(
    f64,
    f64::exp,
    libm::erf,
    |x: f64| 1.0 / (1.0 + (-x).exp()),
    each_unary
);

/// float32's whole-slice functions: [`vmath`]'s (`f32::unary` uses the same functions).
fn f32_unary_run(f: UnaryFn, src: &[f32], dst: &mut [f32]) {
    match f {
        UnaryFn::Exp => vmath::exp_slice(src, dst),
        UnaryFn::Erf => vmath::erf_slice(src, dst),
        UnaryFn::Sigmoid => vmath::sigmoid_slice(src, dst),
        other => each_unary(other, src, dst),
    }
}

/// float16 and bfloat16 compute each step in float32 and round the result once. A run of
/// values is widened, computed and rounded a block at a time, on vector loops (the same
/// bits as value by value). Why: the per-value conversions test the CPU on each call and
/// keep the loop scalar; float16 ReLUs of a ResNet-18 step took ten times as long as
/// bfloat16 ones that way.
macro_rules! impl_num_half {
    ($t:ty, $widen:path, $narrow:path) => {
        impl Num for $t {
            fn unary_run(f: UnaryFn, src: &[Self], dst: &mut [Self]) {
                const BLOCK: usize = 256;
                let (mut wide, mut out) = ([0.0f32; BLOCK], [0.0f32; BLOCK]);
                for (s, d) in src.chunks(BLOCK).zip(dst.chunks_mut(BLOCK)) {
                    let (w, o) = (&mut wide[..s.len()], &mut out[..s.len()]);
                    $widen(s, w);
                    f32::unary_run(f, w, o);
                    $narrow(o, d);
                }
            }
            #[inline(always)]
            fn unary(self, f: UnaryFn) -> Self {
                <$t>::from_f32(self.to_f32().unary(f))
            }
            #[inline(always)]
            fn binary(self, f: BinaryFn, y: Self) -> Self {
                <$t>::from_f32(self.to_f32().binary(f, y.to_f32()))
            }
        }
    };
}
impl_num_half!(
    half::f16,
    crate::f16_convert::widen,
    crate::f16_convert::narrow
);
impl_num_half!(
    half::bf16,
    crate::half_float::widen_bf16,
    crate::half_float::round_to_bf16
);

macro_rules! impl_num_int {
    ($t:ty) => {
        impl Num for $t {
            #[inline(always)]
            fn unary(self, f: UnaryFn) -> Self {
                let x = self;
                match f {
                    UnaryFn::Neg => x.wrapping_neg(),
                    #[allow(unused_comparisons)]
                    UnaryFn::Abs => {
                        if x < 0 {
                            x.wrapping_neg()
                        } else {
                            x
                        }
                    }
                    #[allow(unused_comparisons)]
                    UnaryFn::Sign => {
                        if x > 0 {
                            1
                        } else if x < 0 {
                            (0 as $t).wrapping_sub(1)
                        } else {
                            0
                        }
                    }
                    #[allow(unused_comparisons)]
                    UnaryFn::Relu => {
                        if x > 0 {
                            x
                        } else {
                            0
                        }
                    }
                    other => (x as f64).unary(other) as $t,
                }
            }
            #[inline(always)]
            fn binary(self, f: BinaryFn, y: Self) -> Self {
                let x = self;
                match f {
                    BinaryFn::Add => x.wrapping_add(y),
                    BinaryFn::Sub => x.wrapping_sub(y),
                    BinaryFn::Mul => x.wrapping_mul(y),
                    BinaryFn::Div => x.checked_div(y).unwrap_or(0),
                    BinaryFn::Pow => (x as f64).powf(y as f64) as $t,
                    BinaryFn::Maximum => x.max(y),
                    BinaryFn::Minimum => x.min(y),
                }
            }
        }
    };
}
impl_num_int!(i32);
impl_num_int!(i64);
impl_num_int!(u8);

/// `dst[i] = f(src[i])` over equal-length slices, one monomorphised loop per function
/// (the `match` stays out of the inner loop, so it vectorises).
pub fn unary_slice<T: Num>(f: UnaryFn, src: &[T], dst: &mut [T]) {
    T::unary_run(f, src, dst)
}

/// [`unary_slice`]'s generic loop.
fn each_unary<T: Num>(f: UnaryFn, src: &[T], dst: &mut [T]) {
    macro_rules! arms {
        ($($v:ident),*) => { match f { $(UnaryFn::$v => dst.iter_mut().zip(src).for_each(|(d, &x)| *d = x.unary(UnaryFn::$v)),)* } };
    }
    with_unary_fns!(arms)
}

/// `dst[i] = f(a[i], b[i])` over equal-length slices, one loop per function.
pub fn binary_slice<T: Num>(f: BinaryFn, a: &[T], b: &[T], dst: &mut [T]) {
    macro_rules! arms {
        ($($v:ident),*) => { match f { $(BinaryFn::$v => {
            for ((d, &x), &y) in dst.iter_mut().zip(a).zip(b) {
                *d = x.binary(BinaryFn::$v, y);
            }
        })* } };
    }
    arms!(Add, Sub, Mul, Div, Pow, Maximum, Minimum)
}

/// `dst[i] = a[i] * b[i] + c[i]`, or `c[i] - a[i] * b[i]` when `subtract`: a product and
/// the add or subtract that reads it, in one pass. The product is rounded before the sum,
/// so results equal those of the two ops run one after the other (no fused multiply-add).
/// Why: an optimizer's `m * momentum + g` and `w - lr * m` over large parameters are bound
/// by memory, and one loop moves the product through L1 once instead of twice.
pub fn mul_add_slice<T: Num>(a: &[T], b: &[T], c: &[T], subtract: bool, dst: &mut [T]) {
    let operands = dst.iter_mut().zip(a).zip(b).zip(c);
    if subtract {
        for (((d, &x), &y), &z) in operands {
            *d = z.binary(BinaryFn::Sub, x.binary(BinaryFn::Mul, y));
        }
    } else {
        for (((d, &x), &y), &z) in operands {
            *d = x.binary(BinaryFn::Mul, y).binary(BinaryFn::Add, z);
        }
    }
}

/// [`mul_add_slice`] whose addend `c` is `dst` itself (the addend's buffer lent to the
/// result): `dst[i] = a[i] * b[i] + dst[i]`, or `dst[i] - a[i] * b[i]`, rounded alike.
pub fn mul_add_slice_over_addend<T: Num>(a: &[T], b: &[T], subtract: bool, dst: &mut [T]) {
    let operands = dst.iter_mut().zip(a).zip(b);
    if subtract {
        for ((d, &x), &y) in operands {
            *d = d.binary(BinaryFn::Sub, x.binary(BinaryFn::Mul, y));
        }
    } else {
        for ((d, &x), &y) in operands {
            *d = x.binary(BinaryFn::Mul, y).binary(BinaryFn::Add, *d);
        }
    }
}

/// [`binary_slice`] with one operand read from `dst` itself: `dst[i] = f(dst[i], other[i])`
/// when `dst_is_lhs`, else `f(other[i], dst[i])`.
pub fn binary_slice_over<T: Num>(f: BinaryFn, other: &[T], dst_is_lhs: bool, dst: &mut [T]) {
    macro_rules! arms {
        ($($v:ident),*) => { match f { $(BinaryFn::$v => {
            if dst_is_lhs {
                for (d, &y) in dst.iter_mut().zip(other) {
                    *d = d.binary(BinaryFn::$v, y);
                }
            } else {
                for (d, &x) in dst.iter_mut().zip(other) {
                    *d = x.binary(BinaryFn::$v, *d);
                }
            }
        })* } };
    }
    arms!(Add, Sub, Mul, Div, Pow, Maximum, Minimum)
}

/// The shape and strides a row walk over `layout` takes: a contiguous view as one row.
fn rows_of(layout: &Layout) -> (Dims, Strides) {
    if layout.is_contiguous() {
        (smallvec![layout.numel()], smallvec![1])
    } else {
        (layout.shape.clone(), layout.strides.clone())
    }
}

/// Maps a strided view to a new contiguous vector.
pub fn map_unary<T: Element, U: Element>(
    src: &[T],
    layout: &Layout,
    f: impl Fn(T) -> U + Sync,
) -> Vec<U> {
    let mut out = crate::arena::for_overwrite::<U>(layout.numel());
    let (shape, strides) = rows_of(layout);
    fill_rows(&mut out, &shape, [&strides], [layout.offset], |r, o| {
        let (s, st) = (r.starts[0], r.steps[0]);
        if st == 1 {
            let s = s as usize;
            for (o, &x) in o.iter_mut().zip(&src[s..s + r.len]) {
                *o = f(x);
            }
        } else {
            for (i, o) in o.iter_mut().enumerate() {
                *o = f(src[(s + i as isize * st) as usize]);
            }
        }
    });
    out
}

/// Maps two strided views (both already broadcast to `shape`) to a new contiguous vector.
pub fn map_binary<T: Element, U: Element>(
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
    shape: &[usize],
    f: impl Fn(T, T) -> U + Sync,
) -> Vec<U> {
    let n: usize = shape.iter().product();
    let mut out = crate::arena::for_overwrite::<U>(n);
    // Two contiguous operands walk as one flat row: the common case, vectorised.
    let flat = la.is_contiguous() && lb.is_contiguous();
    let (shape, sa, sb): (Dims, Strides, Strides) = if flat {
        (smallvec![n], smallvec![1], smallvec![1])
    } else {
        (
            Dims::from_slice(shape),
            la.strides.clone(),
            lb.strides.clone(),
        )
    };
    fill_rows(
        &mut out,
        &shape,
        [&sa, &sb],
        [la.offset, lb.offset],
        |r, o| {
            let (pa, pb) = (r.starts[0], r.starts[1]);
            let len = r.len;
            match (r.steps[0], r.steps[1]) {
                (1, 1) => {
                    let (a, b) = (
                        &a[pa as usize..pa as usize + len],
                        &b[pb as usize..pb as usize + len],
                    );
                    for i in 0..len {
                        o[i] = f(a[i], b[i]);
                    }
                }
                (1, 0) => {
                    let (a, y) = (&a[pa as usize..pa as usize + len], b[pb as usize]);
                    for i in 0..len {
                        o[i] = f(a[i], y);
                    }
                }
                (0, 1) => {
                    let (x, b) = (a[pa as usize], &b[pb as usize..pb as usize + len]);
                    for i in 0..len {
                        o[i] = f(x, b[i]);
                    }
                }
                (da, db) => {
                    for (i, o) in o.iter_mut().enumerate() {
                        let i = i as isize;
                        *o = f(a[(pa + i * da) as usize], b[(pb + i * db) as usize]);
                    }
                }
            }
        },
    );
    out
}

pub(crate) fn mismatch(what: &str, a: DType, b: DType) -> String {
    format!("{what}: unsupported dtypes {a} and {b}")
}

/// Applies a unary function; the output has the input's dtype.
pub fn unary(f: UnaryFn, src: &Buffer, layout: &Layout) -> Result<Buffer, String> {
    fn go<T: Num>(f: UnaryFn, src: &[T], layout: &Layout) -> Vec<T> {
        let mut out = crate::arena::for_overwrite::<T>(layout.numel());
        let (shape, strides) = rows_of(layout);
        // Rows go through the type's slice functions (vectorised), strided ones in blocks.
        fill_rows(&mut out, &shape, [&strides], [layout.offset], |r, o| {
            let (s, st) = (r.starts[0], r.steps[0]);
            if st == 1 {
                return unary_slice(f, &src[s as usize..s as usize + r.len], o);
            }
            let mut block = [T::zero(); 256];
            for (c, o) in o.chunks_mut(256).enumerate() {
                for (i, v) in block[..o.len()].iter_mut().enumerate() {
                    *v = src[(s + (c * 256 + i) as isize * st) as usize];
                }
                unary_slice(f, &block[..o.len()], o);
            }
        });
        out
    }
    Ok(match src {
        Buffer::F32(s) => Buffer::F32(go(f, s, layout)),
        Buffer::F64(s) => Buffer::F64(go(f, s, layout)),
        Buffer::F16(s) => Buffer::F16(go(f, s, layout)),
        Buffer::BF16(s) => Buffer::BF16(go(f, s, layout)),
        Buffer::I32(s) => Buffer::I32(go(f, s, layout)),
        Buffer::I64(s) => Buffer::I64(go(f, s, layout)),
        Buffer::U8(s) => Buffer::U8(go(f, s, layout)),
        Buffer::Bool(_) => return Err(format!("{f:?}: Bool input is not numeric")),
    })
}

/// Applies a binary function to two same-dtype views broadcast to `shape`.
pub fn binary(
    f: BinaryFn,
    a: &Buffer,
    la: &Layout,
    b: &Buffer,
    lb: &Layout,
    shape: &[usize],
) -> Result<Buffer, String> {
    fn go<T: Num>(f: BinaryFn, a: &[T], la: &Layout, b: &[T], lb: &Layout, s: &[usize]) -> Vec<T> {
        macro_rules! arms {
            ($($v:ident),*) => { match f { $(BinaryFn::$v => map_binary(a, la, b, lb, s, |x: T, y: T| x.binary(BinaryFn::$v, y)),)* } };
        }
        arms!(Add, Sub, Mul, Div, Pow, Maximum, Minimum)
    }
    Ok(match (a, b) {
        (Buffer::F32(a), Buffer::F32(b)) => Buffer::F32(go(f, a, la, b, lb, shape)),
        (Buffer::F64(a), Buffer::F64(b)) => Buffer::F64(go(f, a, la, b, lb, shape)),
        (Buffer::F16(a), Buffer::F16(b)) => Buffer::F16(go(f, a, la, b, lb, shape)),
        (Buffer::BF16(a), Buffer::BF16(b)) => Buffer::BF16(go(f, a, la, b, lb, shape)),
        (Buffer::I32(a), Buffer::I32(b)) => Buffer::I32(go(f, a, la, b, lb, shape)),
        (Buffer::I64(a), Buffer::I64(b)) => Buffer::I64(go(f, a, la, b, lb, shape)),
        (Buffer::U8(a), Buffer::U8(b)) => Buffer::U8(go(f, a, la, b, lb, shape)),
        _ => return Err(mismatch(&format!("{f:?}"), a.dtype(), b.dtype())),
    })
}

/// Compares two same-dtype views broadcast to `shape`; the result is Bool.
pub fn compare(
    f: CompareFn,
    a: &Buffer,
    la: &Layout,
    b: &Buffer,
    lb: &Layout,
    shape: &[usize],
) -> Result<Buffer, String> {
    fn go<T: Element>(
        f: CompareFn,
        a: &[T],
        la: &Layout,
        b: &[T],
        lb: &Layout,
        s: &[usize],
    ) -> Vec<bool> {
        // One monomorphised loop per comparison (no `match` per element).
        macro_rules! arms {
            ($($v:ident),*) => { match f { $(CompareFn::$v => map_binary(a, la, b, lb, s, |x: T, y: T| CompareFn::$v.test(x, y)),)* } };
        }
        arms!(Equal, NotEqual, Less, LessEqual, Greater, GreaterEqual)
    }
    Ok(Buffer::Bool(match (a, b) {
        (Buffer::F32(a), Buffer::F32(b)) => go(f, a, la, b, lb, shape),
        (Buffer::F64(a), Buffer::F64(b)) => go(f, a, la, b, lb, shape),
        (Buffer::F16(a), Buffer::F16(b)) => go(f, a, la, b, lb, shape),
        (Buffer::BF16(a), Buffer::BF16(b)) => go(f, a, la, b, lb, shape),
        (Buffer::I32(a), Buffer::I32(b)) => go(f, a, la, b, lb, shape),
        (Buffer::I64(a), Buffer::I64(b)) => go(f, a, la, b, lb, shape),
        (Buffer::U8(a), Buffer::U8(b)) => go(f, a, la, b, lb, shape),
        (Buffer::Bool(a), Buffer::Bool(b)) => go(f, a, la, b, lb, shape),
        _ => return Err(mismatch(&format!("{f:?}"), a.dtype(), b.dtype())),
    }))
}

/// Converts a view to `dtype` (Rust `as` semantics; to Bool means `!= 0`; to float16 and
/// bfloat16 rounded once to nearest, ties to even, from the value as float64, which is
/// exact for every float and for integers up to 2^53: see [`Element::from_f64`]).
pub fn cast(src: &Buffer, layout: &Layout, dtype: DType) -> Buffer {
    if let Some(fast) = crate::half_float::fast_cast(src, layout, dtype) {
        return fast;
    }
    fn to<T: Element, U: Element>(s: &[T], l: &Layout) -> Vec<U> {
        map_unary(s, l, |x| U::from_f64(x.to_f64()))
    }
    fn from<T: Element>(s: &[T], l: &Layout, dtype: DType) -> Buffer {
        match dtype {
            DType::F32 => Buffer::F32(to(s, l)),
            DType::F64 => Buffer::F64(to(s, l)),
            DType::F16 => Buffer::F16(to(s, l)),
            DType::BF16 => Buffer::BF16(to(s, l)),
            DType::I32 => Buffer::I32(to(s, l)),
            DType::I64 => Buffer::I64(to(s, l)),
            DType::U8 => Buffer::U8(to(s, l)),
            DType::Bool => Buffer::Bool(to(s, l)),
        }
    }
    crate::with_buffer!(src, s => from(s, layout, dtype))
}

/// Copies a view into a new contiguous buffer of the same dtype.
pub fn copy(src: &Buffer, layout: &Layout) -> Buffer {
    crate::with_buffer!(src, s => Buffer::from(crate::layout::to_contiguous(s, layout)))
}
