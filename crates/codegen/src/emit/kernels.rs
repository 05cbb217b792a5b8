//! The float32 kernels, one C function per step, each with its shapes written in as
//! literals so the compiler can unroll and vectorise it.
//!
//! Convolutions are in [`super::conv`]; products keep a tile of up to 32 output columns
//! in registers over the whole reduction; everything else is a loop nest over its
//! output.

use std::fmt::Write;

use spore_kernels::{BinaryFn, ReduceFn, UnaryFn};

use super::c::{broadcast_strides, float_literal, loop_nest, strides};
use super::conv::{ConvFlavor, Spell2, conv_body};
use crate::program::{Act, Conv, Dense, Operand, PoolKind, Program, Step};

/// How kernels name things outside themselves.
pub struct Names<'a> {
    /// Prefix of the weight arrays (`lenet_`).
    pub prefix: &'a str,
}

impl Names<'_> {
    pub fn weight(&self, p: &Program, c: usize) -> String {
        format!("{}{}", self.prefix, p.consts[c].name)
    }
}

pub fn act_c(act: Act, v: &str) -> String {
    match act {
        Act::None => v.to_string(),
        Act::Relu => format!("({v} > 0.0f ? {v} : 0.0f)"),
        Act::Relu6 => format!("({v} > 0.0f ? ({v} < 6.0f ? {v} : 6.0f) : 0.0f)"),
    }
}

pub fn unary_c(f: UnaryFn, v: &str) -> String {
    match f {
        UnaryFn::Neg => format!("-{v}"),
        UnaryFn::Exp => format!("expf({v})"),
        UnaryFn::Log => format!("logf({v})"),
        UnaryFn::Log1p => format!("log1pf({v})"),
        UnaryFn::Sqrt => format!("sqrtf({v})"),
        UnaryFn::Rsqrt => format!("1.0f / sqrtf({v})"),
        UnaryFn::Abs => format!("fabsf({v})"),
        UnaryFn::Sign => format!("({v} > 0.0f ? 1.0f : ({v} < 0.0f ? -1.0f : {v} * 0.0f))"),
        UnaryFn::Tanh => format!("tanhf({v})"),
        UnaryFn::Sigmoid => format!("1.0f / (1.0f + expf(-{v}))"),
        UnaryFn::Relu => format!("({v} > 0.0f ? {v} : 0.0f)"),
        UnaryFn::Sin => format!("sinf({v})"),
        UnaryFn::Cos => format!("cosf({v})"),
        UnaryFn::Erf => format!("erff({v})"),
    }
}

pub fn binary_c(f: BinaryFn, a: &str, b: &str) -> String {
    match f {
        BinaryFn::Add => format!("{a} + {b}"),
        BinaryFn::Sub => format!("{a} - {b}"),
        BinaryFn::Mul => format!("{a} * {b}"),
        BinaryFn::Div => format!("{a} / {b}"),
        BinaryFn::Pow => format!("powf({a}, {b})"),
        BinaryFn::Maximum => format!("({a} > {b} ? {a} : {b})"),
        BinaryFn::Minimum => format!("({a} < {b} ? {a} : {b})"),
    }
}

