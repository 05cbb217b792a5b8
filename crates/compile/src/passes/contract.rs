//! Multiply-add contraction (the `contract` stage): in every fused program, a `Mul`
//! read only by an `Add` or `Sub` becomes part of it ([`FusedInstr::MulAdd`]), so that a
//! chunk goes through L1 once for both. Why: each instruction is a pass over a chunk, and
//! for memory-bound programs such as Momentum's `m * 0.9 + g` the second pass is a large
//! share of the loop (BENCHMARKS.md, "Seven rounds ago").
//!
//! ```
//! use spore_compile::passes::contract::contracted;
//! use spore_core::prims::fused::{FusedInstr, FusedProgram};
//! use spore_core::DType;
//! use spore_kernels::BinaryFn;
//! // Momentum's moment update, m * 0.9 + g: registers 0 (m), 1 (0.9), 2 (g).
//! let p = FusedProgram {
//!     num_inputs: 3,
//!     instrs: vec![FusedInstr::Binary(BinaryFn::Mul, 0, 1), FusedInstr::Binary(BinaryFn::Add, 3, 2)],
//!     compute: DType::F32,
//!     out_dtype: DType::F32,
//! };
//! let merged = FusedInstr::MulAdd { a: 0, b: 1, c: 2, subtract: false };
//! assert_eq!(contracted(&p).instrs, vec![merged]);
//! ```

use spore_core::Result;
use spore_core::ir::{Graph, NodeKind};
use spore_core::op::Op;
use spore_core::prims::fused::{FusedInstr, FusedProgram};
use spore_kernels::BinaryFn;

use crate::pass::Pass;

/// The `contract` stage: contracts every `FusedElementwise` and `FusedReduceSum` program.
pub struct Contract;

impl Pass for Contract {
    fn name(&self) -> &'static str {
        "contract"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut changed = false;
        for node in &mut g.nodes {
            let NodeKind::Op { op, .. } = &mut node.kind else {
                continue;
            };
            let program = match op {
                Op::Fused(p) | Op::FusedReduceSum { program: p, .. } => p,
                _ => continue,
            };
            let c = contracted(program);
            if c.instrs.len() != program.instrs.len() {
                *program = c;
                changed = true;
            }
        }
        Ok(changed)
    }
}

/// The same program with every `Mul` whose only reader is an `Add` or `Sub` merged into
/// it as one [`FusedInstr::MulAdd`] (results are bit for bit the same: the product is
/// rounded before the sum, as the two instructions did).
pub fn contracted(program: &FusedProgram) -> FusedProgram {
    let this = program;
    // A 16-bit program rounds each step's result itself; it gains nothing from merging.
    if this.compute.is_half() {
        return this.clone();
    }
    let n = this.num_inputs;
    let mut readers = vec![0usize; n + this.instrs.len()];
    for ins in &this.instrs {
        for r in ins.operands() {
            readers[r] += 1;
        }
    }
    // The product register `r` can be merged when only one instruction reads it, once
    // (so never the result, which nothing reads, nor an operand read twice).
    let mergeable = |r: usize| {
        r >= n
            && readers[r] == 1
            && matches!(this.instrs[r - n], FusedInstr::Binary(BinaryFn::Mul, ..))
    };
    let mut merged = vec![false; this.instrs.len()];
    let mut fused: Vec<Option<FusedInstr>> = vec![None; this.instrs.len()];
    for (k, ins) in this.instrs.iter().enumerate() {
        let FusedInstr::Binary(f @ (BinaryFn::Add | BinaryFn::Sub), x, y) = *ins else {
            continue;
        };
        // `p + c`, `c + p` and `c - p` merge; `p - c` would need a third form.
        let (product, other) = match f {
            BinaryFn::Add if mergeable(x) => (x, y),
            BinaryFn::Add if mergeable(y) => (y, x),
            BinaryFn::Sub if mergeable(y) => (y, x),
            _ => continue,
        };
        let FusedInstr::Binary(BinaryFn::Mul, a, b) = this.instrs[product - n] else {
            continue;
        };
        merged[product - n] = true;
        fused[k] = Some(FusedInstr::MulAdd {
            a,
            b,
            c: other,
            subtract: f == BinaryFn::Sub,
        });
    }
    // Renumber: instruction k's register moves down by the merged ones before it.
    let mut new_reg: Vec<usize> = (0..n).collect();
    let mut instrs = Vec::with_capacity(this.instrs.len());
    for (k, ins) in this.instrs.iter().enumerate() {
        if merged[k] {
            new_reg.push(usize::MAX); // read by nobody but its merged reader
            continue;
        }
        let ins = fused[k].as_ref().unwrap_or(ins);
        instrs.push(ins.renumbered(|r| new_reg[r]));
        new_reg.push(n + instrs.len() - 1);
    }
    FusedProgram {
        num_inputs: n,
        instrs,
        compute: this.compute,
        out_dtype: this.out_dtype,
    }
}

