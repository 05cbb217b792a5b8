//! float32 `exp`, `erf` and the logistic function written so that a loop over a slice
//! vectorises: no branches (both sides computed and one selected), no calls into libm,
//! and only IEEE additions, multiplications and divisions (no fused multiply-add). The
//! same function runs one element at a time and sixteen at a time, so a value is the same
//! bits whichever way it was computed: PyNative's element loops and Graph mode's fused
//! slices agree exactly.
//!
//! ```
//! use spore_kernels::vmath;
//! assert!((vmath::exp(1.0) - std::f32::consts::E).abs() <= f32::EPSILON * 3.0);
//! let mut out = [0.0f32; 3];
//! vmath::erf_slice(&[-1.0, 0.0, 2.0], &mut out);
//! assert_eq!(out[1], 0.0);
//! assert!((out[2] - 0.995_322_3).abs() < 1e-6);
//! ```
//!
//! Accuracy: `exp` within 1 ulp of the correctly rounded value over every finite float32
//! (checked exhaustively once; the tests sweep 400,000 points and allow 2), with overflow to
//! infinity, gradual underflow and NaN as libm; `erf` within 4e-7 relative (tested).

/// Arguments are clamped to this (`exp` overflows to infinity from 88.73 on; the clamp only
/// keeps the exponent arithmetic in range).
const EXP_HI: f32 = 89.0;
/// Below this `exp` is 0 in float32 (under half the smallest subnormal).
const EXP_LO: f32 = -104.0;
/// `ln 2` split so that `n * LN2_HI` is exact for the `n` that occur (Cody and Waite).
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// `e^x`: `x = n ln 2 + r` with `|r| <= ln(2)/2`, a degree-7 Taylor polynomial for `e^r`
/// (truncation below 6e-9 relative), then `2^n` applied in two halves so that results in
/// the subnormal range round once, as libm's do.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let clamped = x.clamp(EXP_LO, EXP_HI);
    let n = round_even(clamped * std::f32::consts::LOG2_E);
    let r = (clamped - n * LN2_HI) - n * LN2_LO;
    let mut p = 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    // n lies in [-150, 128]: each half in [-75, 64], a normal power of two.
    let half = round_even(n * 0.5);
    let y = p * pow2(half) * pow2(n - half);
    if x.is_nan() { x } else { y }
}

/// `v` rounded to the nearest whole number, ties to even, for `|v| < 2^22`. Why not
/// `round_ties_even`: without SSE4.1 (the baseline x86-64 target) it is a library call per
/// element; adding and subtracting `1.5 * 2^23` rounds in the adder, in every instruction set.
#[inline(always)]
fn round_even(v: f32) -> f32 {
    const SHIFTER: f32 = 12_582_912.0;
    (v + SHIFTER) - SHIFTER
}

/// `2^k` for a whole `k` in the normal exponent range. Why not `k as i32`: float-to-int
/// conversion with Rust's saturation does not vectorise; adding `1.5 * 2^23 + 127` puts
/// the biased exponent in the low mantissa bits, and the shift moves it into place.
#[inline(always)]
fn pow2(k: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0 + 127.0;
    f32::from_bits((k + MAGIC).to_bits() << 23)
}

/// The error function. Below 0.5 in magnitude its Maclaurin series to `x^11` (error below
/// 3e-8 relative); above, `1 - erfc` with the Chebyshev fit of Numerical Recipes (section
/// 6.2, `erfcc`: fractional error of `erfc` below 1.2e-7) over this module's `exp`.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    const TWO_OVER_SQRT_PI: f32 = std::f32::consts::FRAC_2_SQRT_PI;
    let z = x.abs();
    // Series: 2/sqrt(pi) * sum (-1)^k x^(2k+1) / (k! (2k+1)).
    let s = x * x;
    let mut p = -1.0 / 1320.0;
    p = p * s + 1.0 / 216.0;
    p = p * s - 1.0 / 42.0;
    p = p * s + 1.0 / 10.0;
    p = p * s - 1.0 / 3.0;
    p = p * s + 1.0;
    let small = x * (p * TWO_OVER_SQRT_PI);
    // erfc(z) = t exp(-z^2 + q(t)), t = 1 / (1 + z/2).
    let t = 1.0 / (1.0 + 0.5 * z);
    let mut q = 0.170_872_77;
    q = q * t - 0.822_152_23;
    q = q * t + 1.488_515_9;
    q = q * t - 1.135_204;
    q = q * t + 0.278_868_07;
    q = q * t - 0.186_288_06;
    q = q * t + 0.096_784_18;
    q = q * t + 0.374_091_96;
    q = q * t + 1.000_023_7;
    q = q * t - 1.265_512_2;
    let erfc = t * exp(q - z * z);
    let large = (1.0 - erfc).copysign(x);
    if z < 0.5 { small } else { large }
}