/// The function of step `s` (named `k{s}`), taking its buffers in `reads()` order and
/// then the output.
pub fn kernel(p: &Program, s: usize, names: &Names) -> String {
    let step = &p.steps[s];
    let mut params: Vec<String> = step
        .reads()
        .iter()
        .enumerate()
        .map(|(i, _)| format!("const float *restrict x{i}"))
        .collect();
    params.push("float *restrict y".into());
    let mut out = format!(
        "/* {}: {} */\nstatic void k{s}({})\n{{\n",
        p.scopes[s],
        step.kind(),
        params.join(", ")
    );
    let body = match step {
        Step::Conv(c) => conv(p, c, names),
        Step::Dense(d) => dense(p, d, names),
        Step::Pool {
            kind,
            attrs,
            input,
            output,
            ..
        } => pool(*kind, attrs, input, output, "float", 0),
        Step::Unary { f, numel, .. } => format!(
            "    for (size_t i = 0; i < {numel}u; ++i) {{\n        const float v = x0[i];\n        y[i] = {};\n    }}\n",
            unary_c(*f, "v")
        ),
        Step::Binary {
            a,
            b,
            f,
            act,
            a_shape,
            b_shape,
            shape,
            ..
        } => {
            let mut next = 0;
            let mut operand = |o: &Operand| match o {
                Operand::Value(_) => {
                    next += 1;
                    format!("x{}", next - 1)
                }
                Operand::Const(c) => names.weight(p, *c),
                Operand::Scalar(v) => float_literal(*v),
            };
            let (an, bn) = (operand(a), operand(b));
            let st = vec![
                strides(shape),
                broadcast_strides(a_shape, shape),
                broadcast_strides(b_shape, shape),
            ];
            let scalar_a = matches!(a, Operand::Scalar(_));
            let scalar_b = matches!(b, Operand::Scalar(_));
            loop_nest(shape, &st, "    ", &|ix| {
                let av = if scalar_a {
                    an.clone()
                } else {
                    format!("{an}[{}]", ix[1])
                };
                let bv = if scalar_b {
                    bn.clone()
                } else {
                    format!("{bn}[{}]", ix[2])
                };
                match act {
                    Act::None => format!("y[{}] = {};\n", ix[0], binary_c(*f, &av, &bv)),
                    _ => format!(
                        "{{\n        const float v = {};\n        y[{}] = {};\n    }}\n",
                        binary_c(*f, &av, &bv),
                        ix[0],
                        act_c(*act, "v")
                    ),
                }
            })
        }
        Step::Reduce {
            kind, input, axes, ..
        } => reduce(*kind, input, axes),
        Step::Concat { xs, axis, .. } => concat(p, xs, *axis, names),
        Step::Transpose { input, perm, .. } => {
            let out_shape: Vec<usize> = perm.iter().map(|&a| input[a]).collect();
            let ist = strides(input);
            let read: Vec<usize> = perm.iter().map(|&a| ist[a]).collect();
            loop_nest(&out_shape, &[strides(&out_shape), read], "    ", &|ix| {
                format!("y[{}] = x0[{}];\n", ix[0], ix[1])
            })
        }
        Step::Pad {
            input, pads, value, ..
        } => pad(input, pads, &float_literal(*value), "float"),
        Step::Copy { x, numel, .. } => {
            let src = match x {
                Operand::Value(_) => "x0".to_string(),
                Operand::Const(c) => names.weight(p, *c),
                Operand::Scalar(v) => {
                    return format!(
                        "{out}    for (size_t i = 0; i < {numel}u; ++i)\n        y[i] = {};\n}}\n",
                        float_literal(*v)
                    );
                }
            };
            format!("    for (size_t i = 0; i < {numel}u; ++i)\n        y[i] = {src}[i];\n")
        }
    };
    out.push_str(&body);
    out.push_str("}\n");
    out
}

fn conv(p: &Program, c: &Conv, names: &Names) -> String {
    let act = c.act;
    conv_body(
        c,
        &ConvFlavor {
            in_t: "float",
            acc_t: "float",
            out_t: "float",
            load: "RAW".into(),
            weight: names.weight(p, c.w),
            bias: c.bias.map(|b| names.weight(p, b)),
            finish: Box::new(move |v| act_c(act, v)),
        },
    )
}

fn dense(p: &Program, d: &Dense, names: &Names) -> String {
    let bias = d.bias.map(|b| names.weight(p, b));
    let act = d.act;
    dense_body(
        d,
        &DenseFlavor {
            in_t: "float",
            acc_t: "float",
            w_t: "float",
            load: "RAW".into(),
            weight: names.weight(p, d.w),
            bias,
            finish: Box::new(move |v, _| act_c(act, v)),
        },
    )
}

/// How a product's arithmetic is spelled (float32, or int8 with int32 sums).
pub struct DenseFlavor {
    pub in_t: &'static str,
    pub acc_t: &'static str,
    pub w_t: &'static str,
    /// The loaded input element as a sum term (`RAW` stands for the element).
    pub load: String,
    pub weight: String,
    pub bias: Option<String>,
    /// From a sum (`v`) of output column `j` (an expression) to the stored value.
    pub finish: Spell2,
}