#[cfg(test)]
mod tests {
    use spore_kernels::{BinaryFn, DType, UnaryFn};

    use spore_core::Tensor;
    use spore_core::apply::apply;
    use spore_core::op::Op;
    use spore_core::prims::fused::{FusedInstr as I, FusedProgram};

    use super::contracted;

    fn program(num_inputs: usize, instrs: Vec<I>) -> FusedProgram {
        FusedProgram {
            num_inputs,
            instrs,
            compute: DType::F32,
            out_dtype: DType::F32,
        }
    }

    /// Runs `p` on three inputs: two of 1,500 values (three chunks) and a scalar.
    fn run(p: &FusedProgram) -> Vec<f32> {
        let n = 1500;
        let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 3.1).collect();
        let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos() / 7.0).collect();
        let a = Tensor::from_vec(a, &[3, 500]).unwrap();
        let b = Tensor::from_vec(b, &[3, 500]).unwrap();
        let s = Tensor::from_vec(vec![0.9f32], &[]).unwrap();
        let inputs = [&a, &b, &s];
        let out = apply(
            Op::Fused(p.clone()),
            &inputs[..p.num_inputs],
            std::panic::Location::caller(),
        );
        out.unwrap().to_vec::<f32>().unwrap()
    }

    /// The contracted program has `expected` instructions and the same bits as `p`.
    fn check(p: FusedProgram, expected: usize) {
        let c = contracted(&p);
        assert_eq!(
            c.instrs.len(),
            expected,
            "{:?} became {:?}",
            p.instrs,
            c.instrs
        );
        let (want, got) = (run(&p), run(&c));
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&want),
            bits(&got),
            "{:?} became {:?}",
            p.instrs,
            c.instrs
        );
    }

    #[test]
    fn momentum_updates_become_one_instruction_each() {
        // m * 0.9 + g, and w - m * lr (registers: 0 = a, 1 = b, 2 = the scalar).
        check(
            program(
                3,
                vec![
                    I::Binary(BinaryFn::Mul, 0, 2),
                    I::Binary(BinaryFn::Add, 3, 1),
                ],
            ),
            1,
        );
        check(
            program(
                3,
                vec![
                    I::Binary(BinaryFn::Mul, 1, 2),
                    I::Binary(BinaryFn::Sub, 0, 3),
                ],
            ),
            1,
        );
        // The product as the second operand of an add.
        check(
            program(
                3,
                vec![
                    I::Binary(BinaryFn::Mul, 0, 1),
                    I::Binary(BinaryFn::Add, 2, 3),
                ],
            ),
            1,
        );
    }

    #[test]
    fn later_registers_are_renumbered() {
        // relu(a * b + s) - exp(a): the merged product shifts every later register.
        let p = program(
            3,
            vec![
                I::Unary(UnaryFn::Exp, 0),
                I::Binary(BinaryFn::Mul, 0, 1),
                I::Binary(BinaryFn::Add, 4, 2),
                I::Unary(UnaryFn::Relu, 5),
                I::Binary(BinaryFn::Sub, 6, 3),
            ],
        );
        check(p, 4);
        // Two merges in one program: (a * b + s) - a * s.
        let p = program(
            3,
            vec![
                I::Binary(BinaryFn::Mul, 0, 1),
                I::Binary(BinaryFn::Add, 3, 2),
                I::Binary(BinaryFn::Mul, 0, 2),
                I::Binary(BinaryFn::Sub, 4, 5),
            ],
        );
        check(p, 2);
    }

    #[test]
    fn products_that_must_stay_are_kept() {
        // Read twice: a * b + (a * b).
        check(
            program(
                2,
                vec![
                    I::Binary(BinaryFn::Mul, 0, 1),
                    I::Binary(BinaryFn::Add, 2, 2),
                ],
            ),
            2,
        );
        // Read by two instructions: (a * b + a) * (a * b).
        let p = program(
            2,
            vec![
                I::Binary(BinaryFn::Mul, 0, 1),
                I::Binary(BinaryFn::Add, 2, 0),
                I::Binary(BinaryFn::Mul, 3, 2),
            ],
        );
        check(p, 3);
        // Product minus something has no merged form: a * b - a.
        check(
            program(
                2,
                vec![
                    I::Binary(BinaryFn::Mul, 0, 1),
                    I::Binary(BinaryFn::Sub, 2, 0),
                ],
            ),
            2,
        );
        // The product is the result: nothing reads it inside the program.
        check(program(2, vec![I::Binary(BinaryFn::Mul, 0, 1)]), 1);
        // No instructions at all: returned as it is.
        assert!(contracted(&program(0, vec![])).instrs.is_empty());
    }
}
