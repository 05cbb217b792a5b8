//! Resource errors: a shape whose size overflows, or that needs more memory than the
//! machine has, is a `Result` error naming the operator, the shape and the bytes, in
//! eager execution and while tracing a graph, never an abort.

use spore_core::tensor::TensorType;
use spore_core::{DType, Error, Tensor, trace};

fn op_error(e: &Error) -> (&str, &str) {
    match e {
        Error::Op { op, message, .. } => (op, message),
        other => panic!("expected an operator error, got {other:?}"),
    }
}

#[test]
fn an_output_whose_size_overflows_is_an_error_naming_the_op() {
    let x = Tensor::ones(&[1, 1], DType::F32).unwrap();
    let err = x.broadcast_to(&[1 << 40, 1 << 40]).unwrap_err();
    let (op, message) = op_error(&err);
    assert_eq!(op, "BroadcastTo");
    assert!(
        message.contains("overflows") && message.contains("[1099511627776, 1099511627776]"),
        "{message}"
    );
    // Reshape's target size overflows while being computed: an error, not a panic.
    let err = x.reshape(&[1 << 40, 1 << 40]).unwrap_err().to_string();
    assert!(err.contains("more than 2^64"), "{err}");
}

#[test]
fn an_output_larger_than_the_memory_available_is_an_error_with_its_bytes() {
    let x = Tensor::ones(&[1], DType::F32).unwrap();
    // 2^50 f32 values: 4 PiB, more than any machine this runs on.
    let err = x.broadcast_to(&[1 << 50]).unwrap_err();
    let (op, message) = op_error(&err);
    assert_eq!(op, "BroadcastTo");
    assert!(
        message.contains("needs 4503599627370496 bytes") && message.contains("available"),
        "{message}"
    );
    // The error names the caller's line, as every op error does.
    assert!(err.to_string().contains("resources.rs"), "{err}");
}

#[test]
fn creation_functions_check_their_size() {
    for err in [
        Tensor::zeros(&[1 << 62, 8], DType::F64).unwrap_err(),
        Tensor::full(&[1 << 50], 2.0, DType::F32).unwrap_err(),
        Tensor::randn(&[1 << 50], DType::F32, Some(1)).unwrap_err(),
        Tensor::rand(&[usize::MAX, 2], DType::F32, Some(1)).unwrap_err(),
        Tensor::eye(1 << 33, DType::F32).unwrap_err(),
        Tensor::arange(0.0, 1e300, 1.0, DType::F32).unwrap_err(),
    ] {
        let message = err.to_string();
        assert!(
            message.contains("overflows") || message.contains("bytes"),
            "{message}"
        );
    }
    assert!(Tensor::from_vec(vec![1.0f32], &[1 << 40, 1 << 40]).is_err());
}

#[test]
fn tracing_a_graph_with_an_oversized_value_is_an_error() {
    let types = [TensorType::new(&[2, 1], DType::F32)];
    let err = trace::trace("huge", &types, |a| {
        Ok(vec![a[0].broadcast_to(&[2, 1 << 50])?])
    })
    .unwrap_err();
    let (op, message) = op_error(&err);
    assert_eq!(op, "BroadcastTo");
    assert!(message.contains("bytes"), "{message}");
}
