//! The facade's integration tests: the main job's accuracy bar in both modes, and the
//! `spore` command line.

mod accuracy;
mod bench_harness;
mod cli;
mod codegen;
mod distributed;
mod explain;
mod onnx;
mod summary;
