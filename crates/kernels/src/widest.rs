//! `widest!`: a function compiled once per x86-64 vector width (AVX-512, AVX2, the
//! baseline) and dispatched by run-time detection ([`crate::isa`]), so a plain loop in its body
//! vectorises as wide as the CPU allows. The arithmetic is the same in each copy (no
//! fused multiply-adds are formed), so results do not depend on the machine.
//!
//! ```ignore
//! widest! {
//!     /// `dst[i] = 2 · src[i]`
//!     fn double(src: &[f32], dst: &mut [f32]) {
//!         for (d, &s) in dst.iter_mut().zip(src) { *d = 2.0 * s; }
//!     }
//! }
//! ```

macro_rules! widest {
    ($(#[$doc:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$doc])*
        $vis fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn each($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                fn wide($($arg: $ty),*) {
                    each($($arg),*)
                }
                #[target_feature(enable = "avx2")]
                fn narrow($($arg: $ty),*) {
                    each($($arg),*)
                }
                if crate::isa::allows(crate::isa::Isa::Avx512) {
                    // SAFETY: the CPU has AVX-512F (`isa` checked it).
                    return unsafe { wide($($arg),*) };
                }
                if crate::isa::allows(crate::isa::Isa::Avx2) {
                    // SAFETY: the CPU has AVX2 (`isa` checked it).
                    return unsafe { narrow($($arg),*) };
                }
            }
            each($($arg),*)
        }
    };
}

pub(crate) use widest;
