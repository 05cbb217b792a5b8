//! ONNX import and export: the format between frameworks (PyTorch's `torch.onnx.export`,
//! onnxruntime, MindSpore's `export(..., file_format='ONNX')`). [`import`] turns a model
//! into a Spore cell that runs in both modes and trains; [`export`] writes a Spore
//! network's inference graph at opset 17 with Spore's scope names as node names.
//!
//! ```no_run
//! use spore_core::{DType, TensorType};
//! use spore_nn::prelude::*;
//! let net = LeNet5::new(10).unwrap();
//! spore_onnx::export(&*net, &[TensorType::new(&[1, 1, 32, 32], DType::F32)], "lenet.onnx".as_ref()).unwrap();
//! let back = spore_onnx::import("lenet.onnx".as_ref()).unwrap();
//! ```
//!
//! The schema (`proto`) is generated from ONNX's `onnx.proto` by
//! `scripts/generate_onnx_proto.sh` and committed, so building needs no `protoc`.

#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod api;
pub mod convert;
pub mod export;
pub mod import;
pub mod ops;
pub mod tensor;

/// ONNX's protobuf messages (generated; see the crate docs).
#[allow(clippy::all, missing_docs)]
pub mod proto {
    include!("onnx_proto.rs");
}

pub use export::export;
pub use import::{OnnxNetwork, import, import_bytes};