/// The logistic function `1 / (1 + e^-x)`.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

macro_rules! slice_fn {
    ($(#[$doc:meta])* $name:ident, $f:ident) => {
        $(#[$doc])*
        pub fn $name(src: &[f32], dst: &mut [f32]) {
            #[inline(always)]
            fn each(src: &[f32], dst: &mut [f32]) {
                for (d, &x) in dst.iter_mut().zip(src) {
                    *d = $f(x);
                }
            }
            // Why a copy per instruction set: the loop is compiled for the widest vectors
            // the CPU has (detected at run time); the arithmetic is the same on all.
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                fn wide(src: &[f32], dst: &mut [f32]) {
                    each(src, dst)
                }
                #[target_feature(enable = "avx2")]
                fn narrow(src: &[f32], dst: &mut [f32]) {
                    each(src, dst)
                }
                if crate::isa::allows(crate::isa::Isa::Avx512) {
                    // SAFETY: the CPU has AVX-512F (`isa` checked it).
                    return unsafe { wide(src, dst) };
                }
                if crate::isa::allows(crate::isa::Isa::Avx2) {
                    // SAFETY: the CPU has AVX2 (`isa` checked it).
                    return unsafe { narrow(src, dst) };
                }
            }
            each(src, dst)
        }
    };
}

slice_fn!(
    /// `dst[i] = exp(src[i])` over equal-length slices (the shorter length).
    exp_slice,
    exp
);
slice_fn!(
    /// `dst[i] = erf(src[i])` over equal-length slices (the shorter length).
    erf_slice,
    erf
);
slice_fn!(
    /// `dst[i] = sigmoid(src[i])` over equal-length slices (the shorter length).
    sigmoid_slice,
    sigmoid
);

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between two finite float32 values.
    fn ulps(a: f32, b: f32) -> u32 {
        let key = |v: f32| {
            let bits = v.to_bits() as i32;
            if bits < 0 { i32::MIN - bits } else { bits }
        };
        key(a).abs_diff(key(b))
    }

    fn sweep(lo: f32, hi: f32, n: usize) -> Vec<f32> {
        (0..=n)
            .map(|i| lo + (hi - lo) * i as f32 / n as f32)
            .collect()
    }

    #[test]
    fn exp_is_within_two_ulp_of_the_correctly_rounded_value() {
        let mut worst = 0;
        for x in sweep(-103.0, 88.7, 400_000) {
            let want = (x as f64).exp() as f32;
            let got = exp(x);
            worst = worst.max(ulps(got, want));
            assert!(ulps(got, want) <= 2, "exp({x}) = {got}, want {want}");
        }
        assert!(worst >= 1, "the sweep reached the rounding error");
    }

    #[test]
    fn exp_handles_the_special_values_as_libm() {
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(89.0), f32::INFINITY);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-104.0), 0.0);
        assert!(exp(f32::NAN).is_nan());
        // Gradual underflow: a subnormal result, correctly rounded.
        for x in [-87.5f32, -95.0, -100.0, -103.2] {
            let want = (x as f64).exp() as f32;
            assert!(want.is_subnormal() || x > -87.4);
            assert!(
                ulps(exp(x), want) <= 2,
                "exp({x}) = {}, want {want}",
                exp(x)
            );
        }
        assert_eq!(exp(88.72), (88.72f32 as f64).exp() as f32);
    }

    #[test]
    fn erf_is_within_4e_7_relative_of_f64() {
        for x in sweep(-6.0, 6.0, 300_001) {
            let want = libm::erf(x as f64);
            let got = erf(x) as f64;
            let err = (got - want).abs() / want.abs().max(1e-30);
            assert!(err <= 4e-7 || got == want, "erf({x}) = {got}, want {want}");
        }
        assert_eq!(erf(0.0), 0.0);
        assert_eq!(erf(f32::INFINITY), 1.0);
        assert_eq!(erf(f32::NEG_INFINITY), -1.0);
        assert!(erf(f32::NAN).is_nan());
        assert_eq!(erf(1e-30), 1e-30 * std::f32::consts::FRAC_2_SQRT_PI);
    }

    #[test]
    fn slices_equal_one_element_at_a_time_bit_for_bit() {
        let xs: Vec<f32> = sweep(-110.0, 95.0, 20_011)
            .into_iter()
            .chain([f32::NAN, f32::INFINITY, -0.0, 1e-40])
            .collect();
        let mut out = vec![0.0f32; xs.len()];
        for (slice, one) in [
            (exp_slice as fn(&[f32], &mut [f32]), exp as fn(f32) -> f32),
            (erf_slice, erf),
            (sigmoid_slice, sigmoid),
        ] {
            slice(&xs, &mut out);
            for (x, y) in xs.iter().zip(&out) {
                assert_eq!(y.to_bits(), one(*x).to_bits(), "at {x}");
            }
        }
    }
}
