//! [`Op`]: the primitive operators as plain data (attributes, no operands). The same value
//! labels eager autodiff nodes, IR nodes, CSE keys and printed graphs.
//!
//! Each primitive's three rules live in its family file under `prims/`:
//! `infer` (shapes and dtypes: the only validation), `eval` (a CPU kernel) and `vjp`
//! (the gradient, written with tensor ops so that it is itself differentiable).
//!
//! ```
//! use spore_core::{op::Op, TensorType, DType};
//! use spore_kernels::UnaryFn;
//! let ty = TensorType::new(&[2, 3], DType::F32);
//! assert_eq!(Op::Unary(UnaryFn::Exp).infer(&[&ty]).unwrap(), ty);
//! assert_eq!(Op::Unary(UnaryFn::Exp).name(), "Exp");
//! ```

use spore_kernels::{ArgReduceFn, BinaryFn, CompareFn, DType, ReduceFn, UnaryFn};

use crate::error::Result;
use crate::prims::{self, custom::CustomOp, fused::FusedProgram};
use crate::tensor::{Storage, Tensor, TensorType};

/// Convolution attributes with padding already resolved to explicit
/// (top, bottom, left, right) amounts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvAttrs {
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    pub pads: [usize; 4],
    pub groups: usize,
}

/// Pooling attributes with resolved padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolAttrs {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub pads: [usize; 4],
    /// Average pooling only: divide by the full window (true) or by the cells inside the image.
    pub count_include_pad: bool,
}

/// A primitive operator and its attributes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Returns its input (used to watch a tensor for gradients).
    Identity,
    /// Returns its input and blocks gradients (MindSpore's `stop_gradient`).
    StopGradient,
    Unary(UnaryFn),
    Binary(BinaryFn),
    Compare(CompareFn),
    /// `select(cond, a, b)`: `a` where `cond` is true, else `b`.
    Select,
    Cast(DType),
    Reduce {
        kind: ReduceFn,
        axes: Vec<usize>,
        keep_dims: bool,
    },
    ArgReduce {
        kind: ArgReduceFn,
        axis: usize,
        keep_dims: bool,
    },
    Reshape(Vec<usize>),
    /// Output axis `i` is input axis `perm[i]`.
    Transpose(Vec<usize>),
    BroadcastTo(Vec<usize>),
    /// Per axis: first index, step (non-zero, may be negative) and number of elements.
    StridedSlice {
        begin: Vec<usize>,
        step: Vec<isize>,
        len: Vec<usize>,
    },
    /// Gradient of `StridedSlice`: places its input into zeros of `input_shape`.
    StridedSliceGrad {
        input_shape: Vec<usize>,
        begin: Vec<usize>,
        step: Vec<isize>,
    },
    /// Constant padding: (before, after) per axis; the value is stored as f64 bits.
    Pad {
        pads: Vec<(usize, usize)>,
        value_bits: u64,
    },
    Concat {
        axis: usize,
    },
    MatMul,
    /// `A · B + beta · D` for matrices, `D` shaped as the product and `beta` stored as f64
    /// bits: an optimizer's `m * 0.9 + dW` with the addend read in the product's own
    /// epilogue (built by the graph compiler; see `prims::matmul`).
    MatMulAdd {
        beta_bits: u64,
    },
    /// `A · B + bias` (the bias a row vector added to every row), then ReLU with `relu`:
    /// a Dense layer's forward pass as one op, the bias and ReLU applied by the product's
    /// kernel while its values are in registers or cache (built by the graph compiler;
    /// see `prims::matmul`).
    MatMulBias {
        relu: bool,
    },
    /// `Y > 0 ? A · B : 0` for matrices, `Y` shaped as the product: ReLU's gradient of a
    /// product (`dy · W` masked by the layer's output), the mask applied by the product's
    /// kernel (built by the graph compiler; see `prims::matmul`).
    MatMulReluGrad,
    Conv2d(ConvAttrs),
    /// `relu(Conv2d(x, w))` as one op: made by the graph compiler's fusion (after autodiff)
    /// where a ReLU is a convolution's only reader.
    Conv2dRelu(ConvAttrs),
    Conv2dBackpropInput {
        attrs: ConvAttrs,
        input_shape: [usize; 4],
    },
    Conv2dBackpropFilter {
        attrs: ConvAttrs,
        weight_shape: [usize; 4],
    },
    MaxPool2d(PoolAttrs),
    /// Inputs (x, dy): routes dy to the first maximum of each window.
    MaxPool2dGrad(PoolAttrs),
    /// `MaxPool2dGrad` of a ReLU's output followed by that ReLU's gradient: inputs (y =
    /// relu output, dy), zero wherever y is not positive (built by the graph compiler).
    MaxPool2dGradOfRelu(PoolAttrs),
    AvgPool2d(PoolAttrs),
    AvgPool2dGrad {
        attrs: PoolAttrs,
        input_shape: [usize; 4],
    },
    Gather {
        axis: usize,
    },
    ScatterAdd {
        axis: usize,
    },
    OneHot {
        depth: usize,
        dtype: DType,
    },
    /// Uniform [0, 1) Float32 samples of `shape` from a Int64 scalar key input.
    RandomUniform {
        shape: Vec<usize>,
    },
    /// A chain of elementwise ops run as one loop (built by the graph compiler).
    Fused(FusedProgram),
    /// The sum over `axes` of a fused program's result, which is never materialised
    /// (built by the graph compiler; see `prims::fused_reduce`).
    FusedReduceSum {
        program: FusedProgram,
        axes: Vec<usize>,
        keep_dims: bool,
    },
    /// Prints text and its tensor inputs in order (a side effect kept in graphs).
    Print(Vec<PrintSegment>),
    /// A primitive defined outside this crate.
    Custom(CustomOp),
}

