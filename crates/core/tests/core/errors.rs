//! User mistakes give errors that name the operator, the input types and the caller's
//! source line; nothing panics.

use spore_core::ops::{Conv2dOptions, Pool2dOptions};
use spore_core::{DType, Tensor};

#[test]
fn matmul_shape_mismatch_names_op_shapes_and_line() {
    let a = Tensor::zeros(&[2, 3], DType::F32).unwrap();
    let b = Tensor::zeros(&[4, 5], DType::F32).unwrap();
    let line = line!() + 1;
    let err = a.matmul(&b).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("MatMul"), "{msg}");
    assert!(msg.contains("[2, 3]") && msg.contains("[4, 5]"), "{msg}");
    assert!(msg.contains(&format!("{}:{line}", file!())), "{msg}");
}

#[test]
fn dtype_mismatch_suggests_a_cast() {
    let a = Tensor::zeros(&[2], DType::F32).unwrap();
    let b = Tensor::zeros(&[2], DType::I32).unwrap();
    let msg = a.add(&b).unwrap_err().to_string();
    assert!(
        msg.contains("Add")
            && msg.contains("Float32")
            && msg.contains("Int32")
            && msg.contains("cast"),
        "{msg}"
    );
}

#[test]
fn invalid_arguments_are_errors_not_panics() {
    let x = Tensor::zeros(&[2, 3], DType::F32).unwrap();
    assert!(x.reshape(&[4]).unwrap_err().to_string().contains("Reshape"));
    assert!(
        x.sum(&[2], false)
            .unwrap_err()
            .to_string()
            .contains("axis 2")
    );
    assert!(x.sum(&[0, -2], false).is_err());
    assert!(x.permute(&[0, 0]).is_err());
    assert!(x.broadcast_to(&[3, 3]).is_err());
    assert!(x.strided_slice(&[0, 0], &[2, 3], &[1, 0]).is_err());
    assert!(x.log().is_ok());
    assert!(
        Tensor::zeros(&[2], DType::I32)
            .unwrap()
            .exp()
            .unwrap_err()
            .to_string()
            .contains("Float32")
    );
    assert!(
        x.conv2d(
            &Tensor::zeros(&[1, 1, 3, 3], DType::F32).unwrap(),
            &Conv2dOptions::default()
        )
        .is_err()
    );
    let img = Tensor::zeros(&[1, 2, 4, 4], DType::F32).unwrap();
    assert!(
        img.conv2d(
            &Tensor::zeros(&[1, 2, 5, 5], DType::F32).unwrap(),
            &Conv2dOptions::default()
        )
        .unwrap_err()
        .to_string()
        .contains("does not fit")
    );
    assert!(
        img.conv2d(
            &Tensor::zeros(&[3, 1, 3, 3], DType::F32).unwrap(),
            &Conv2dOptions::default().groups(2)
        )
        .is_err()
    );
    assert!(img.max_pool2d(&Pool2dOptions::new(5, 1)).is_err());
    assert!(img.max_pool2d(&Pool2dOptions::new(2, 0)).is_err());
    let idx = Tensor::from_vec(vec![0i32, 7], &[2]).unwrap();
    let msg = x.gather(&idx, 1).unwrap_err().to_string();
    assert!(msg.contains("Gather") && msg.contains("index 7"), "{msg}");
    assert!(
        x.gather(&Tensor::zeros(&[1], DType::F32).unwrap(), 0)
            .is_err()
    );
    assert!(Tensor::from_vec(vec![1.0f32; 5], &[2, 3]).is_err());
    assert!(Tensor::arange(0.0, 1.0, 0.0, DType::F32).is_err());
    assert!(x.item().is_err());
    assert!(x.to_vec::<i32>().is_err());
    assert!(Tensor::concat(&[], 0).is_err());
    assert!(Tensor::concat(&[&x, &Tensor::zeros(&[3, 3], DType::F32).unwrap()], 1).is_err());
    assert!(x.dropout(1.5, true).is_err());
    assert!(x.squeeze(&[0]).is_err());
    assert!(Tensor::rand(&[2], DType::I32, Some(1)).is_err());
}

#[test]
fn errors_from_composites_point_at_the_user() {
    let x = Tensor::zeros(&[2, 3], DType::F32).unwrap();
    let line = line!() + 1;
    let err = x.softmax(5).unwrap_err();
    assert_eq!(err.location().map(|l| l.line()), Some(line), "{err}");
}

