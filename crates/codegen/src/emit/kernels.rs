//! The float32 kernels, one C function per step, each with its shapes written in as
//! literals so the compiler can unroll and vectorise it.
//!
//! Convolutions walk one output row at a time: for every weight the innermost loop runs
//! along the row (contiguous input for stride 1), which compilers vectorise; output
//! channels go four at a time where they can, so each input row loaded feeds four
//! accumulators. A fused pool computes the rows of one pooled row, then reduces them.

use std::fmt::Write;

use spore_kernels::{BinaryFn, ReduceFn, UnaryFn};

use super::c::{broadcast_strides, float_literal, loop_nest, strides};
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
        } => pool(*kind, attrs, input, output, "float"),
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

/// For kernel column `kw`: the output columns whose input column lies inside the image.
fn column_range(c: &Conv, kw: usize) -> (usize, usize) {
    let (w, ow) = (c.input[3] as isize, c.conv[3] as isize);
    let (s, d, pl) = (
        c.attrs.stride[1] as isize,
        c.attrs.dilation[1] as isize,
        c.attrs.pads[2] as isize,
    );
    let off = kw as isize * d - pl;
    // iw = ow * s + off must satisfy 0 <= iw < w.
    let lo = if off >= 0 { 0 } else { (-off + s - 1) / s };
    let hi = if w - 1 - off < 0 {
        0
    } else {
        ((w - 1 - off) / s + 1).min(ow)
    };
    (lo.clamp(0, ow) as usize, hi.max(lo).clamp(0, ow) as usize)
}

/// How a convolution's arithmetic is spelled: float32, or int8 with int32 sums.
pub struct ConvFlavor {
    /// Element types of the input, the sums and the output.
    pub in_t: &'static str,
    pub acc_t: &'static str,
    pub out_t: &'static str,
    /// The loaded input element as a sum term (`RAW` stands for the element).
    pub load: String,
    /// The weight array and the bias array (read at `o0 + o`), if any.
    pub weight: String,
    pub bias: Option<String>,
    /// From a sum (`v`, of output channel `o0 + o`) to the stored value, activation included.
    pub finish: Box<dyn Fn(&str) -> String>,
    /// The stored value of an average pool from the sum `m` of `count` stored values.
    pub average: Box<dyn Fn(&str, usize) -> String>,
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
            average: Box::new(|m, count| format!("{m} / {count}.0f")),
        },
    )
}

