//! The generator's own program form: a list of kernel calls over buffers, each kernel
//! specialised to its shapes, with weights already in the layout the kernels read.
//! [`crate::lower`] builds it from a frozen graph; [`crate::arena`] places its buffers;
//! [`crate::emit`] prints it as C.
//!
//! ```
//! use spore_codegen::program::Act;
//! assert_eq!(Act::Relu6.apply(7.0), 6.0);
//! ```

use spore_core::op::{ConvAttrs, PoolAttrs};
use spore_kernels::{BinaryFn, ReduceFn, UnaryFn};

/// Index into [`Program::values`].
pub type ValueId = usize;
/// Index into [`Program::consts`].
pub type ConstId = usize;

/// Where a buffer lives when the generated code runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// The caller's `i`-th input array (read only).
    Input(usize),
    /// The caller's `i`-th output array.
    Output(usize),
    /// A slice of the workspace, placed by [`crate::arena`].
    Arena,
}

/// An activation buffer (float32, contiguous).
#[derive(Clone, Debug)]
pub struct Value {
    pub numel: usize,
    pub storage: Storage,
    /// The scope name of the node that made it (comments, reports, errors).
    pub scope: String,
    /// The node of the frozen graph whose value it holds (calibration reads it there).
    pub node: usize,
}

/// A weight array, emitted as a `const` array (flash on a microcontroller).
#[derive(Clone, Debug)]
pub struct Const {
    /// A C identifier (without the network's prefix).
    pub name: String,
    pub data: Vec<f32>,
    /// The parameters it came from (a folded BatchNorm names several).
    pub origin: String,
}

/// What a convolution or a product applies to its result before storing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    None,
    Relu,
    /// `min(max(x, 0), 6)`.
    Relu6,
}

impl Act {
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Act::None => x,
            Act::Relu => x.max(0.0),
            Act::Relu6 => x.clamp(0.0, 6.0),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    Max,
    Avg,
}

/// One operand of an elementwise kernel.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Operand {
    Value(ValueId),
    Const(ConstId),
    /// A one-element constant, written into the code as a literal.
    Scalar(f32),
}

/// A max pool folded into the convolution before it: windows that tile the
/// convolution's output (kernel = stride, no padding), so each output is computed once.
/// Only the maximum fuses: it commutes with the activation and with int8
/// requantization, where an average of requantized values would be clamped to the
/// average's range first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FusedPool {
    pub size: usize,
}

/// A 2-D convolution (NCHW) with its bias, activation and pooling fused in. The weight
/// has BatchNorm's scale folded in and is packed `[OC/B][IC/groups][KH][KW][B]` for
/// blocks of `B` output channels ([`crate::emit::conv`]).
#[derive(Clone, Debug)]
pub struct Conv {
    pub x: ValueId,
    pub y: ValueId,
    pub w: ConstId,
    pub bias: Option<ConstId>,
    pub attrs: ConvAttrs,
    /// `[N, C, H, W]` of the input.
    pub input: [usize; 4],
    /// `[N, OC, OH, OW]` of the convolution itself (before pooling).
    pub conv: [usize; 4],
    /// `[KH, KW]`.
    pub kernel: [usize; 2],
    pub act: Act,
    pub pool: Option<FusedPool>,
}

impl Conv {
    /// `[N, OC, H, W]` of what the kernel stores (after pooling).
    pub fn output(&self) -> [usize; 4] {
        let [n, c, h, w] = self.conv;
        match self.pool {
            Some(p) => [n, c, h / p.size, w / p.size],
            None => [n, c, h, w],
        }
    }
}

/// `y[m] = act(x[m] · W + bias)` with `W` stored `[K][N]` (rows of the input dimension).
#[derive(Clone, Debug)]
pub struct Dense {
    pub x: ValueId,
    pub y: ValueId,
    pub w: ConstId,
    pub bias: Option<ConstId>,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub act: Act,
}