/// One piece of a `Print`: literal text, or the next tensor input.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PrintSegment {
    Text(String),
    Tensor,
}

/// Names of every built-in primitive, as [`Op::name`] prints them (the op-table coverage
/// test checks each has a row).
pub const PRIMITIVE_NAMES: &[&str] = &[
    "Identity",
    "StopGradient",
    "Neg",
    "Exp",
    "Log",
    "Sqrt",
    "Rsqrt",
    "Abs",
    "Sign",
    "Tanh",
    "Sigmoid",
    "ReLU",
    "Sin",
    "Cos",
    "Erf",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Maximum",
    "Minimum",
    "Equal",
    "NotEqual",
    "Less",
    "LessEqual",
    "Greater",
    "GreaterEqual",
    "Select",
    "Cast",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "Argmax",
    "Argmin",
    "Reshape",
    "Transpose",
    "BroadcastTo",
    "StridedSlice",
    "StridedSliceGrad",
    "Pad",
    "Concat",
    "MatMul",
    "MatMulAdd",
    "MatMulBiasAdd",
    "MatMulBiasAddReLU",
    "MatMulReluGrad",
    "Conv2D",
    "Conv2DBackpropInput",
    "Conv2DBackpropFilter",
    "MaxPool",
    "MaxPoolGrad",
    "MaxPoolGradReLU",
    "AvgPool",
    "AvgPoolGrad",
    "Gather",
    "ScatterAdd",
    "OneHot",
    "UniformReal",
    "FusedElementwise",
    "FusedReduceSum",
];

impl Op {
    /// MindSpore's primitive name (`Conv2D`, `ReduceSum`, ...), used in IR, dumps and errors.
    pub fn name(&self) -> String {
        let s: &str = match self {
            Op::Identity => "Identity",
            Op::StopGradient => "StopGradient",
            Op::Unary(f) => match f {
                UnaryFn::Neg => "Neg",
                UnaryFn::Exp => "Exp",
                UnaryFn::Log => "Log",
                UnaryFn::Sqrt => "Sqrt",
                UnaryFn::Rsqrt => "Rsqrt",
                UnaryFn::Abs => "Abs",
                UnaryFn::Sign => "Sign",
                UnaryFn::Tanh => "Tanh",
                UnaryFn::Sigmoid => "Sigmoid",
                UnaryFn::Relu => "ReLU",
                UnaryFn::Sin => "Sin",
                UnaryFn::Cos => "Cos",
                UnaryFn::Erf => "Erf",
            },
            Op::Binary(f) => match f {
                BinaryFn::Add => "Add",
                BinaryFn::Sub => "Sub",
                BinaryFn::Mul => "Mul",
                BinaryFn::Div => "Div",
                BinaryFn::Pow => "Pow",
                BinaryFn::Maximum => "Maximum",
                BinaryFn::Minimum => "Minimum",
            },
            Op::Compare(f) => match f {
                CompareFn::Equal => "Equal",
                CompareFn::NotEqual => "NotEqual",
                CompareFn::Less => "Less",
                CompareFn::LessEqual => "LessEqual",
                CompareFn::Greater => "Greater",
                CompareFn::GreaterEqual => "GreaterEqual",
            },
            Op::Select => "Select",
            Op::Cast(_) => "Cast",
            Op::Reduce { kind, .. } => match kind {
                ReduceFn::Sum => "ReduceSum",
                ReduceFn::Max => "ReduceMax",
                ReduceFn::Min => "ReduceMin",
            },
            Op::ArgReduce { kind, .. } => match kind {
                ArgReduceFn::ArgMax => "Argmax",
                ArgReduceFn::ArgMin => "Argmin",
            },
            Op::Reshape(_) => "Reshape",
            Op::Transpose(_) => "Transpose",
            Op::BroadcastTo(_) => "BroadcastTo",
            Op::StridedSlice { .. } => "StridedSlice",
            Op::StridedSliceGrad { .. } => "StridedSliceGrad",
            Op::Pad { .. } => "Pad",
            Op::Concat { .. } => "Concat",
            Op::MatMul => "MatMul",
            Op::MatMulAdd { .. } => "MatMulAdd",
            Op::MatMulBias { relu: false } => "MatMulBiasAdd",
            Op::MatMulBias { relu: true } => "MatMulBiasAddReLU",
            Op::MatMulReluGrad => "MatMulReluGrad",
            Op::Conv2d(_) => "Conv2D",
            Op::Conv2dRelu(_) => "Conv2DReLU",
            Op::Conv2dBackpropInput { .. } => "Conv2DBackpropInput",
            Op::Conv2dBackpropFilter { .. } => "Conv2DBackpropFilter",
            Op::MaxPool2d(_) => "MaxPool",
            Op::MaxPool2dGrad(_) => "MaxPoolGrad",
            Op::MaxPool2dGradOfRelu(_) => "MaxPoolGradReLU",
            Op::AvgPool2d(_) => "AvgPool",
            Op::AvgPool2dGrad { .. } => "AvgPoolGrad",
            Op::Gather { .. } => "Gather",
            Op::ScatterAdd { .. } => "ScatterAdd",
            Op::OneHot { .. } => "OneHot",
            Op::RandomUniform { .. } => "UniformReal",
            Op::Fused(_) => "FusedElementwise",
            Op::FusedReduceSum { .. } => "FusedReduceSum",
            Op::Print(_) => "Print",
            Op::Custom(c) => return c.name().to_string(),
        };
        s.to_string()
    }

