//! The op table: every primitive's printed name, arity, family (the file under `prims/`
//! holding its rules) and whether only the graph compiler makes it, declared once, in one
//! row per primitive. [`Op::name`], [`Op::arity`], the routing to a family's rules
//! (`prims::infer`/`eval`/`vjp`) and the list of names the op-table test covers are all
//! read from it.
//!
//! ```
//! use spore_core::op::{Family, OP_TABLE, Op};
//! use spore_kernels::UnaryFn;
//! let exp = Op::Unary(UnaryFn::Exp).row();
//! assert_eq!((exp.name, exp.arity, exp.family), ("Exp", Some(1), Family::Elementwise));
//! assert!(OP_TABLE.iter().any(|r| r.name == "Conv2DReLU" && r.compiler_made));
//! ```
//!
//! Adding a primitive: a row here, its rules in its family's file, a row in the test
//! table (`crates/core/tests/core/table*.rs`), and its kernel (ARCHITECTURE.md, "How to
//! add an operator").

use spore_kernels::{ArgReduceFn, BinaryFn, CompareFn, ReduceFn, UnaryFn};

use super::Op;

/// Which file under `prims/` holds an op's `infer`, `eval` and `vjp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Elementwise,
    Reduce,
    Movement,
    MatMul,
    Conv,
    Pool,
    Index,
    Random,
    /// Fused elementwise programs and their sums (`prims::fused`).
    Fused,
    Print,
    /// Defined outside this crate (`prims::custom`).
    Custom,
}

/// What the table says about one primitive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpRow {
    /// MindSpore's primitive name, as IR, dumps, profiles and errors print it.
    pub name: &'static str,
    /// Number of inputs; `None` when it varies (and the family checks it).
    pub arity: Option<usize>,
    pub family: Family,
    /// Built only by the graph compiler, after autodiff (so it needs no gradient rule).
    pub compiler_made: bool,
}

/// `row!(name, arity, family)` for ops users make, `row!(name, arity, family, compiler)`
/// for ops only the compiler makes.
macro_rules! row {
    ($name:literal, $arity:expr, $family:ident) => {
        OpRow {
            name: $name,
            arity: $arity,
            family: Family::$family,
            compiler_made: false,
        }
    };
    ($name:literal, $arity:expr, $family:ident, compiler) => {
        OpRow {
            name: $name,
            arity: $arity,
            family: Family::$family,
            compiler_made: true,
        }
    };
}

/// Builds [`OP_TABLE`] and [`Op::row`] from one list of `pattern => row` lines.
macro_rules! op_table {
    ($($pattern:pat => $row:expr;)*) => {
        /// Every primitive's row, in declaration order.
        pub const OP_TABLE: &[OpRow] = &[$($row),*];

        impl Op {
            /// This op's row of the op table.
            pub fn row(&self) -> &'static OpRow {
                match self {
                    $($pattern => &$row,)*
                }
            }
        }
    };
}

const N: Option<usize> = None;
const ONE: Option<usize> = Some(1);
const TWO: Option<usize> = Some(2);
const THREE: Option<usize> = Some(3);

