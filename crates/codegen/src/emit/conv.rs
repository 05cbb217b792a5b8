//! Convolution loops, for float32 and int8 alike ([`ConvFlavor`] spells the arithmetic).
//!
//! Each output row is computed in tiles: `B` (up to 8) output channels times 8
//! neighbouring columns of sums stay in registers for the whole reduction over input
//! channels and kernel taps, so each input vector loaded feeds `B` multiply-adds and each
//! weight loaded feeds 8 (the register blocking of a GEMM microkernel, written as
//! fixed-size loops GCC vectorises at `-O2`; at `-O3` it unrolls them and loses the vector
//! form). Lowering gives every convolution a zero-padded copy of its input, so tiles cover
//! every column; a padded convolution built by hand takes a loop with bounds checks for
//! the columns next to the border. Weights are packed `[OC/B][IC/groups][KH][KW][B]` at
//! generation time, so a tile's weights for one tap are `B` consecutive values. The rows
//! of a fused max pool are computed together, then reduced. The row sums live on the
//! stack (`B` × pool rows × output width values; [`crate::Report::stack_bytes`]).
//!
//! ```
//! use spore_codegen::emit::conv::{channel_block, pack_weights};
//! // Two output channels of one weight each, in blocks of two: interleaved.
//! assert_eq!(channel_block(2), 2);
//! assert_eq!(pack_weights(&[1.0, 2.0, 3.0, 4.0], 2, 2), vec![1.0, 3.0, 2.0, 4.0]);
//! ```

use std::fmt::Write;

use crate::program::Conv;

/// C text made from C text (a sum's expression, an index's expression).
pub type Spell = Box<dyn Fn(&str) -> String>;
/// C text made from two pieces of C text.
pub type Spell2 = Box<dyn Fn(&str, &str) -> String>;

/// How a convolution's arithmetic is spelled: float32, or int8 with int32 sums.
pub struct ConvFlavor {
    /// Element types of the input, the sums and the output.
    pub in_t: &'static str,
    pub acc_t: &'static str,
    pub out_t: &'static str,
    /// The loaded input element as a sum term (`RAW` stands for the element).
    pub load: String,
    /// The packed weight array and the bias array (read at `o0 + o`), if any.
    pub weight: String,
    pub bias: Option<String>,
    /// From a sum (`v`, of output channel `o0 + o`) to the stored value, activation included.
    pub finish: Spell,
}

/// Output channels computed together for `per_group` output channels per group.
pub fn channel_block(per_group: usize) -> usize {
    [8, 4, 2, 1]
        .into_iter()
        .find(|b| per_group.is_multiple_of(*b))
        .unwrap_or(1)
}

/// Bytes of stack a convolution's kernel uses for its sums: the rows of one channel block
/// (times the fused pool's rows) and one register tile.
pub fn stack_bytes(c: &Conv) -> usize {
    let block = channel_block(c.conv[1] / c.attrs.groups.max(1));
    let rows = c.pool.map_or(1, |p| p.size);
    4 * block * (rows * c.conv[3] + 8)
}

/// `[OC][per]` weights to `[OC/block][per][block]`.
pub fn pack_weights<T: Copy>(w: &[T], oc: usize, block: usize) -> Vec<T> {
    let per = w.len() / oc.max(1);
    let mut out = Vec::with_capacity(w.len());
    for ob in 0..oc / block {
        for i in 0..per {
            for o in 0..block {
                out.push(w[(ob * block + o) * per + i]);
            }
        }
    }
    out
}

/// The output channel of element `i` of a packed weight.
pub fn packed_channel(i: usize, per: usize, block: usize) -> usize {
    (i / (per * block)) * block + i % block
}

/// For kernel column `kx`: the output columns whose input column lies inside the image.
fn column_range(c: &Conv, kx: usize) -> (usize, usize) {
    let (w, ow) = (c.input[3] as isize, c.conv[3] as isize);
    let (s, d, pl) = (
        c.attrs.stride[1] as isize,
        c.attrs.dilation[1] as isize,
        c.attrs.pads[2] as isize,
    );
    let off = kx as isize * d - pl;
    // iw = ox * s + off must satisfy 0 <= iw < w.
    let lo = if off >= 0 { 0 } else { (-off + s - 1) / s };
    let hi = if w - 1 - off < 0 {
        0
    } else {
        ((w - 1 - off) / s + 1).min(ow)
    };
    (lo.clamp(0, ow) as usize, hi.max(lo).clamp(0, ow) as usize)
}

/// Geometry shared by the pieces below.
struct Shape {
    h: usize,
    w: usize,
    icg: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    dh: usize,
    dw: usize,
    pt: usize,
    pl: usize,
    block: usize,
}