    /// True for ops whose output element `i` depends only on input elements `i` (after
    /// broadcasting): the candidates for elementwise fusion.
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Op::Unary(_) | Op::Binary(_) | Op::Compare(_) | Op::Select | Op::Cast(_)
        )
    }

    /// True for ops run for their effect (printing): never removed, merged or folded.
    pub fn is_side_effect(&self) -> bool {
        matches!(self, Op::Print(_))
    }

    /// True for ops whose run can fail on their inputs' values, not only on their types:
    /// indices out of range, printing (I/O), user-defined ops. Executors overwrite
    /// parameters in place only after the last of these, so that a failed step leaves
    /// every parameter as it was.
    pub fn may_fail_on_values(&self) -> bool {
        matches!(
            self,
            Op::Gather { .. }
                | Op::ScatterAdd { .. }
                | Op::OneHot { .. }
                | Op::Print(_)
                | Op::Custom(_)
        )
    }

    /// Number of inputs, or `None` for custom ops (which check their own).
    pub fn arity(&self) -> Option<usize> {
        Some(match self {
            Op::Binary(_) | Op::Compare(_) | Op::MatMul | Op::Conv2d(_) | Op::Conv2dRelu(_) => 2,
            Op::Conv2dBackpropInput { .. } | Op::Conv2dBackpropFilter { .. } => 2,
            Op::MaxPool2dGrad(_) | Op::MaxPool2dGradOfRelu(_) | Op::Gather { .. } => 2,
            Op::Select | Op::ScatterAdd { .. } => 3,
            Op::MatMulAdd { .. } | Op::MatMulBias { .. } | Op::MatMulReluGrad => 3,
            Op::Concat { .. } | Op::Custom(_) | Op::Print(_) => return None,
            Op::Fused(_) | Op::FusedReduceSum { .. } => return None,
            _ => 1,
        })
    }

    /// Shape and dtype of the result; the only place inputs are validated.
    pub fn infer(&self, inputs: &[&TensorType]) -> Result<TensorType, String> {
        if let Some(n) = self.arity()
            && inputs.len() != n
        {
            return Err(format!("expected {n} inputs, got {}", inputs.len()));
        }
        prims::infer(self, inputs)
    }

    /// Runs the CPU kernel. `out` is the type `infer` returned for these inputs.
    pub fn eval(&self, inputs: &[&Tensor], out: &TensorType) -> Result<Storage, String> {
        prims::eval(self, inputs, out)
    }

    /// Gradients of the inputs given the output's gradient `grad`; `None` where no gradient
    /// flows (integer inputs, indices, conditions).
    pub fn vjp(
        &self,
        inputs: &[Tensor],
        out: &Tensor,
        grad: &Tensor,
    ) -> Result<Vec<Option<Tensor>>> {
        prims::vjp(self, inputs, out, grad)
    }
}
