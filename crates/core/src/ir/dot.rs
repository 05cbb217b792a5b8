//! Graphviz output: one box per node (operator and result type), edges for data flow,
//! control-flow sub-graphs as clusters. `dot -Tsvg file.dot` renders it.
//!
//! ```
//! use spore_core::{trace::trace, DType, TensorType};
//! let g = trace("f", &[TensorType::new(&[2], DType::F32)], |x| Ok(vec![x[0].exp()?])).unwrap();
//! let dot = g.to_dot();
//! assert!(dot.starts_with("digraph") && dot.contains("n0 -> n1"));
//! ```

use std::fmt::Write;

use super::printer::type_string;
use super::{Graph, NodeKind};

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

impl Graph {
    pub fn to_dot(&self) -> String {
        let mut out = String::from(
            "digraph spore {\n  rankdir=TB;\n  node [shape=box, fontname=\"Helvetica\", fontsize=10];\n",
        );
        let mut counter = 0;
        write_body(self, "n", &mut out, &mut counter);
        out.push_str("}\n");
        out
    }
}

fn write_body(g: &Graph, prefix: &str, out: &mut String, counter: &mut usize) {
    for (id, n) in g.nodes.iter().enumerate() {
        let (label, style) = match &n.kind {
            NodeKind::Input(i) => (format!("input {i}"), "shape=ellipse"),
            NodeKind::Parameter(i) => (
                format!(
                    "param {}",
                    g.params.get(*i).map(|p| p.name()).unwrap_or_default()
                ),
                "shape=ellipse, style=filled, fillcolor=lightyellow",
            ),
            NodeKind::RandomKey(i) => (format!("random key {i}"), "shape=ellipse"),
            NodeKind::Constant(_) => ("constant".to_string(), "shape=ellipse, style=dashed"),
            NodeKind::Op { op, .. } => (op.name(), "style=filled, fillcolor=lightblue"),
            NodeKind::Cond { .. } => ("Cond".to_string(), "shape=diamond"),
            NodeKind::While { .. } => ("While".to_string(), "shape=diamond"),
            NodeKind::GetItem { index, .. } => (format!("get {index}"), "shape=plain"),
        };
        let _ = writeln!(
            out,
            "  {prefix}{id} [label=\"{}\\n{}\\n{}\", {style}];",
            escape(&label),
            escape(&type_string(n.ty())),
            escape(&n.name)
        );
        for a in n.args() {
            let _ = writeln!(out, "  {prefix}{a} -> {prefix}{id};");
        }
        let mut cluster = |sub: &Graph, tag: &str| {
            *counter += 1;
            let p = format!("{prefix}c{}_", *counter);
            let _ = writeln!(
                out,
                "  subgraph cluster_{} {{\n  label=\"{}\";",
                *counter,
                escape(&format!("{tag} {}", sub.name))
            );
            write_body(sub, &p, out, counter);
            let _ = writeln!(out, "  }}");
        };
        match &n.kind {
            NodeKind::Cond {
                then_branch,
                else_branch,
                ..
            } => {
                cluster(then_branch, "then");
                cluster(else_branch, "else");
            }
            NodeKind::While { cond, body, .. } => {
                cluster(cond, "cond");
                cluster(body, "body");
            }
            _ => {}
        }
    }
    for (k, &o) in g.outputs.iter().enumerate() {
        let _ = writeln!(
            out,
            "  {prefix}out{k} [label=\"output {k}\", shape=ellipse];\n  {prefix}{o} -> {prefix}out{k};"
        );
    }
}