op_table! {
    Op::Identity => row!("Identity", ONE, Elementwise);
    Op::StopGradient => row!("StopGradient", ONE, Elementwise);
    Op::Unary(UnaryFn::Neg) => row!("Neg", ONE, Elementwise);
    Op::Unary(UnaryFn::Exp) => row!("Exp", ONE, Elementwise);
    Op::Unary(UnaryFn::Log) => row!("Log", ONE, Elementwise);
    Op::Unary(UnaryFn::Log1p) => row!("Log1p", ONE, Elementwise);
    Op::Unary(UnaryFn::Sqrt) => row!("Sqrt", ONE, Elementwise);
    Op::Unary(UnaryFn::Rsqrt) => row!("Rsqrt", ONE, Elementwise);
    Op::Unary(UnaryFn::Abs) => row!("Abs", ONE, Elementwise);
    Op::Unary(UnaryFn::Sign) => row!("Sign", ONE, Elementwise);
    Op::Unary(UnaryFn::Tanh) => row!("Tanh", ONE, Elementwise);
    Op::Unary(UnaryFn::Sigmoid) => row!("Sigmoid", ONE, Elementwise);
    Op::Unary(UnaryFn::Relu) => row!("ReLU", ONE, Elementwise);
    Op::Unary(UnaryFn::Sin) => row!("Sin", ONE, Elementwise);
    Op::Unary(UnaryFn::Cos) => row!("Cos", ONE, Elementwise);
    Op::Unary(UnaryFn::Erf) => row!("Erf", ONE, Elementwise);
    Op::Binary(BinaryFn::Add) => row!("Add", TWO, Elementwise);
    Op::Binary(BinaryFn::Sub) => row!("Sub", TWO, Elementwise);
    Op::Binary(BinaryFn::Mul) => row!("Mul", TWO, Elementwise);
    Op::Binary(BinaryFn::Div) => row!("Div", TWO, Elementwise);
    Op::Binary(BinaryFn::Pow) => row!("Pow", TWO, Elementwise);
    Op::Binary(BinaryFn::Maximum) => row!("Maximum", TWO, Elementwise);
    Op::Binary(BinaryFn::Minimum) => row!("Minimum", TWO, Elementwise);
    Op::Compare(CompareFn::Equal) => row!("Equal", TWO, Elementwise);
    Op::Compare(CompareFn::NotEqual) => row!("NotEqual", TWO, Elementwise);
    Op::Compare(CompareFn::Less) => row!("Less", TWO, Elementwise);
    Op::Compare(CompareFn::LessEqual) => row!("LessEqual", TWO, Elementwise);
    Op::Compare(CompareFn::Greater) => row!("Greater", TWO, Elementwise);
    Op::Compare(CompareFn::GreaterEqual) => row!("GreaterEqual", TWO, Elementwise);
    Op::Select => row!("Select", THREE, Elementwise);
    Op::Cast(_) => row!("Cast", ONE, Elementwise);
    Op::Reduce { kind: ReduceFn::Sum, .. } => row!("ReduceSum", ONE, Reduce);
    Op::Reduce { kind: ReduceFn::Max, .. } => row!("ReduceMax", ONE, Reduce);
    Op::Reduce { kind: ReduceFn::Min, .. } => row!("ReduceMin", ONE, Reduce);
    Op::ArgReduce { kind: ArgReduceFn::ArgMax, .. } => row!("Argmax", ONE, Reduce);
    Op::ArgReduce { kind: ArgReduceFn::ArgMin, .. } => row!("Argmin", ONE, Reduce);
    Op::Reshape(_) => row!("Reshape", ONE, Movement);
    Op::Transpose(_) => row!("Transpose", ONE, Movement);
    Op::BroadcastTo(_) => row!("BroadcastTo", ONE, Movement);
    Op::StridedSlice { .. } => row!("StridedSlice", ONE, Movement);
    Op::StridedSliceGrad { .. } => row!("StridedSliceGrad", ONE, Movement);
    Op::Pad { .. } => row!("Pad", ONE, Movement);
    Op::Concat { .. } => row!("Concat", N, Movement);
    Op::MatMul => row!("MatMul", TWO, MatMul);
    Op::MatMulAdd { .. } => row!("MatMulAdd", THREE, MatMul, compiler);
    Op::MatMulBias { relu: false } => row!("MatMulBiasAdd", THREE, MatMul, compiler);
    Op::MatMulBias { relu: true } => row!("MatMulBiasAddReLU", THREE, MatMul, compiler);
    Op::MatMulReluGrad => row!("MatMulReluGrad", THREE, MatMul, compiler);
    Op::Conv2d(_) => row!("Conv2D", TWO, Conv);
    Op::Conv2dRelu(_) => row!("Conv2DReLU", TWO, Conv, compiler);
    Op::Conv2dEpilogue { .. } => row!("Conv2DEpilogue", N, Conv, compiler);
    Op::Conv2dBackpropInput { .. } => row!("Conv2DBackpropInput", TWO, Conv);
    Op::Conv2dBackpropFilter { .. } => row!("Conv2DBackpropFilter", TWO, Conv);
    Op::MaxPool2d(_) => row!("MaxPool", ONE, Pool);
    Op::MaxPool2dGrad(_) => row!("MaxPoolGrad", TWO, Pool);
    Op::MaxPool2dGradOfRelu(_) => row!("MaxPoolGradReLU", TWO, Pool, compiler);
    Op::AvgPool2d(_) => row!("AvgPool", ONE, Pool);
    Op::AvgPool2dGrad { .. } => row!("AvgPoolGrad", ONE, Pool);
    Op::Gather { .. } => row!("Gather", TWO, Index);
    Op::ScatterAdd { .. } => row!("ScatterAdd", THREE, Index);
    Op::OneHot { .. } => row!("OneHot", ONE, Index);
    Op::RandomUniform { .. } => row!("UniformReal", ONE, Random);
    Op::Fused(_) => row!("FusedElementwise", N, Fused, compiler);
    Op::FusedReduceSum { .. } => row!("FusedReduceSum", N, Fused, compiler);
    Op::Print(_) => row!("Print", N, Print);
    Op::Custom(_) => row!("Custom", N, Custom);
}