/// The compiler-built products check their extra operand: an addend of another shape, a
/// bias of the wrong length, a mask of another dtype, integer matrices and batched
/// operands are errors that name the op and say what was expected.
#[test]
fn product_epilogue_ops_reject_mismatched_operands() {
    use spore_core::op::Op;
    let apply = |op: Op, args: &[&Tensor]| {
        spore_core::apply::apply(op, args, std::panic::Location::caller())
            .unwrap_err()
            .to_string()
    };
    let add = Op::MatMulAdd {
        beta_bits: 0.9f64.to_bits(),
    };
    let bias = Op::MatMulBias { relu: true };
    let (a, b) = (
        Tensor::zeros(&[2, 3], DType::F32).unwrap(),
        Tensor::zeros(&[3, 5], DType::F32).unwrap(),
    );
    let msg = apply(
        add.clone(),
        &[&a, &b, &Tensor::zeros(&[5, 2], DType::F32).unwrap()],
    );
    assert!(msg.contains("MatMulAdd") && msg.contains("addend"), "{msg}");
    let msg = apply(
        bias.clone(),
        &[&a, &b, &Tensor::zeros(&[3], DType::F32).unwrap()],
    );
    assert!(
        msg.contains("MatMulBiasAddReLU") && msg.contains("[5]"),
        "{msg}"
    );
    let ints = Tensor::zeros(&[2, 3], DType::I32).unwrap();
    let msg = apply(
        add,
        &[&ints, &Tensor::zeros(&[3, 5], DType::I32).unwrap(), &ints],
    );
    assert!(msg.contains("float matrices"), "{msg}");
    let batched = Tensor::zeros(&[4, 2, 3], DType::F32).unwrap();
    let msg = apply(
        bias,
        &[&batched, &b, &Tensor::zeros(&[5], DType::F32).unwrap()],
    );
    assert!(msg.contains("float matrices"), "{msg}");
    let mask_f64 = Tensor::zeros(&[2, 5], DType::F64).unwrap();
    let msg = apply(Op::MatMulReluGrad, &[&a, &b, &mask_f64]);
    assert!(
        msg.contains("MatMulReluGrad") && msg.contains("mask") && msg.contains("Float64"),
        "{msg}"
    );
}

/// The options added for ONNX and MindSpore parity reject what they cannot do, naming
/// the operator and what was wrong.
#[test]
fn operator_options_reject_bad_arguments() {
    use spore_core::ops::{self, ConvTranspose2dOptions, PaddingMode, StridedSliceMasks};
    let x = Tensor::zeros(&[2, 3], DType::F32).unwrap();
    let msg = |r: spore_core::Result<Tensor>| r.unwrap_err().to_string();
    let m = msg(x.pad_with(&[(0, 0), (3, 0)], PaddingMode::Reflect));
    assert!(
        m.contains("Pad") && m.contains("smaller than its length 3"),
        "{m}"
    );
    let m = msg(x.pad_with(&[(-2, -1), (0, 0)], PaddingMode::Replicate));
    assert!(m.contains("cropping"), "{m}");
    assert!(
        msg(x.pad_with(&[(1, 1)], PaddingMode::Constant(0.0))).contains("2 (before, after) pairs")
    );
    let m = msg(x.reshape_infer(&[-1, -1]));
    assert!(
        m.contains("Reshape") && m.contains("more than one -1"),
        "{m}"
    );
    assert!(msg(x.reshape_infer(&[4, -1])).contains("not a multiple of 4"));
    let both = StridedSliceMasks {
        ellipsis_mask: 0b11,
        ..Default::default()
    };
    assert!(
        msg(ops::strided_slice(&x, &[0, 0], &[1, 1], &[1, 1], &both)).contains("more than one bit")
    );
    let shrink = StridedSliceMasks {
        shrink_axis_mask: 0b1,
        ..Default::default()
    };
    assert!(msg(ops::strided_slice(&x, &[2], &[3], &[1], &shrink)).contains("index 2 of axis 0"));
    let idx = Tensor::zeros(&[3], DType::I32).unwrap();
    let on = Tensor::ones(&[2], DType::F32).unwrap();
    let off = Tensor::scalar(0.0f32);
    assert!(msg(idx.one_hot_with(4, &on, &off, -1)).contains("must be scalars"));
    assert!(msg(idx.one_hot_with(4, &Tensor::scalar(1i32), &off, -1)).contains("share a dtype"));
    assert!(msg(idx.one_hot_with(4, &off, &off, 2)).contains("out of range"));
    let v = Tensor::zeros(&[3], DType::F32).unwrap();
    assert!(msg(v.matmul_t(&x, true, false)).contains("rank >= 2"));
    assert!(msg(ops::batch_matmul(&x, &x, false, true)).contains("rank >= 3"));
    assert!(msg(Tensor::scalar(1.0f32).matmul(&v)).contains("MatMul"));
    let img = Tensor::zeros(&[1, 2, 3, 3], DType::F32).unwrap();
    let w = Tensor::zeros(&[2, 1, 3, 3], DType::F32).unwrap();
    let huge = ConvTranspose2dOptions {
        stride: [1 << 62, 1],
        ..Default::default()
    };
    assert!(msg(img.conv_transpose2d(&w, &huge)).contains("overflows"));
    let wrong = Tensor::zeros(&[3, 1, 3, 3], DType::F32).unwrap();
    assert!(msg(img.conv_transpose2d(&wrong, &Default::default())).contains("Conv2DBackpropInput"));
}
