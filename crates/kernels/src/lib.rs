//! Spore's numeric kernels: loops over typed slices and strided layouts.
//!
//! This crate knows nothing of operators, graphs or gradients; `spore-core` validates
//! shapes and dtypes and then calls these functions, which assume valid arguments.
//!
//! ```
//! use spore_kernels::{elementwise, Buffer, Layout, UnaryFn};
//! let y = elementwise::unary(UnaryFn::Relu, &Buffer::F32(vec![-1.0, 2.0]), &Layout::contiguous(&[2])).unwrap();
//! assert_eq!(y, Buffer::F32(vec![0.0, 2.0]));
//! ```

// A user's input never reaches an `unwrap` or `expect`: the few left in library code are
// on invariants the code guarantees, each allowed where it stands with the reason.
#![deny(clippy::unwrap_used, clippy::expect_used)]

pub mod activation;
pub mod arena;
pub mod bf16_gemm;
pub mod buffer;
pub mod conv;
pub mod dtype;
pub mod elementwise;
pub mod f16_convert;
pub mod finite;
pub mod half_float;
pub mod index;
pub mod isa;
pub mod layout;
pub mod matmul;
pub mod matmul_epilogue;
pub mod norm;
mod operand;
pub mod peak;
pub mod pool;
mod pool2x2;
mod pool_half;
pub mod random;
pub mod reduce;
mod scratch;
mod select;
mod sgemm;
pub mod vmath;
mod widest;

pub use buffer::{Buffer, Element};
pub use dtype::DType;
pub use elementwise::{BinaryFn, CompareFn, Num, UnaryFn};
/// The 16-bit float types (the `half` crate's), for tensors of `DType::F16` and `DType::BF16`.
pub use half::{bf16, f16};
pub use layout::{Dims, Layout, Strides};
pub use reduce::{ArgReduceFn, ReduceFn};
