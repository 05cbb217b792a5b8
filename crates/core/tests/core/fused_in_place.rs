//! A fused program written into the buffer of one of its inputs (the executor lends the
//! buffer of an argument that dies there) gives the bits it gives into a fresh buffer,
//! whether its last instruction reads that input from the result's own chunk (an
//! optimizer's `w - lr * m` over `w`, a `Sub` on either side) or a register holds a copy
//! (the input read twice, or before the last instruction).

use spore_core::apply::apply;
use spore_core::op::Op;
use spore_core::prims::fused::{FusedInstr, FusedProgram};
use spore_core::prims::in_place::EvalContext;
use spore_core::{DType, Tensor};
use spore_kernels::{BinaryFn, UnaryFn};

/// `program` on three inputs of `n` values, once into a fresh buffer and once into input
/// `lent`'s buffer; both results' bits must agree.
fn lent_equals_fresh(instrs: Vec<FusedInstr>, lent: usize, what: &str) {
    // 5,000 values: ten chunks (two thread blocks), the last one short.
    let n = 5000;
    let inputs: Vec<Tensor> = (0..3)
        .map(|s| Tensor::randn(&[n], DType::F32, Some(20 + s)).unwrap())
        .collect();
    let op = Op::Fused(FusedProgram {
        num_inputs: 3,
        instrs,
        compute: DType::F32,
        out_dtype: DType::F32,
    });
    let here = std::panic::Location::caller();
    let args: Vec<&Tensor> = inputs.iter().collect();
    let fresh = apply(op.clone(), &args, here).unwrap();

    // A copy of the lent input that nobody else holds, so that its buffer can be taken.
    let mut lent_value = Tensor::from_vec(inputs[lent].to_vec::<f32>().unwrap(), &[n]).unwrap();
    let mut ctx = EvalContext::default();
    assert!(ctx.lend(lent, &mut lent_value), "{what}: buffer not lent");
    let mut args: Vec<&Tensor> = inputs.iter().collect();
    args[lent] = &lent_value;
    let written = spore_core::apply::apply_in_graph(&op, &args, here, &mut ctx).unwrap();
    assert!(
        ctx.reclaim().is_none(),
        "{what}: the op did not take the lent buffer"
    );

    let bits = |t: &Tensor| -> Vec<u32> {
        t.to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    };
    assert_eq!(bits(&written), bits(&fresh), "{what}");
}

#[test]
fn a_program_written_over_its_input_equals_one_written_apart() {
    let sub = |a, b| FusedInstr::Binary(BinaryFn::Sub, a, b);
    let mul_add = |c| FusedInstr::MulAdd {
        a: 0,
        b: 1,
        c,
        subtract: true,
    };
    lent_equals_fresh(vec![mul_add(2)], 2, "w - lr * m over w");
    lent_equals_fresh(
        vec![FusedInstr::Unary(UnaryFn::Exp, 0), sub(2, 3)],
        2,
        "lent input on the left of the last Sub",
    );
    lent_equals_fresh(
        vec![FusedInstr::Unary(UnaryFn::Exp, 0), sub(3, 2)],
        2,
        "lent input on the right of the last Sub",
    );
    lent_equals_fresh(vec![sub(2, 2)], 2, "lent input read twice");
    lent_equals_fresh(
        vec![FusedInstr::Unary(UnaryFn::Neg, 2), mul_add(3)],
        2,
        "lent input read before the last instruction",
    );
    lent_equals_fresh(vec![mul_add(2)], 0, "lent input as a factor");
}