/// `y = x · W (+ bias)` in tiles of up to 32 output columns whose sums stay in registers
/// for the whole reduction; `W` is `[K][N]`.
pub fn dense_body(d: &Dense, f: &DenseFlavor) -> String {
    let (m, k, n) = (d.m, d.k, d.n);
    let tile = n.min(32);
    let (full, rest) = (n / tile.max(1), n % tile.max(1));
    let mut s = String::new();
    let _ = writeln!(s, "    for (size_t i = 0; i < {m}u; ++i) {{");
    let _ = writeln!(s, "        const {} *restrict xr = x0 + i * {k}u;", f.in_t);
    let piece = |t: usize, j0: &str| {
        let mut s = format!(
            "        {{
            const size_t j0 = {j0};
            {} t[{t}];
",
            f.acc_t
        );
        let init = match &f.bias {
            Some(b) => format!("{b}[j0 + l]"),
            None => "0".into(),
        };
        let _ = writeln!(
            s,
            "            for (size_t l = 0; l < {t}u; ++l)
                t[l] = {init};"
        );
        let _ = writeln!(s, "            for (size_t q = 0; q < {k}u; ++q) {{");
        let _ = writeln!(
            s,
            "                const {} v = {};",
            f.acc_t,
            f.load.replace("RAW", "xr[q]")
        );
        let _ = writeln!(
            s,
            "                const {} *restrict wr = {} + q * {n}u + j0;",
            f.w_t, f.weight
        );
        let _ = writeln!(
            s,
            "                for (size_t l = 0; l < {t}u; ++l)
                    t[l] += v * ({})wr[l];",
            f.acc_t
        );
        s.push_str(
            "            }
",
        );
        let _ = writeln!(
            s,
            "            for (size_t l = 0; l < {t}u; ++l) {{
                const {} v = t[l];
                y[i * {n}u + j0 + l] = {};
            }}
        }}",
            f.acc_t,
            (f.finish)("v", "j0 + l")
        );
        s
    };
    if full > 0 {
        let _ = writeln!(s, "        for (size_t jt = 0; jt < {full}u; ++jt)");
        s.push_str(&piece(tile, &format!("jt * {tile}u")));
    }
    if rest > 0 {
        s.push_str(&piece(rest, &format!("{}u", full * tile)));
    }
    s.push_str(
        "    }
",
    );
    s
}

/// Constant padding of `elem` values: fill, then copy the input inside.
pub fn pad(input: &[usize], pads: &[(usize, usize)], value: &str, elem: &str) -> String {
    let out: Vec<usize> = input
        .iter()
        .zip(pads)
        .map(|(d, (a, b))| d + a + b)
        .collect();
    let numel: usize = out.iter().product();
    let ost = strides(&out);
    let offset: usize = pads.iter().zip(&ost).map(|((a, _), s)| a * s).sum();
    let mut s =
        format!("    for (size_t i = 0; i < {numel}u; ++i)\n        y[i] = ({elem}){value};\n");
    s.push_str(&format!("    y += {offset}u;\n"));
    s.push_str(&loop_nest(input, &[ost, strides(input)], "    ", &|ix| {
        format!("y[{}] = x0[{}];\n", ix[0], ix[1])
    }));
    s
}