/// One kernel call.
#[derive(Clone, Debug)]
pub enum Step {
    Conv(Conv),
    Dense(Dense),
    Pool {
        x: ValueId,
        y: ValueId,
        kind: PoolKind,
        attrs: PoolAttrs,
        input: [usize; 4],
        output: [usize; 4],
    },
    Unary {
        x: ValueId,
        y: ValueId,
        f: UnaryFn,
        numel: usize,
    },
    /// Broadcasting `act(a f b)` into `shape`; each operand's shape is its own, padded
    /// on the left with ones (a residual connection's Add with its ReLU).
    Binary {
        a: Operand,
        b: Operand,
        y: ValueId,
        f: BinaryFn,
        act: Act,
        a_shape: Vec<usize>,
        b_shape: Vec<usize>,
        shape: Vec<usize>,
    },
    Reduce {
        x: ValueId,
        y: ValueId,
        kind: ReduceFn,
        input: Vec<usize>,
        axes: Vec<usize>,
    },
    Concat {
        xs: Vec<(Operand, Vec<usize>)>,
        y: ValueId,
        axis: usize,
    },
    Transpose {
        x: ValueId,
        y: ValueId,
        input: Vec<usize>,
        perm: Vec<usize>,
    },
    /// Constant padding: `(before, after)` per axis of `input`, filled with `value`.
    /// Convolutions with padding read a padded copy, so their loops need no bounds.
    Pad {
        x: ValueId,
        y: ValueId,
        input: Vec<usize>,
        pads: Vec<(usize, usize)>,
        value: f32,
    },
    /// Copies an input or a constant into an output array.
    Copy {
        x: Operand,
        y: ValueId,
        numel: usize,
    },
}

impl Step {
    /// Buffers the step reads.
    pub fn reads(&self) -> Vec<ValueId> {
        let val = |o: &Operand| match o {
            Operand::Value(v) => Some(*v),
            _ => None,
        };
        match self {
            Step::Conv(c) => vec![c.x],
            Step::Dense(d) => vec![d.x],
            Step::Pool { x, .. }
            | Step::Unary { x, .. }
            | Step::Reduce { x, .. }
            | Step::Pad { x, .. }
            | Step::Transpose { x, .. } => vec![*x],
            Step::Binary { a, b, .. } => [a, b].into_iter().filter_map(val).collect(),
            Step::Concat { xs, .. } => xs.iter().filter_map(|(o, _)| val(o)).collect(),
            Step::Copy { x, .. } => val(x).into_iter().collect(),
        }
    }

    /// The buffer the step writes.
    pub fn writes(&self) -> ValueId {
        match self {
            Step::Conv(c) => c.y,
            Step::Dense(d) => d.y,
            Step::Pool { y, .. }
            | Step::Unary { y, .. }
            | Step::Binary { y, .. }
            | Step::Reduce { y, .. }
            | Step::Concat { y, .. }
            | Step::Transpose { y, .. }
            | Step::Pad { y, .. }
            | Step::Copy { y, .. } => *y,
        }
    }

    /// A short name for comments and reports.
    pub fn kind(&self) -> String {
        match self {
            Step::Conv(c) => {
                let mut s = "Conv2D".to_string();
                if c.bias.is_some() {
                    s.push_str("+BiasAdd");
                }
                match c.act {
                    Act::Relu => s.push_str("+ReLU"),
                    Act::Relu6 => s.push_str("+ReLU6"),
                    Act::None => {}
                }
                if c.pool.is_some() {
                    s.push_str("+MaxPool");
                }
                s
            }
            Step::Dense(d) => {
                let mut s = "MatMul".to_string();
                if d.bias.is_some() {
                    s.push_str("+BiasAdd");
                }
                match d.act {
                    Act::Relu => s.push_str("+ReLU"),
                    Act::Relu6 => s.push_str("+ReLU6"),
                    Act::None => {}
                }
                s
            }
            Step::Pool { kind, .. } => match kind {
                PoolKind::Max => "MaxPool".into(),
                PoolKind::Avg => "AvgPool".into(),
            },
            Step::Unary { f, .. } => format!("{f:?}"),
            Step::Binary { f, act, .. } => match act {
                Act::None => format!("{f:?}"),
                Act::Relu => format!("{f:?}+ReLU"),
                Act::Relu6 => format!("{f:?}+ReLU6"),
            },
            Step::Reduce { kind, .. } => format!("Reduce{kind:?}"),
            Step::Concat { .. } => "Concat".into(),
            Step::Transpose { .. } => "Transpose".into(),
            Step::Pad { .. } => "Pad".into(),
            Step::Copy { .. } => "Copy".into(),
        }
    }
}

/// A network as kernel calls.
#[derive(Clone, Debug, Default)]
pub struct Program {
    pub values: Vec<Value>,
    pub consts: Vec<Const>,
    pub steps: Vec<Step>,
    /// The scope name of each step's first source node.
    pub scopes: Vec<String>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
}

impl Program {
    /// Bytes of all weight arrays.
    pub fn weight_bytes(&self) -> usize {
        self.consts.iter().map(|c| c.data.len() * 4).sum()
    }
}
