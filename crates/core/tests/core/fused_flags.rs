//! Fused loops whose `Select`s test a boolean scalar input run with the selections
//! resolved (`prims::fused_flags`): their results must be, bit for bit, those of the same
//! loop reading the flag broadcast to every element (which nothing resolves), for either
//! value of the flag, in float32 and bfloat16 programs, with 16-bit inputs widened, and
//! where the flag picks an input, an earlier instruction, or another selection.

use spore_core::apply::apply;
use spore_core::op::Op;
use spore_core::prims::fused::{FusedInstr, FusedProgram};
use spore_core::{DType, Tensor};
use spore_kernels::{BinaryFn, UnaryFn};

fn run(p: &FusedProgram, inputs: &[&Tensor]) -> Vec<u32> {
    let y = apply(Op::Fused(p.clone()), inputs, std::panic::Location::caller()).unwrap();
    let y = y.cast(DType::F32).unwrap().to_vec::<f32>().unwrap();
    y.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn loops_with_a_scalar_flag_equal_the_loop_reading_it_everywhere() {
    let len = 3000; // several chunks
    let values = |seed: u64| Tensor::randn(&[len], DType::F32, Some(seed)).unwrap();
    let (a, b, c) = (values(1), values(2), values(3));
    let a16 = a.cast(DType::BF16).unwrap();
    let lr = Tensor::scalar(0.25f32);
    let program = |num_inputs: usize, instrs: Vec<FusedInstr>, compute: DType| FusedProgram {
        num_inputs,
        instrs,
        compute,
        out_dtype: compute,
    };
    use FusedInstr::*;
    // (program, inputs before the flag); the flag is the last input.
    let cases: Vec<(FusedProgram, Vec<&Tensor>)> = vec![
        // An optimizer's weight step: flag ? w - m * lr : w.
        (
            program(
                4,
                vec![
                    MulAdd {
                        a: 0,
                        b: 1,
                        c: 2,
                        subtract: true,
                    },
                    Select(3, 4, 2),
                ],
                DType::F32,
            ),
            vec![&a, &lr, &b],
        ),
        // A moment reading a widened bfloat16 gradient: flag ? m * lr + g / lr : m.
        (
            program(
                4,
                vec![
                    Binary(BinaryFn::Div, 0, 1),
                    MulAdd {
                        a: 2,
                        b: 1,
                        c: 4,
                        subtract: false,
                    },
                    Select(3, 5, 2),
                ],
                DType::F32,
            ),
            vec![&a16, &lr, &b],
        ),
        // The flag picks an earlier instruction; the later one is then unread.
        (
            program(
                3,
                vec![
                    Binary(BinaryFn::Add, 0, 1),
                    Unary(UnaryFn::Exp, 3),
                    Select(2, 3, 4),
                ],
                DType::F32,
            ),
            vec![&a, &c],
        ),
        // A selection of a selection, then more work on it.
        (
            program(
                3,
                vec![
                    Binary(BinaryFn::Mul, 0, 1),
                    Select(2, 3, 0),
                    Select(2, 4, 1),
                    Unary(UnaryFn::Relu, 5),
                ],
                DType::F32,
            ),
            vec![&a, &c],
        ),
        // A bfloat16 program, each step rounded.
        (
            program(
                3,
                vec![Binary(BinaryFn::Mul, 0, 1), Select(2, 3, 1)],
                DType::BF16,
            ),
            vec![&a16, &a16],
        ),
    ];
    for (k, (p, inputs)) in cases.iter().enumerate() {
        for flag in [true, false] {
            let scalar = Tensor::scalar(flag);
            let everywhere =
                Tensor::full(&[len], if flag { 1.0 } else { 0.0 }, DType::Bool).unwrap();
            let with = |f: &Tensor| {
                let mut all = inputs.clone();
                all.push(f);
                run(p, &all)
            };
            assert_eq!(with(&scalar), with(&everywhere), "case {k}, flag {flag}");
        }
    }
}