/// A pooling kernel over `elem` values (`float`, or `int8_t`: the window's values share
/// one quantization, so max and mean apply to the levels directly; `zero` is the level of
/// a real 0, which padding cells hold when an average counts them).
pub fn pool(
    kind: PoolKind,
    a: &spore_core::op::PoolAttrs,
    input: &[usize; 4],
    output: &[usize; 4],
    elem: &str,
    zero: i32,
) -> String {
    let int8 = elem == "int8_t";
    let [n, c, h, w] = *input;
    let [_, _, oh, ow] = *output;
    let ([kh, kw], [sh, sw]) = (a.kernel, a.stride);
    let (pt, pl) = (a.pads[0], a.pads[2]);
    // Cells an average that counts padding divides by: the whole window, less what ceil
    // mode's last windows reach past the bottom and right padding.
    let counted = if a.ceil_mode {
        let (hp, wp) = (h + pt + a.pads[1], w + pl + a.pads[3]);
        format!(
            "((y0 + {pt}L + {kh}L < {hp}L ? {kh}L : {hp}L - y0 - {pt}L) * (xb + {pl}L + {kw}L < {wp}L ? {kw}L : {wp}L - xb - {pl}L))"
        )
    } else {
        format!("{}L", kh * kw)
    };
    let mut s = String::new();
    let _ = writeln!(s, "    for (size_t p = 0; p < {}u; ++p) {{", n * c);
    let _ = writeln!(
        s,
        "        const {elem} *restrict xp = x0 + p * {}u;",
        h * w
    );
    let _ = writeln!(s, "        for (size_t oy = 0; oy < {oh}u; ++oy)");
    let _ = writeln!(s, "        for (size_t ox = 0; ox < {ow}u; ++ox) {{");
    let _ = writeln!(
        s,
        "            const long y0 = (long)(oy * {sh}u) - {pt}L, xb = (long)(ox * {sw}u) - {pl}L;"
    );
    let _ = writeln!(
        s,
        "            const long y1 = y0 + {kh}L < {h}L ? y0 + {kh}L : {h}L;"
    );
    let _ = writeln!(
        s,
        "            const long x1 = xb + {kw}L < {w}L ? xb + {kw}L : {w}L;"
    );
    let _ = writeln!(
        s,
        "            const long ya = y0 > 0 ? y0 : 0, xa = xb > 0 ? xb : 0;"
    );
    match kind {
        PoolKind::Max => s.push_str("            float m = -3.40282347e+38f;\n"),
        PoolKind::Avg => s.push_str("            float m = 0.0f;\n"),
    }
    s.push_str("            for (long yy = ya; yy < y1; ++yy)\n");
    s.push_str("                for (long xx = xa; xx < x1; ++xx) {\n");
    let _ = writeln!(
        s,
        "                    const float v = (float)xp[yy * {w}L + xx];"
    );
    match kind {
        PoolKind::Max => s.push_str("                    m = v > m ? v : m;\n"),
        PoolKind::Avg => s.push_str("                    m += v;\n"),
    }
    s.push_str("                }\n");
    let store = match kind {
        PoolKind::Max => "m".to_string(),
        PoolKind::Avg if a.count_include_pad && int8 => format!(
            "(m + (float)({zero} * ({counted} - (y1 - ya) * (x1 - xa)))) / (float)({counted})"
        ),
        PoolKind::Avg if a.count_include_pad => format!("m / (float)({counted})"),
        PoolKind::Avg => {
            "m / (float)((y1 - ya) * (x1 - xa) > 0 ? (y1 - ya) * (x1 - xa) : 1)".to_string()
        }
    };
    if int8 {
        // Round half away from zero without libm (microcontrollers).
        let _ = writeln!(
            s,
            "            {{\n                const float a = {store};\n                y[(p * {oh}u + oy) * {ow}u + ox] = (int8_t)(long)(a + (a >= 0.0f ? 0.5f : -0.5f));\n            }}"
        );
    } else {
        let _ = writeln!(s, "            y[(p * {oh}u + oy) * {ow}u + ox] = {store};");
    }
    s.push_str("        }\n    }\n");
    s
}

fn reduce(kind: ReduceFn, input: &[usize], axes: &[usize]) -> String {
    let out: Vec<usize> = input
        .iter()
        .enumerate()
        .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
        .collect();
    let numel: usize = out.iter().product();
    let ost = strides(&out);
    let write: Vec<usize> = (0..input.len())
        .map(|i| if axes.contains(&i) { 0 } else { ost[i] })
        .collect();
    let (init, update) = match kind {
        ReduceFn::Sum => ("0.0f", "y[I] += x0[J];"),
        ReduceFn::Max => ("-3.40282347e+38f", "y[I] = x0[J] > y[I] ? x0[J] : y[I];"),
        ReduceFn::Min => ("3.40282347e+38f", "y[I] = x0[J] < y[I] ? x0[J] : y[I];"),
    };
    let mut s = format!("    for (size_t i = 0; i < {numel}u; ++i)\n        y[i] = {init};\n");
    s.push_str(&loop_nest(input, &[write, strides(input)], "    ", &|ix| {
        format!("{}\n", update.replace('I', &ix[0]).replace('J', &ix[1]))
    }));
    s
}

fn concat(p: &Program, xs: &[(Operand, Vec<usize>)], axis: usize, names: &Names) -> String {
    let outer: usize = xs[0].1[..axis].iter().product();
    let total: usize = xs
        .iter()
        .map(|(_, s)| s[axis..].iter().product::<usize>())
        .sum();
    let mut s = String::new();
    let mut offset = 0;
    let mut next = 0;
    for (o, shape) in xs {
        let inner: usize = shape[axis..].iter().product();
        let src = match o {
            Operand::Value(_) => {
                next += 1;
                format!("x{}[i * {inner}u + j]", next - 1)
            }
            Operand::Const(c) => format!("{}[i * {inner}u + j]", names.weight(p, *c)),
            Operand::Scalar(v) => float_literal(*v),
        };
        let _ = writeln!(
            s,
            "    for (size_t i = 0; i < {outer}u; ++i)\n        for (size_t j = 0; j < {inner}u; ++j)\n            y[i * {total}u + {offset}u + j] = {src};"
        );
        offset += inner;
    }
    s
}