/// A convolution's loops in any flavour.
pub fn conv_body(c: &Conv, f: &ConvFlavor) -> String {
    let [n, ch, h, w] = c.input;
    let [_, oc, oh, ow] = c.conv;
    let [kh, kw] = c.kernel;
    let g = c.attrs.groups.max(1);
    let (icg, ocg) = (ch / g, oc / g);
    let (sh, sw) = (c.attrs.stride[0], c.attrs.stride[1]);
    let (dh, dw) = (c.attrs.dilation[0], c.attrs.dilation[1]);
    let pt = c.attrs.pads[0];
    let out = c.output();
    let (ph, pw) = (out[2], out[3]);
    let (prow, rows_out) = match c.pool {
        Some(pl) => (pl.size, ph),
        None => (1, oh),
    };
    // Output channels computed together: each input row loaded feeds `block` rows of sums.
    let block = [4, 2, 1].into_iter().find(|b| ocg % b == 0).unwrap_or(1);
    let wname = &f.weight;
    let ranges: Vec<(usize, usize)> = (0..kw).map(|k| column_range(c, k)).collect();
    let full = ranges.iter().all(|&r| r == (0, ow));
    let mut s = String::new();
    if !full {
        let lo: Vec<String> = ranges.iter().map(|r| r.0.to_string()).collect();
        let hi: Vec<String> = ranges.iter().map(|r| r.1.to_string()).collect();
        let _ = writeln!(
            s,
            "    static const unsigned short lo[{kw}] = {{{}}};\n    static const unsigned short hi[{kw}] = {{{}}};",
            lo.join(", "),
            hi.join(", ")
        );
    }
    let _ = writeln!(s, "    {} acc[{block}][{prow}][{ow}];", f.acc_t);
    let _ = writeln!(s, "    for (size_t b = 0; b < {n}u; ++b)");
    let _ = writeln!(s, "    for (size_t g = 0; g < {g}u; ++g)");
    let _ = writeln!(
        s,
        "    for (size_t o0 = g * {ocg}u; o0 < (g + 1u) * {ocg}u; o0 += {block}u) {{"
    );
    let _ = writeln!(
        s,
        "        const {} *restrict xg = x0 + (b * {ch}u + g * {icg}u) * {}u;",
        f.in_t,
        h * w
    );
    let _ = writeln!(s, "        for (size_t r0 = 0; r0 < {rows_out}u; ++r0) {{");
    // Initialise with the bias.
    let _ = writeln!(s, "            for (size_t o = 0; o < {block}u; ++o)");
    let _ = writeln!(s, "                for (size_t r = 0; r < {prow}u; ++r)");
    let _ = writeln!(s, "                    for (size_t j = 0; j < {ow}u; ++j)");
    let init = match &f.bias {
        Some(bi) => format!("{bi}[o0 + o]"),
        None => "0".into(),
    };
    let _ = writeln!(s, "                        acc[o][r][j] = {init};");
    let _ = writeln!(s, "            for (size_t r = 0; r < {prow}u; ++r) {{");
    let _ = writeln!(s, "                const size_t oy = r0 * {prow}u + r;");
    let _ = writeln!(s, "                for (size_t ic = 0; ic < {icg}u; ++ic)");
    let _ = writeln!(
        s,
        "                for (size_t ky = 0; ky < {kh}u; ++ky) {{"
    );
    let _ = writeln!(
        s,
        "                    const long iy = (long)(oy * {sh}u + ky * {dh}u) - {pt}L;"
    );
    let _ = writeln!(
        s,
        "                    if (iy < 0 || iy >= {h}L)\n                        continue;"
    );
    let _ = writeln!(
        s,
        "                    const {} *restrict xr = xg + ic * {}u + (size_t)iy * {w}u;",
        f.in_t,
        h * w
    );
    let _ = writeln!(
        s,
        "                    for (size_t kx = 0; kx < {kw}u; ++kx) {{"
    );
    let _ = writeln!(
        s,
        "                        const size_t wi = (ic * {kh}u + ky) * {kw}u + kx;"
    );
    for o in 0..block {
        let _ = writeln!(
            s,
            "                        const {} w{o} = {wname}[(o0 + {o}u) * {}u + wi];",
            f.acc_t,
            icg * kh * kw
        );
    }
    let (from, to) = if full {
        ("0".to_string(), format!("{ow}u"))
    } else {
        ("lo[kx]".to_string(), "hi[kx]".to_string())
    };
    let pl = c.attrs.pads[2];
    let _ = writeln!(
        s,
        "                        for (size_t j = {from}; j < {to}; ++j) {{"
    );
    let _ = writeln!(
        s,
        "                            const {} v = {};",
        f.acc_t,
        f.load
            .replace("RAW", &format!("xr[j * {sw}u + kx * {dw}u - {pl}u]"))
    );
    for o in 0..block {
        let _ = writeln!(s, "                            acc[{o}][r][j] += w{o} * v;");
    }
    s.push_str(
        "                        }\n                    }\n                }\n            }\n",
    );
    // Activation, pooling, store.
    let _ = writeln!(s, "            for (size_t o = 0; o < {block}u; ++o) {{");
    let _ = writeln!(
        s,
        "                {} *restrict yr = y + ((b * {oc}u + o0 + o) * {ph}u + r0) * {pw}u;",
        f.out_t
    );
    match c.pool {
        None => {
            let _ = writeln!(s, "                for (size_t j = 0; j < {ow}u; ++j) {{");
            let _ = writeln!(s, "                    const {} v = acc[o][0][j];", f.acc_t);
            let _ = writeln!(s, "                    yr[j] = {};", (f.finish)("v"));
            s.push_str("                }\n");
        }
        Some(pool) => {
            let k = pool.size;
            let (m_t, m0) = match pool.kind {
                PoolKind::Max => (
                    f.out_t,
                    (f.finish)("acc[o][0][j * KK]").replace("KK", &format!("{k}u")),
                ),
                PoolKind::Avg => (f.acc_t, "0".to_string()),
            };
            let _ = writeln!(s, "                for (size_t j = 0; j < {pw}u; ++j) {{");
            let _ = writeln!(s, "                    {m_t} m = {m0};");
            let _ = writeln!(s, "                    for (size_t r = 0; r < {k}u; ++r)");
            let _ = writeln!(
                s,
                "                        for (size_t q = 0; q < {k}u; ++q) {{"
            );
            let _ = writeln!(
                s,
                "                            const {} v = acc[o][r][j * {k}u + q];",
                f.acc_t
            );
            let _ = writeln!(
                s,
                "                            const {} a = {};",
                f.out_t,
                (f.finish)("v")
            );
            match pool.kind {
                PoolKind::Max => s.push_str("                            m = a > m ? a : m;\n"),
                PoolKind::Avg => s.push_str("                            m += a;\n"),
            }
            s.push_str("                        }\n");
            match pool.kind {
                PoolKind::Max => s.push_str("                    yr[j] = m;\n"),
                PoolKind::Avg => {
                    let _ = writeln!(
                        s,
                        "                    yr[j] = {};",
                        (f.average)("m", k * k)
                    );
                }
            }
            s.push_str("                }\n");
        }
    }
    s.push_str("            }\n        }\n    }\n");
    s
}

