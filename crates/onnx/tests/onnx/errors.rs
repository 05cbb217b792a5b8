//! Bad models are errors that say what is wrong, never panics.

use prost::Message;
use spore_core::{DType, Tensor};
use spore_nn::prelude::*;
use spore_onnx::proto::{GraphProto, ModelProto, NodeProto, OperatorSetIdProto, ValueInfoProto};

fn model(op: &str, opset: i64) -> ModelProto {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
        }],
        graph: Some(GraphProto {
            name: "g".into(),
            node: vec![NodeProto {
                name: "n0".into(),
                op_type: op.into(),
                input: vec!["x".into()],
                output: vec!["y".into()],
                ..Default::default()
            }],
            input: vec![ValueInfoProto {
                name: "x".into(),
                ..Default::default()
            }],
            output: vec![ValueInfoProto {
                name: "y".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn an_unsupported_operator_names_the_node_its_type_and_the_opset() {
    let net =
        spore_onnx::import_bytes(&model("NonMaxSuppression", 17).encode_to_vec(), None).unwrap();
    let err = net
        .call1(&Tensor::ones(&[2], DType::F32).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"n0\"") && err.contains("NonMaxSuppression") && err.contains("opset 17"),
        "{err}"
    );
}

#[test]
fn an_unsupported_attribute_value_is_named() {
    let mut m = model("AveragePool", 17);
    let g = m.graph.as_mut().unwrap();
    g.node[0].attribute = vec![
        spore_onnx::proto::AttributeProto {
            name: "kernel_shape".into(),
            ints: vec![2, 2],
            r#type: 7,
            ..Default::default()
        },
        spore_onnx::proto::AttributeProto {
            name: "dilations".into(),
            ints: vec![2, 2],
            r#type: 7,
            ..Default::default()
        },
        spore_onnx::proto::AttributeProto {
            name: "count_include_pad".into(),
            i: 1,
            r#type: 2,
            ..Default::default()
        },
    ];
    let net = spore_onnx::import_bytes(&m.encode_to_vec(), None).unwrap();
    let err = net
        .call1(&Tensor::ones(&[1, 1, 4, 4], DType::F32).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("dilated pooling"), "{err}");
    // An attribute the importer does not read is named, not ignored.
    let mut m = model("Relu", 17);
    m.graph.as_mut().unwrap().node[0].attribute = vec![spore_onnx::proto::AttributeProto {
        name: "alpha".into(),
        f: 0.5,
        r#type: 1,
        ..Default::default()
    }];
    let net = spore_onnx::import_bytes(&m.encode_to_vec(), None).unwrap();
    let err = net
        .call1(&Tensor::ones(&[2], DType::F32).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("attribute \"alpha\" is not supported") && err.contains("Relu"),
        "{err}"
    );
}

#[test]
fn malformed_files_are_errors() {
    assert!(spore_onnx::import_bytes(b"not a model", None).is_err());
    let Err(err) = spore_onnx::import_bytes(&model("Relu", 30).encode_to_vec(), None) else {
        panic!("opset 30 imported");
    };
    assert!(err.to_string().contains("opset 30"), "{err}");
    // Every truncation and many byte flips of a valid model: an error or a model, never a panic.
    let bytes = model("Relu", 17).encode_to_vec();
    for n in 0..bytes.len() {
        let _ = spore_onnx::import_bytes(&bytes[..n], None);
    }
    for i in 0..bytes.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] ^= flip;
            if let Ok(net) = spore_onnx::import_bytes(&b, None) {
                let _ = net.call(&[Tensor::ones(&[3], DType::F32).unwrap()]);
            }
        }
    }
}