impl Shape {
    /// The reduction over input channels and kernel rows, `body` inside (with `xr` the
    /// input row and `wk` the packed weights of the row's first tap).
    fn reduction(&self, indent: &str, f: &ConvFlavor, body: &str) -> String {
        let Shape {
            h,
            w,
            icg,
            kh,
            kw,
            sh,
            dh,
            pt,
            block,
            ..
        } = *self;
        let mut s = String::new();
        let _ = writeln!(s, "{indent}for (size_t ic = 0; ic < {icg}u; ++ic)");
        let _ = writeln!(s, "{indent}for (size_t ky = 0; ky < {kh}u; ++ky) {{");
        let _ = writeln!(
            s,
            "{indent}    const long iy = (long)(oy * {sh}u + ky * {dh}u) - {pt}L;"
        );
        let _ = writeln!(
            s,
            "{indent}    if (iy < 0 || iy >= {h}L)\n{indent}        continue;"
        );
        let _ = writeln!(
            s,
            "{indent}    const {} *restrict xr = xg + ic * {}u + (size_t)iy * {w}u;",
            f.in_t,
            h * w
        );
        let _ = writeln!(
            s,
            "{indent}    const {} *restrict wk = wb + (ic * {kh}u + ky) * {}u;",
            weight_t(f),
            kw * block
        );
        s.push_str(body);
        let _ = writeln!(s, "{indent}}}");
        s
    }

    /// A tile of `t` columns from `j0` (an expression), all taps inside the image.
    fn tile(&self, f: &ConvFlavor, t: usize, j0: &str) -> String {
        let Shape {
            kw,
            sw,
            dw,
            pl,
            block,
            ..
        } = *self;
        let ind = "                ";
        let mut s = format!("{ind}{{\n{ind}    const size_t j0 = {j0};\n");
        for o in 0..block {
            let init = match &f.bias {
                Some(b) => format!("{b}[o0 + {o}u]"),
                None => "0".into(),
            };
            let _ = writeln!(s, "{ind}    {} t{o}[{t}];", f.acc_t);
            let _ = writeln!(
                s,
                "{ind}    for (size_t l = 0; l < {t}u; ++l)\n{ind}        t{o}[l] = {init};"
            );
        }
        let mut body = String::new();
        let _ = writeln!(
            body,
            "{ind}        for (size_t kx = 0; kx < {kw}u; ++kx) {{"
        );
        for o in 0..block {
            let _ = writeln!(
                body,
                "{ind}            const {} w{o} = wk[kx * {block}u + {o}u];",
                f.acc_t
            );
        }
        let _ = writeln!(
            body,
            "{ind}            const {} *restrict xp = xr + j0 * {sw}u + kx * {dw}u - {pl}u;",
            f.in_t
        );
        let _ = writeln!(
            body,
            "{ind}            for (size_t l = 0; l < {t}u; ++l) {{"
        );
        let _ = writeln!(
            body,
            "{ind}                const {} v = {};",
            f.acc_t,
            f.load.replace("RAW", &format!("xp[l * {sw}u]"))
        );
        for o in 0..block {
            let _ = writeln!(body, "{ind}                t{o}[l] += w{o} * v;");
        }
        let _ = writeln!(body, "{ind}            }}\n{ind}        }}");
        s.push_str(&self.reduction(&format!("{ind}    "), f, &body));
        for o in 0..block {
            let _ = writeln!(
                s,
                "{ind}    for (size_t l = 0; l < {t}u; ++l)\n{ind}        acc[{o}][r][j0 + l] = t{o}[l];"
            );
        }
        let _ = writeln!(s, "{ind}}}");
        s
    }

    /// Column `j` (an expression) with bounds checks on every tap.
    fn edge(&self, f: &ConvFlavor) -> String {
        let Shape {
            kw,
            sw,
            dw,
            pl,
            w,
            block,
            ..
        } = *self;
        let ind = "                    ";
        let mut s = String::new();
        for o in 0..block {
            let init = match &f.bias {
                Some(b) => format!("{b}[o0 + {o}u]"),
                None => "0".into(),
            };
            let _ = writeln!(s, "{ind}{} e{o} = {init};", f.acc_t);
        }
        let mut body = String::new();
        let _ = writeln!(body, "{ind}    for (size_t kx = 0; kx < {kw}u; ++kx) {{");
        let _ = writeln!(
            body,
            "{ind}        const long ix = (long)(j * {sw}u + kx * {dw}u) - {pl}L;"
        );
        let _ = writeln!(
            body,
            "{ind}        if (ix < 0 || ix >= {w}L)\n{ind}            continue;"
        );
        let _ = writeln!(
            body,
            "{ind}        {{\n{ind}            const {} v = {};",
            f.acc_t,
            f.load.replace("RAW", "xr[ix]")
        );
        for o in 0..block {
            let _ = writeln!(
                body,
                "{ind}            e{o} += ({})wk[kx * {block}u + {o}u] * v;",
                f.acc_t
            );
        }
        let _ = writeln!(body, "{ind}        }}\n{ind}    }}");
        s.push_str(&self.reduction(ind, f, &body));
        for o in 0..block {
            let _ = writeln!(s, "{ind}acc[{o}][r][j] = e{o};");
        }
        s
    }
}