fn dense(p: &Program, d: &Dense, names: &Names) -> String {
    let (m, k, n) = (d.m, d.k, d.n);
    let w = names.weight(p, d.w);
    let mut s = String::new();
    let _ = writeln!(s, "    for (size_t i = 0; i < {m}u; ++i) {{");
    let _ = writeln!(s, "        const float *restrict xr = x0 + i * {k}u;");
    let _ = writeln!(s, "        float *restrict yr = y + i * {n}u;");
    let init = match d.bias {
        Some(b) => format!("{}[j]", names.weight(p, b)),
        None => "0.0f".into(),
    };
    let _ = writeln!(
        s,
        "        for (size_t j = 0; j < {n}u; ++j)\n            yr[j] = {init};"
    );
    let _ = writeln!(s, "        for (size_t t = 0; t < {k}u; ++t) {{");
    let _ = writeln!(s, "            const float v = xr[t];");
    let _ = writeln!(s, "            const float *restrict wr = {w} + t * {n}u;");
    let _ = writeln!(
        s,
        "            for (size_t j = 0; j < {n}u; ++j)\n                yr[j] += v * wr[j];"
    );
    s.push_str("        }\n");
    if d.act != Act::None {
        let _ = writeln!(s, "        for (size_t j = 0; j < {n}u; ++j) {{");
        let _ = writeln!(s, "            const float v = yr[j];");
        let _ = writeln!(s, "            yr[j] = {};", act_c(d.act, "v"));
        s.push_str("        }\n");
    }
    s.push_str("    }\n");
    s
}

/// A pooling kernel over `elem` values (`float`, or `int8_t`: the window's values share
/// one quantization, so max and mean apply to the levels directly).
pub fn pool(
    kind: PoolKind,
    a: &spore_core::op::PoolAttrs,
    input: &[usize; 4],
    output: &[usize; 4],
    elem: &str,
) -> String {
    let int8 = elem == "int8_t";
    let [n, c, h, w] = *input;
    let [_, _, oh, ow] = *output;
    let ([kh, kw], [sh, sw]) = (a.kernel, a.stride);
    let (pt, pl) = (a.pads[0], a.pads[2]);
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
        PoolKind::Avg if a.count_include_pad => format!("m / {}.0f", kh * kw),
        PoolKind::Avg => {
            "m / (float)((y1 - ya) * (x1 - xa) > 0 ? (y1 - ya) * (x1 - xa) : 1)".to_string()
        }
    };
    let store = if int8 {
        format!("(int8_t)lroundf({store})")
    } else {
        store
    };
    let _ = writeln!(s, "            y[(p * {oh}u + oy) * {ow}u + ox] = {store};");
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
