//! AVX2 building blocks of the transforms: `Bᵀ`, `Aᵀ` and `A` on six or four vectors,
//! the 4x4 transpose within each 128-bit half, and checked loads and stores.

use std::arch::x86_64::*;

use super::*;

/// `A d` for four vectors (one per row, or column, of a tile's output gradient): the
/// six values `Aᵀ`'s columns weigh them with.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn a_t(d: [__m256; M]) -> [__m256; ALPHA] {
    let e = _mm256_add_ps(d[0], d[2]);
    let f = _mm256_add_ps(d[1], d[3]);
    let e4 = _mm256_fmadd_ps(_mm256_set1_ps(4.0), d[2], d[0]);
    let f8 = _mm256_fmadd_ps(
        _mm256_set1_ps(8.0),
        d[3],
        _mm256_mul_ps(_mm256_set1_ps(2.0), d[1]),
    );
    [
        d[0],
        _mm256_add_ps(e, f),
        _mm256_sub_ps(e, f),
        _mm256_add_ps(e4, f8),
        _mm256_sub_ps(e4, f8),
        d[3],
    ]
}

/// `Bᵀ d` for six vectors (one per row, or column, of a tile).
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn bt(d: [__m256; ALPHA]) -> [__m256; ALPHA] {
    let (four, five, two) = (
        _mm256_set1_ps(4.0),
        _mm256_set1_ps(5.0),
        _mm256_set1_ps(2.0),
    );
    let a = _mm256_fnmadd_ps(four, d[2], d[4]); // d4 - 4 d2
    let b = _mm256_fnmadd_ps(four, d[1], d[3]); // d3 - 4 d1
    let c = _mm256_sub_ps(d[4], d[2]);
    let e = _mm256_sub_ps(d[3], d[1]);
    [
        _mm256_fmadd_ps(four, d[0], _mm256_fnmadd_ps(five, d[2], d[4])),
        _mm256_add_ps(a, b),
        _mm256_sub_ps(a, b),
        _mm256_fmadd_ps(two, e, c),
        _mm256_fnmadd_ps(two, e, c),
        _mm256_fmadd_ps(four, d[1], _mm256_fnmadd_ps(five, d[3], d[5])),
    ]
}

/// `Aᵀ m` for six vectors: the four outputs of a tile's row (or column).
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn at(m: [__m256; ALPHA]) -> [__m256; M] {
    let p = _mm256_add_ps(m[1], m[2]);
    let q = _mm256_sub_ps(m[1], m[2]);
    let r = _mm256_add_ps(m[3], m[4]);
    let s = _mm256_sub_ps(m[3], m[4]);
    [
        _mm256_add_ps(_mm256_add_ps(m[0], p), r),
        _mm256_fmadd_ps(_mm256_set1_ps(2.0), s, q),
        _mm256_fmadd_ps(_mm256_set1_ps(4.0), r, p),
        _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8.0), s, q), m[5]),
    ]
}

/// Transposes the 4x4 block in each 128-bit half: element `q` of vector `l` becomes
/// element `l` of vector `q`.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn transpose4(c: [__m256; 4]) -> [__m256; 4] {
    let t0 = _mm256_unpacklo_ps(c[0], c[1]);
    let t1 = _mm256_unpackhi_ps(c[0], c[1]);
    let t2 = _mm256_unpacklo_ps(c[2], c[3]);
    let t3 = _mm256_unpackhi_ps(c[2], c[3]);
    [
        _mm256_shuffle_ps::<0x44>(t0, t2),
        _mm256_shuffle_ps::<0xEE>(t0, t2),
        _mm256_shuffle_ps::<0x44>(t1, t3),
        _mm256_shuffle_ps::<0xEE>(t1, t3),
    ]
}

#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn load4(s: &[f32]) -> __m128 {
    assert!(s.len() >= 4);
    // SAFETY: four values, checked above.
    unsafe { _mm_loadu_ps(s.as_ptr()) }
}

#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn load8(s: &[f32]) -> __m256 {
    assert!(s.len() >= LANES);
    // SAFETY: eight values, checked above.
    unsafe { _mm256_loadu_ps(s.as_ptr()) }
}

#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn store4(d: &mut [f32], v: __m128) {
    assert!(d.len() >= 4);
    // SAFETY: four values, checked above.
    unsafe { _mm_storeu_ps(d.as_mut_ptr(), v) }
}

#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn store8(d: &mut [f32], v: __m256) {
    assert!(d.len() >= LANES);
    // SAFETY: eight values, checked above.
    unsafe { _mm256_storeu_ps(d.as_mut_ptr(), v) }
}
