//! Small pieces of C text: float literals that round-trip, and loop nests over
//! broadcast operands.
//!
//! ```
//! use spore_codegen::emit::c::{float_literal, loop_nest};
//! assert_eq!(float_literal(0.1), "0.1f");
//! assert_eq!(float_literal(3.0), "3.0f");
//! assert_eq!(float_literal(f32::NEG_INFINITY), "-INFINITY");
//! // [2, 3] + [3]: the second operand repeats along axis 0; the two axes stay separate.
//! let code = loop_nest(&[2, 3], &[vec![3, 1], vec![0, 1]], "    ", &|ix| format!("y[{}] = b[{}];\n", ix[0], ix[1]));
//! assert!(code.contains("for (size_t i0 = 0; i0 < 2u; ++i0)"));
//! assert!(code.contains("y[i0 * 3u + i1] = b[i1];"));
//! ```

use std::fmt::Write;

/// A float32 literal C reads back to the same bits (Rust prints the shortest decimal
/// that round-trips); infinities and NaN as `<math.h>`'s constants (weights are checked
/// finite before they get here, a padding value or a scalar may not be).
pub fn float_literal(v: f32) -> String {
    if v.is_nan() {
        return "NAN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "INFINITY" } else { "-INFINITY" }.into();
    }
    let s = format!("{v:?}");
    if s.contains(['.', 'e', 'E']) {
        format!("{s}f")
    } else {
        format!("{s}.0f")
    }
}

/// Contiguous (row-major) strides of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Strides that read an operand of `shape` (padded on the left with ones) broadcast to
/// `out`: 0 along the axes it repeats.
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let mut padded = vec![1; out.len() - shape.len().min(out.len())];
    padded.extend_from_slice(shape);
    let s = strides(&padded);
    padded
        .iter()
        .zip(out)
        .zip(s)
        .map(|((&d, &o), s)| if d == 1 && o != 1 { 0 } else { s })
        .collect()
}

/// Merges neighbouring axes that every operand walks as one (`stride[i] = stride[i+1] *
/// shape[i+1]` for all of them), and drops axes of length 1.
fn collapse(shape: &[usize], strides: &[Vec<usize>]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let keep: Vec<usize> = (0..shape.len()).filter(|&i| shape[i] != 1).collect();
    let mut dims: Vec<usize> = vec![];
    let mut st: Vec<Vec<usize>> = vec![vec![]; strides.len()];
    for &i in &keep {
        let mergeable = !dims.is_empty()
            && strides.iter().enumerate().all(|(k, s)| {
                let last = *st[k].last().unwrap_or(&0);
                last == s[i] * shape[i]
            });
        if let (true, Some(d)) = (mergeable, dims.last_mut()) {
            *d *= shape[i];
            for (k, s) in strides.iter().enumerate() {
                if let Some(last) = st[k].last_mut() {
                    *last = s[i];
                }
            }
        } else {
            dims.push(shape[i]);
            for (k, s) in strides.iter().enumerate() {
                st[k].push(s[i]);
            }
        }
    }
    (dims, st)
}

/// A loop nest over `shape`; `body` gets one index expression per operand (its
/// `strides`) and returns the statements of the innermost loop.
pub fn loop_nest(
    shape: &[usize],
    strides: &[Vec<usize>],
    indent: &str,
    body: &dyn Fn(&[String]) -> String,
) -> String {
    let (dims, st) = collapse(shape, strides);
    let mut out = String::new();
    let mut pad = indent.to_string();
    for (i, d) in dims.iter().enumerate() {
        let _ = writeln!(out, "{pad}for (size_t i{i} = 0; i{i} < {d}u; ++i{i})");
        pad.push_str("    ");
    }
    let index: Vec<String> = st
        .iter()
        .map(|s| {
            let terms: Vec<String> = s
                .iter()
                .enumerate()
                .filter(|&(_, &k)| k != 0)
                .map(|(i, &k)| {
                    if k == 1 {
                        format!("i{i}")
                    } else {
                        format!("i{i} * {k}u")
                    }
                })
                .collect();
            if terms.is_empty() {
                "0".to_string()
            } else {
                terms.join(" + ")
            }
        })
        .collect();
    if dims.is_empty() {
        let _ = write!(out, "{pad}{{\n{pad}    ");
        out.push_str(&body(&index));
        let _ = writeln!(out, "{pad}}}");
    } else {
        let _ = write!(out, "{pad}");
        out.push_str(&body(&index));
    }
    out
}
