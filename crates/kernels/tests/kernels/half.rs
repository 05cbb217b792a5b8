//! float16 and bfloat16 conversions against NumPy's and ml_dtypes' (the table in
//! `tests/fixtures/half_conversions.json`, written by `scripts/make_half_fixtures.py`):
//! float32 to 16 bits rounds to nearest with ties to even, keeps NaN a NaN of the same
//! sign, overflows to infinity and keeps subnormals; 16 bits widen to float32 exactly.

use spore_kernels::elementwise::cast;
use spore_kernels::{Buffer, DType, Layout, bf16, f16};

fn fixture() -> serde_json::Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/half_conversions.json"
    );
    let text = std::fs::read_to_string(path).expect("the conversion table (see its script)");
    serde_json::from_str(&text).expect("valid JSON")
}

fn triples(v: &serde_json::Value, key: &str) -> Vec<[u32; 3]> {
    v[key]
        .as_array()
        .expect("an array of triples")
        .iter()
        .map(|t| {
            let n = |i: usize| t[i].as_u64().expect("a bit pattern") as u32;
            [n(0), n(1), n(2)]
        })
        .collect()
}

/// Two 16-bit patterns agree: equal, or both NaN with the same sign (payloads of NaNs
/// are not specified alike across converters).
fn same_16(got: u16, want: u16, nan: impl Fn(u16) -> bool) -> bool {
    got == want || (nan(got) && nan(want) && (got >> 15) == (want >> 15))
}

#[test]
fn float32_to_float16_and_bfloat16_match_numpy_and_ml_dtypes() {
    let table = triples(&fixture(), "narrow");
    assert!(table.len() > 5000, "the table is complete");
    let x: Vec<f32> = table.iter().map(|t| f32::from_bits(t[0])).collect();
    let layout = Layout::contiguous(&[x.len()]);
    let src = Buffer::F32(x);
    let Buffer::F16(h) = cast(&src, &layout, DType::F16) else {
        panic!("cast to F16 gave another dtype")
    };
    let Buffer::BF16(b) = cast(&src, &layout, DType::BF16) else {
        panic!("cast to BF16 gave another dtype")
    };
    let mut wrong = vec![];
    for (i, t) in table.iter().enumerate() {
        if !same_16(h[i].to_bits(), t[1] as u16, |v| f16::from_bits(v).is_nan()) {
            wrong.push(format!(
                "f32 {:#010x} -> f16 {:#06x}, want {:#06x}",
                t[0],
                h[i].to_bits(),
                t[1]
            ));
        }
        if !same_16(b[i].to_bits(), t[2] as u16, |v| bf16::from_bits(v).is_nan()) {
            wrong.push(format!(
                "f32 {:#010x} -> bf16 {:#06x}, want {:#06x}",
                t[0],
                b[i].to_bits(),
                t[2]
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} differ:\n{}",
        wrong.len(),
        2 * table.len(),
        wrong[..wrong.len().min(20)].join("\n")
    );
}

#[test]
fn float16_and_bfloat16_widen_to_float32_exactly() {
    let table = triples(&fixture(), "widen");
    let layout = Layout::contiguous(&[table.len()]);
    let h = Buffer::F16(table.iter().map(|t| f16::from_bits(t[0] as u16)).collect());
    let b = Buffer::BF16(table.iter().map(|t| bf16::from_bits(t[0] as u16)).collect());
    let (Buffer::F32(hw), Buffer::F32(bw)) =
        (cast(&h, &layout, DType::F32), cast(&b, &layout, DType::F32))
    else {
        panic!("widening gave another dtype")
    };
    for (i, t) in table.iter().enumerate() {
        let same = |got: f32, want: u32| {
            got.to_bits() == want
                || (got.is_nan()
                    && f32::from_bits(want).is_nan()
                    && got.is_sign_negative() == f32::from_bits(want).is_sign_negative())
        };
        assert!(
            same(hw[i], t[1]),
            "f16 {:#06x} -> {:#010x}, want {:#010x}",
            t[0],
            hw[i].to_bits(),
            t[1]
        );
        assert!(
            same(bw[i], t[2]),
            "bf16 {:#06x} -> {:#010x}, want {:#010x}",
            t[0],
            bw[i].to_bits(),
            t[2]
        );
    }
}

/// From float64 the value is rounded once, directly (NumPy does so for float16;
/// ml_dtypes goes through float32 for bfloat16 and can round twice: just above a tie,
/// `1 + 2^-8 + 2^-30` becomes `1 + 2^-8` in float32, a tie, which goes to even, `1`).
#[test]
fn float64_rounds_to_16_bits_once() {
    let x = Buffer::F64(vec![
        1.0 + 2f64.powi(-8) + 2f64.powi(-30),
        1.0 + 2f64.powi(-11) + 2f64.powi(-40),
    ]);
    let l = Layout::contiguous(&[2]);
    let (Buffer::BF16(b), Buffer::F16(h)) = (cast(&x, &l, DType::BF16), cast(&x, &l, DType::F16))
    else {
        panic!("casts gave other dtypes")
    };
    assert_eq!(
        b[0].to_f64(),
        1.0 + 2f64.powi(-7),
        "bf16 rounds up past the tie"
    );
    assert_eq!(
        h[1].to_f64(),
        1.0 + 2f64.powi(-10),
        "f16 rounds up past the tie"
    );
}

#[test]
fn branch_free_bf16_rounding_equals_the_half_crate_on_every_class_of_f32() {
    use spore_kernels::half_float::f32_to_bf16_bits;
    // Every exponent with mantissas at and around each rounding boundary, both signs,
    // plus pseudo-random patterns (NaNs with payloads, subnormals, infinities included).
    let mut patterns = vec![];
    for sign in [0u32, 1 << 31] {
        for exp in 0..=255u32 {
            for low in [
                0u32, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1_7fff, 0x1_8000, 0x7f_ffff,
            ] {
                patterns.push(sign | exp << 23 | low);
            }
        }
    }
    let mut s = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..200_000 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        patterns.push(s as u32);
    }
    for bits in patterns {
        let v = f32::from_bits(bits);
        assert_eq!(
            f32_to_bf16_bits(v),
            spore_kernels::bf16::from_f32(v).to_bits(),
            "f32 bits {bits:#010x}"
        );
    }
}

/// A run of 16-bit values through each one-input function (widened, computed and
/// rounded a block at a time on vector loops) equals the function applied value by
/// value, bit for bit (NaN payloads included), for every float16 and bfloat16 pattern.
#[test]
fn sixteen_bit_unary_runs_equal_value_by_value() {
    use spore_kernels::elementwise::{Num, UnaryFn, unary_slice};
    fn check<T: Num + Copy>(all: &[T], bits: impl Fn(T) -> u16) {
        let mut out = all.to_vec();
        for &f in UnaryFn::ALL {
            unary_slice(f, all, &mut out);
            for (&x, &y) in all.iter().zip(&out) {
                let (got, want) = (bits(y), bits(x.unary(f)));
                assert_eq!(got, want, "{f:?} of {:#06x}", bits(x));
            }
        }
    }
    let f16s: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
    check(&f16s, f16::to_bits);
    let bf16s: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
    check(&bf16s, bf16::to_bits);
}
