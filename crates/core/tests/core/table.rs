//! The op table: one row per primitive (and per composite op), each checked against a
//! naive f64 reference, for type consistency, and for gradients by finite differences.
//! This file holds the row type, the input generator and the elementwise, comparison and
//! reduction rows; `table_structural.rs`, `table_products.rs`, `table_compiled.rs` and
//! `table_api.rs` hold the rest.

use spore_core::{DType, Result, Tensor};

use super::reference::{self as r, Nd};

/// A small deterministic generator for test inputs (independent of Spore's own RNG).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next_f64(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }
}

/// How an input is generated.
#[derive(Clone, Copy, Debug)]
pub enum In {
    /// Floats uniform in [lo, hi).
    F(&'static [usize], f64, f64),
    /// Floats whose magnitude is in [lo, hi) with a random sign (keeps away from kinks at 0).
    Fs(&'static [usize], f64, f64),
    /// Int32 values uniform in [lo, hi].
    I(&'static [usize], i64, i64),
    /// Bool values.
    B(&'static [usize]),
}

pub type RunFn = Box<dyn Fn(&[Tensor]) -> Result<Tensor> + Send + Sync>;
pub type RefFn = Box<dyn Fn(&[Nd]) -> Nd + Send + Sync>;

pub struct Row {
    pub name: &'static str,
    pub inputs: Vec<In>,
    pub run: RunFn,
    pub reference: RefFn,
    /// Output dtype when not the first input's (float rows follow the float dtype used).
    pub out_dtype: Option<DType>,
    /// Whether to check gradients by finite differences.
    pub grad: bool,
}

pub fn row(
    name: &'static str,
    inputs: Vec<In>,
    run: impl Fn(&[Tensor]) -> Result<Tensor> + Send + Sync + 'static,
    reference: impl Fn(&[Nd]) -> Nd + Send + Sync + 'static,
) -> Row {
    Row {
        name,
        inputs,
        run: Box::new(run),
        reference: Box::new(reference),
        out_dtype: None,
        grad: true,
    }
}

impl Row {
    pub fn no_grad(mut self) -> Row {
        self.grad = false;
        self
    }
    pub fn dtype(mut self, d: DType) -> Row {
        self.out_dtype = Some(d);
        self
    }
}

pub fn unary(
    name: &'static str,
    input: In,
    run: fn(&Tensor) -> Result<Tensor>,
    f: fn(f64) -> f64,
) -> Row {
    row(name, vec![input], move |x| run(&x[0]), move |x| x[0].map(f))
}

pub fn binary(
    name: &'static str,
    a: In,
    b: In,
    run: fn(&Tensor, &Tensor) -> Result<Tensor>,
    f: fn(f64, f64) -> f64,
) -> Row {
    row(
        name,
        vec![a, b],
        move |x| run(&x[0], &x[1]),
        move |x| r::zip(&x[0], &x[1], f),
    )
}

pub fn bool_of(v: bool) -> f64 {
    if v { 1.0 } else { 0.0 }
}

/// Generates a row's inputs as f64 values (rounded to f32 so both precisions see the same
/// numbers) and builds tensors with floats in `float`. The reference gets the values the
/// tensors hold (float16 and bfloat16 round them once more).
pub fn make_inputs(row: &Row, seed: u64, float: DType) -> (Vec<Nd>, Vec<Tensor>) {
    let mut rng = Lcg(seed);
    let mut nds = vec![];
    let mut ts = vec![];
    for spec in &row.inputs {
        let (shape, values, dtype): (&[usize], Vec<f64>, DType) = match *spec {
            In::F(s, lo, hi) => (
                s,
                (0..s.iter().product())
                    .map(|_| rng.uniform(lo, hi) as f32 as f64)
                    .collect(),
                float,
            ),
            In::Fs(s, lo, hi) => (
                s,
                (0..s.iter().product())
                    .map(|_| {
                        let m = rng.uniform(lo, hi) as f32 as f64;
                        if rng.next_f64() < 0.5 { -m } else { m }
                    })
                    .collect(),
                float,
            ),
            In::I(s, lo, hi) => (
                s,
                (0..s.iter().product())
                    .map(|_| (lo + (rng.next_f64() * (hi - lo + 1) as f64) as i64) as f64)
                    .collect(),
                DType::I32,
            ),
            In::B(s) => (
                s,
                (0..s.iter().product())
                    .map(|_| if rng.next_f64() < 0.5 { 1.0 } else { 0.0 })
                    .collect(),
                DType::Bool,
            ),
        };
        let t = Tensor::from_f64(&values, shape, dtype).unwrap();
        nds.push(Nd::new(shape, t.to_f64_vec().unwrap()));
        ts.push(t);
    }
    (nds, ts)
}

pub fn rows() -> Vec<Row> {
    [
        elementwise_rows(),
        binary_and_comparison_rows(),
        reduction_rows(),
        super::table_structural::structural_rows(),
        super::table_products::product_rows(),
        super::table_compiled::compiled_rows(),
        super::table_api::api_rows(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn elementwise_rows() -> Vec<Row> {
    let u = |name, f, g| unary(name, In::F(&[3, 4], -2.0, 2.0), f, g);
    let pos = |name, f, g| unary(name, In::F(&[3, 4], 0.2, 3.0), f, g);
    let kinked = |name, f, g| unary(name, In::Fs(&[3, 4], 0.1, 2.0), f, g);
    vec![
        row(
            "Identity",
            vec![In::F(&[2, 3], -1.0, 1.0)],
            |x| x[0].identity(),
            |x| x[0].clone(),
        ),
        row(
            "StopGradient",
            vec![In::F(&[2, 3], -1.0, 1.0)],
            |x| x[0].stop_gradient(),
            |x| x[0].clone(),
        )
        .no_grad(),
        u("Neg", Tensor::neg, |x| -x),
        u("Exp", Tensor::exp, f64::exp),
        pos("Log", Tensor::log, f64::ln),
        pos("Log1p", Tensor::log1p, f64::ln_1p),
        pos("Sqrt", Tensor::sqrt, f64::sqrt),
        pos("Rsqrt", Tensor::rsqrt, |x| 1.0 / x.sqrt()),
        kinked("Abs", Tensor::abs, f64::abs),
        kinked("Sign", Tensor::sign, f64::signum),
        u("Tanh", Tensor::tanh, f64::tanh),
        u("Sigmoid", Tensor::sigmoid, |x| 1.0 / (1.0 + (-x).exp())),
        kinked("ReLU", Tensor::relu, |x| x.max(0.0)),
        u("Sin", Tensor::sin, f64::sin),
        u("Cos", Tensor::cos, f64::cos),
        u("Erf", Tensor::erf, libm::erf),
    ]
}

fn binary_and_comparison_rows() -> Vec<Row> {
    let ab = (In::F(&[2, 3], -2.0, 2.0), In::F(&[3], -2.0, 2.0));
    let cmp = |name, f: fn(&Tensor, &Tensor) -> Result<Tensor>, g: fn(f64, f64) -> bool| {
        row(
            name,
            vec![In::I(&[3, 4], 0, 3), In::I(&[4], 0, 3)],
            move |x| f(&x[0], &x[1]),
            move |x| r::zip(&x[0], &x[1], |a, b| bool_of(g(a, b))),
        )
        .no_grad()
        .dtype(DType::Bool)
    };
    vec![
        binary("Add", ab.0, ab.1, Tensor::add, |a, b| a + b),
        binary(
            "Sub",
            In::F(&[2, 1, 3], -2.0, 2.0),
            In::F(&[4, 1], -2.0, 2.0),
            Tensor::sub,
            |a, b| a - b,
        ),
        binary("Mul", ab.0, ab.1, Tensor::mul, |a, b| a * b),
        binary("Div", ab.0, In::Fs(&[3], 0.5, 2.0), Tensor::div, |a, b| {
            a / b
        }),
        binary(
            "Pow",
            In::F(&[2, 3], 0.5, 2.0),
            In::F(&[2, 3], -1.5, 1.5),
            Tensor::pow,
            f64::powf,
        ),
        binary("Maximum", ab.0, ab.1, Tensor::maximum, f64::max),
        binary("Minimum", ab.0, ab.1, Tensor::minimum, f64::min),
        binary(
            "Add",
            In::I(&[2, 3], -5, 5),
            In::I(&[3], -5, 5),
            Tensor::add,
            |a, b| a + b,
        )
        .no_grad()
        .dtype(DType::I32),
        cmp("Equal", Tensor::equal, |a, b| a == b),
        cmp("NotEqual", Tensor::not_equal, |a, b| a != b),
        cmp("Less", Tensor::less, |a, b| a < b),
        cmp("LessEqual", Tensor::less_equal, |a, b| a <= b),
        cmp("Greater", Tensor::greater, |a, b| a > b),
        cmp("GreaterEqual", Tensor::greater_equal, |a, b| a >= b),
        row(
            "Select",
            vec![
                In::B(&[2, 3]),
                In::F(&[2, 3], -1.0, 1.0),
                In::F(&[3], -1.0, 1.0),
            ],
            |x| Tensor::select(&x[0], &x[1], &x[2]),
            |x| r::zip3(&x[0], &x[1], &x[2], |c, a, b| if c != 0.0 { a } else { b }),
        ),
        row(
            "Cast",
            vec![In::F(&[2, 3], -3.0, 3.0)],
            |x| x[0].cast(DType::I32),
            |x| x[0].map(f64::trunc),
        )
        .no_grad()
        .dtype(DType::I32),
        row(
            "Cast",
            vec![In::I(&[2, 3], -3, 3)],
            |x| x[0].cast(DType::F32),
            |x| x[0].clone(),
        )
        .no_grad()
        .dtype(DType::F32),
    ]
}

fn reduction_rows() -> Vec<Row> {
    vec![
        row(
            "ReduceSum",
            vec![In::F(&[2, 3, 4], -1.0, 1.0)],
            |x| x[0].sum(&[0, -1], false),
            |x| r::reduce(&x[0], &[0, 2], false, |v| v.iter().sum()),
        ),
        row(
            // Leading axes of a contiguous tensor (a bias gradient): rows folded in place.
            "ReduceSum",
            vec![In::F(&[5, 3, 4], -1.0, 1.0)],
            |x| x[0].sum(&[0], false),
            |x| r::reduce(&x[0], &[0], false, |v| v.iter().sum()),
        ),
        row(
            // Reduced, kept, reduced axes (BatchNorm statistics): runs summed in place.
            "ReduceSum",
            vec![In::F(&[3, 4, 2, 16], -1.0, 1.0)],
            |x| x[0].sum(&[0, 2, 3], false),
            |x| r::reduce(&x[0], &[0, 2, 3], false, |v| v.iter().sum()),
        ),
        row(
            "ReduceMax",
            vec![In::F(&[4, 2, 32], -1.0, 1.0)],
            |x| x[0].max(&[2], true),
            |x| {
                r::reduce(&x[0], &[2], true, |v| {
                    v.iter().cloned().fold(f64::MIN, f64::max)
                })
            },
        ),
        row(
            "ReduceMax",
            vec![In::F(&[2, 3, 4], -1.0, 1.0)],
            |x| x[0].max(&[1, 0], true),
            |x| {
                r::reduce(&x[0], &[0, 1], true, |v| {
                    v.iter().cloned().fold(f64::MIN, f64::max)
                })
            },
        ),
        row(
            "ReduceMax",
            vec![In::F(&[2, 3, 4], -1.0, 1.0)],
            |x| x[0].max(&[1], true),
            |x| {
                r::reduce(&x[0], &[1], true, |v| {
                    v.iter().cloned().fold(f64::MIN, f64::max)
                })
            },
        ),
        row(
            "ReduceMin",
            vec![In::F(&[2, 3, 4], -1.0, 1.0)],
            |x| x[0].min(&[], false),
            |x| {
                r::reduce(&x[0], &[0, 1, 2], false, |v| {
                    v.iter().cloned().fold(f64::MAX, f64::min)
                })
            },
        ),
        row(
            "Argmax",
            vec![In::F(&[3, 5], -1.0, 1.0)],
            |x| x[0].argmax(-1, false),
            |x| {
                r::reduce(&x[0], &[1], false, |v| {
                    v.iter()
                        .enumerate()
                        .fold((0, f64::MIN), |b, (i, &x)| if x > b.1 { (i, x) } else { b })
                        .0 as f64
                })
            },
        )
        .no_grad()
        .dtype(DType::I32),
        row(
            "Argmin",
            vec![In::F(&[3, 5], -1.0, 1.0)],
            |x| x[0].argmin(0, true),
            |x| {
                r::reduce(&x[0], &[0], true, |v| {
                    v.iter()
                        .enumerate()
                        .fold((0, f64::MAX), |b, (i, &x)| if x < b.1 { (i, x) } else { b })
                        .0 as f64
                })
            },
        )
        .no_grad()
        .dtype(DType::I32),
    ]
}