fn weight_t(f: &ConvFlavor) -> &'static str {
    if f.in_t == "int8_t" {
        "int8_t"
    } else {
        "float"
    }
}

/// A convolution's loops in any flavour.
pub fn conv_body(c: &Conv, f: &ConvFlavor) -> String {
    let [n, ch, h, w] = c.input;
    let [_, oc, oh, ow] = c.conv;
    let [kh, kw] = c.kernel;
    let g = c.attrs.groups.max(1);
    let (icg, ocg) = (ch / g, oc / g);
    let block = channel_block(ocg);
    let sh = Shape {
        h,
        w,
        icg,
        kh,
        kw,
        sh: c.attrs.stride[0],
        sw: c.attrs.stride[1],
        dh: c.attrs.dilation[0],
        dw: c.attrs.dilation[1],
        pt: c.attrs.pads[0],
        pl: c.attrs.pads[2],
        block,
    };
    let out = c.output();
    let ph = out[2];
    let (prow, rows_out) = match c.pool {
        Some(pl) => (pl.size, ph),
        None => (1, oh),
    };
    // Columns every tap of which is inside the image: tiles; the rest: edges.
    let ranges: Vec<(usize, usize)> = (0..kw).map(|k| column_range(c, k)).collect();
    let lo = ranges.iter().map(|r| r.0).max().unwrap_or(0);
    let hi = ranges.iter().map(|r| r.1).min().unwrap_or(0).max(lo);
    let width = hi - lo;
    let tile = width.min(8);
    let (full_tiles, rest) = width
        .checked_div(tile)
        .map_or((0, 0), |n| (n, width % tile));
    let per_block = icg * kh * kw * block;
    let mut s = String::new();
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
    let _ = writeln!(
        s,
        "        const {} *restrict wb = {} + (o0 / {block}u) * {per_block}u;",
        weight_t(f),
        f.weight
    );
    let _ = writeln!(s, "        for (size_t r0 = 0; r0 < {rows_out}u; ++r0) {{");
    let _ = writeln!(s, "            for (size_t r = 0; r < {prow}u; ++r) {{");
    let _ = writeln!(s, "                const size_t oy = r0 * {prow}u + r;");
    if full_tiles > 0 {
        let _ = writeln!(
            s,
            "                for (size_t jt = 0; jt < {full_tiles}u; ++jt)"
        );
        s.push_str(&sh.tile(f, tile, &format!("{lo}u + jt * {tile}u")));
    }
    if rest > 0 {
        s.push_str(&sh.tile(f, rest, &format!("{}u", lo + full_tiles * tile)));
    }
    let edges: Vec<(usize, usize)> = [(0, lo), (hi, ow)]
        .into_iter()
        .filter(|(a, b)| b > a)
        .collect();
    for (a, b) in edges {
        let _ = writeln!(s, "                for (size_t j = {a}u; j < {b}u; ++j) {{");
        s.push_str(&sh.edge(f));
        s.push_str("                }\n");
    }
    s.push_str("            }\n");
    s.push_str(&store_rows(c, f, block));
    s.push_str("            }\n        }\n    }\n");
    s
}

/// The end of one output row (or pooled row): the activation, the pool, the store.
fn store_rows(c: &Conv, f: &ConvFlavor, block: usize) -> String {
    let [_, oc, _, ow] = c.conv;
    let [_, _, ph, pw] = c.output();
    let mut s = String::new();
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
            // The activation and the requantization never decrease, so the maximum of
            // the sums goes through them once: the same value as pooling after them.
            let k = pool.size;
            let _ = writeln!(s, "                for (size_t j = 0; j < {pw}u; ++j) {{");
            let _ = writeln!(
                s,
                "                    {} m = acc[o][0][j * {k}u];",
                f.acc_t
            );
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
            s.push_str("                            m = v > m ? v : m;\n");
            s.push_str("                        }\n");
            let _ = writeln!(s, "                    yr[j] = {};", (f.finish)("m"));
            s.push_str("                }\n");
        }
    }
    s
}
