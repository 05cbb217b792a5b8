//! Which x86-64 vector instruction sets the kernels may use: what the CPU reports
//! (detected once), capped by the environment variable `SPORE_MAX_ISA`.
//!
//! ```
//! use spore_kernels::isa::{self, Isa};
//! // On any machine the level is at most what was detected; Spore's kernels ask here.
//! assert!(isa::level() <= isa::detected());
//! if isa::allows(Isa::Avx2) {
//!     // AVX2 and FMA kernels may run.
//! }
//! ```
//!
//! Why a cap: machines differ (Zen 4 with AVX-512 and AVX512_BF16, older ones with AVX2
//! only), and every kernel must be fast and correct on each. `SPORE_MAX_ISA=avx2` runs the
//! AVX2 kernels on an AVX-512 machine, for the tests of those paths and for measuring what
//! an AVX2-only CPU would run (the same code; not the same clock or caches). It works like
//! oneDNN's `ONEDNN_MAX_CPU_ISA`. Values: `avx512_bf16`, `avx512`, `avx2`, `baseline`
//! (case-insensitive). Two libraries detect their own instructions and are not capped:
//! the `gemm` crate, which the products fall back on below AVX2, and the `half` crate's
//! per-value float16 conversions (F16C where the CPU has it; below AVX2 Spore's own
//! float16 loops take `half`'s software conversions instead).

use std::sync::OnceLock;

/// A level of x86-64 vector support, each including the ones before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// SSE2 only: plain loops, the compiler's own vectorisation.
    Baseline,
    /// AVX2, FMA and F16C (256-bit lanes).
    Avx2,
    /// AVX-512 F, VL, DQ and BW, with everything of [`Isa::Avx2`] (512-bit lanes).
    Avx512,
    /// [`Isa::Avx512`] with AVX512_BF16 (bfloat16 dot products).
    Avx512Bf16,
}

impl Isa {
    const ALL: [Isa; 4] = [Isa::Baseline, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16];

    /// The name `SPORE_MAX_ISA` takes for this level.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Baseline => "baseline",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Avx512Bf16 => "avx512_bf16",
        }
    }

    /// The level named `name` (case-insensitive), or an error that lists the names.
    pub fn parse(name: &str) -> Result<Isa, String> {
        let wanted = name.trim().to_ascii_lowercase();
        Isa::ALL
            .into_iter()
            .find(|isa| isa.name() == wanted)
            .ok_or_else(|| {
                let names: Vec<&str> = Isa::ALL.iter().map(|isa| isa.name()).collect();
                format!(
                    "SPORE_MAX_ISA: expected one of {}, found {name:?}",
                    names.join(", ")
                )
            })
    }
}

/// The widest level this CPU supports (checked once).
pub fn detected() -> Isa {
    static DETECTED: OnceLock<Isa> = OnceLock::new();
    *DETECTED.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Isa {
    use std::arch::is_x86_feature_detected as has;
    if !(has!("avx2") && has!("fma") && has!("f16c")) {
        return Isa::Baseline;
    }
    if !(has!("avx512f") && has!("avx512vl") && has!("avx512dq") && has!("avx512bw")) {
        return Isa::Avx2;
    }
    if !has!("avx512bf16") {
        return Isa::Avx512;
    }
    Isa::Avx512Bf16
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Isa {
    Isa::Baseline
}

/// The level the kernels use: [`detected`], lowered to `SPORE_MAX_ISA` where that is set
/// (read once). A value that names no level is reported on stderr once and ignored, so a
/// typo cannot stop a run; a cap above the CPU's level changes nothing.
pub fn level() -> Isa {
    static LEVEL: OnceLock<Isa> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let Ok(asked) = std::env::var("SPORE_MAX_ISA") else {
            return detected();
        };
        match Isa::parse(&asked) {
            Ok(cap) => cap.min(detected()),
            Err(message) => {
                eprintln!(
                    "spore: {message}; using what the CPU has ({})",
                    detected().name()
                );
                detected()
            }
        }
    })
}

/// Whether kernels needing `isa` may run: the CPU has it and the cap allows it.
pub fn allows(isa: Isa) -> bool {
    level() >= isa
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_errors_list_the_choices() {
        for isa in Isa::ALL {
            assert_eq!(Isa::parse(isa.name()), Ok(isa));
            assert_eq!(Isa::parse(&isa.name().to_uppercase()), Ok(isa));
        }
        let error = Isa::parse("avx1024").unwrap_err();
        assert!(
            error.contains("avx1024") && error.contains("baseline, avx2, avx512, avx512_bf16"),
            "{error}"
        );
    }

    #[test]
    fn levels_are_ordered_and_capped_by_the_cpu() {
        assert!(Isa::Baseline < Isa::Avx2 && Isa::Avx2 < Isa::Avx512);
        assert!(Isa::Avx512 < Isa::Avx512Bf16);
        assert!(level() <= detected());
        assert!(allows(Isa::Baseline));
    }

    /// Under `SPORE_MAX_ISA` (as `scripts/test.sh` runs the kernels' tests), the cap took
    /// effect: a misspelt cap fails here instead of rerunning the widest paths unseen.
    #[test]
    fn the_cap_in_the_environment_is_the_level() {
        let Ok(asked) = std::env::var("SPORE_MAX_ISA") else {
            return;
        };
        let cap = Isa::parse(&asked).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(level(), cap.min(detected()));
        eprintln!(
            "SPORE_MAX_ISA={asked}: kernels at {} (CPU: {})",
            level().name(),
            detected().name()
        );
    }
}
