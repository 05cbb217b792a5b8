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

mod table;

pub use table::{Family, OP_TABLE, OpRow};

use spore_kernels::{ArgReduceFn, BinaryFn, CompareFn, DType, ReduceFn, UnaryFn};

pub mod custom;
pub mod program;

use custom::CustomOp;
use program::FusedProgram;

/// Convolution attributes with padding already resolved to explicit
/// (top, bottom, left, right) amounts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvAttrs {
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
    pub pads: [usize; 4],
    pub groups: usize,
}

/// Which parts a [`Op::Conv2dEpilogue`] applies (each present part is one more input).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ConvEpilogueParts {
    pub scale: bool,
    pub shift: bool,
    pub addend: bool,
    pub relu: bool,
}

impl ConvEpilogueParts {
    /// The inputs after `x` and `w`.
    pub fn operands(&self) -> usize {
        [self.scale, self.shift, self.addend]
            .iter()
            .filter(|&&p| p)
            .count()
    }
}

/// Pooling attributes with resolved padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolAttrs {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub pads: [usize; 4],
    /// Average pooling only: divide by the full window (true) or by the cells inside the image.
    pub count_include_pad: bool,
    /// Round the output size up: a last, partial window is kept where it starts inside
    /// the image or the leading padding (PyTorch's and ONNX's `ceil_mode`).
    pub ceil_mode: bool,
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
    /// `Conv2d(x, w)` finished before it is stored: per output channel `* scale + shift`
    /// (an inference BatchNorm, a bias), `+ addend` (a residual shaped as the output),
    /// then ReLU, each part where `parts` has it; inputs `x, w`, then scale, shift and
    /// addend in that order where present. Made by the graph compiler's fusion (after
    /// autodiff) where an elementwise loop of that form is a convolution's only reader.
    Conv2dEpilogue {
        attrs: ConvAttrs,
        parts: ConvEpilogueParts,
    },
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

impl Op {
    /// MindSpore's primitive name (`Conv2D`, `ReduceSum`, ...), used in IR, dumps and
    /// errors: the op table's, or a custom op's own.
    pub fn name(&self) -> String {
        match self {
            Op::Custom(c) => c.name().to_string(),
            _ => self.row().name.to_string(),
        }
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
        match self {
            Op::Print(_) => true,
            Op::Custom(c) => c.0.has_side_effect(),
            _ => false,
        }
    }

    /// True for ops whose run can fail on their inputs' values, not only on their types:
    /// indices out of range, printing (I/O), user-defined ops. Executors overwrite
    /// parameters in place only after the last of these, so that a failed step leaves
    /// every parameter as it was.
    pub fn may_fail_on_values(&self) -> bool {
        match self {
            Op::Custom(c) => c.0.may_fail_on_values(),
            _ => matches!(
                self,
                Op::Gather { .. } | Op::ScatterAdd { .. } | Op::OneHot { .. } | Op::Print(_)
            ),
        }
    }

    /// Number of inputs (the op table's), or `None` where it varies (the family checks).
    pub fn arity(&self) -> Option<usize> {
        self.row().arity
    }
}
