//! The generated C against Spore's own outputs: each network generated, built with a
//! strict C99 compiler (malloc, calloc, realloc and free wrapped to abort), run, and
//! compared; the library's objects checked for allocation, printing and mutable state.

mod build;
mod errors;
mod fp32;
mod graph;
mod int8;
mod operators;

use std::path::PathBuf;

/// A fresh, empty temporary folder for one test.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spore_codegen_{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The bundled MNIST digits.
pub fn bundled(split: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/mnist")
        .join(split)
}
