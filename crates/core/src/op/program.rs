//! The data of a fused elementwise program (what `FusedElementwise` and `FusedReduceSum`
//! carry): its instructions over numbered registers. How it runs is `prims::fused`; how
//! the compiler builds and contracts it is `spore_compile::passes`.
//!
//! ```
//! use spore_core::prims::fused::{FusedInstr, FusedProgram};
//! use spore_core::DType;
//! use spore_kernels::UnaryFn;
//! // exp(x): register 0 is the input, register 1 the result.
//! let p = FusedProgram { num_inputs: 1, instrs: vec![FusedInstr::Unary(UnaryFn::Exp, 0)], compute: DType::F32, out_dtype: DType::F32 };
//! assert_eq!(p.instrs[0].operands().as_slice(), &[0]);
//! ```

use smallvec::SmallVec;
use spore_kernels::{BinaryFn, CompareFn, DType, UnaryFn};

/// One step of a fused program; operands are register numbers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FusedInstr {
    Unary(UnaryFn, usize),
    Binary(BinaryFn, usize, usize),
    Compare(CompareFn, usize, usize),
    /// `cond != 0 ? a : b`
    Select(usize, usize, usize),
    /// `a * b + c` (`subtract: false`) or `c - a * b` (`subtract: true`), the product
    /// rounded first: what a `Mul` read only by an `Add` or `Sub` becomes (see
    /// the compiler's `contract` stage).
    MulAdd {
        a: usize,
        b: usize,
        c: usize,
        subtract: bool,
    },
}

impl FusedInstr {
    /// The registers the instruction reads.
    pub fn operands(&self) -> SmallVec<[usize; 3]> {
        match *self {
            FusedInstr::Unary(_, a) => SmallVec::from_slice(&[a]),
            FusedInstr::Binary(_, a, b) | FusedInstr::Compare(_, a, b) => {
                SmallVec::from_slice(&[a, b])
            }
            FusedInstr::Select(cond, a, b) => SmallVec::from_slice(&[cond, a, b]),
            FusedInstr::MulAdd { a, b, c, .. } => SmallVec::from_slice(&[a, b, c]),
        }
    }

    /// The same instruction reading register `map(r)` for each register `r` it reads.
    pub fn renumbered(&self, map: impl Fn(usize) -> usize) -> FusedInstr {
        match *self {
            FusedInstr::Unary(f, a) => FusedInstr::Unary(f, map(a)),
            FusedInstr::Binary(f, a, b) => FusedInstr::Binary(f, map(a), map(b)),
            FusedInstr::Compare(f, a, b) => FusedInstr::Compare(f, map(a), map(b)),
            FusedInstr::Select(c, a, b) => FusedInstr::Select(map(c), map(a), map(b)),
            FusedInstr::MulAdd { a, b, c, subtract } => FusedInstr::MulAdd {
                a: map(a),
                b: map(b),
                c: map(c),
                subtract,
            },
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FusedProgram {
    pub num_inputs: usize,
    pub instrs: Vec<FusedInstr>,
    /// Float dtype all registers use (F32 or F64); Bool inputs load as 0/1.
    pub compute: DType,
    /// The result's dtype: `compute`, or Bool when the last step is a comparison.
    pub out_dtype: DType,
}
