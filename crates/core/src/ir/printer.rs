//! The `.ir` text form, in the spirit of MindSpore's: one line per node with its
//! operator, arguments, attributes, types, full scope name and the user's source line.
//!
//! ```
//! use spore_core::{trace::trace, DType, TensorType};
//! let g = trace("f", &[TensorType::new(&[2], DType::F32)], |x| Ok(vec![x[0].exp()?])).unwrap();
//! let text = g.to_ir();
//! assert!(text.contains("%1 = Exp(%0)"));
//! assert!(text.contains("-> Tensor(F32)[2]"));
//! assert!(text.contains("# In file "));
//! ```

use std::fmt::Write;

use spore_kernels::DType;

use super::{Graph, NodeKind};
use crate::op::Op;
use crate::tensor::TensorType;

fn short(d: DType) -> &'static str {
    match d {
        DType::F32 => "F32",
        DType::F64 => "F64",
        DType::F16 => "F16",
        DType::BF16 => "BF16",
        DType::I32 => "I32",
        DType::I64 => "I64",
        DType::U8 => "U8",
        DType::Bool => "Bool",
    }
}

/// `Tensor(F32)[2, 3]`, MindSpore's way of writing a type.
pub fn type_string(t: &TensorType) -> String {
    format!("Tensor({}){:?}", short(t.dtype), t.shape)
}

/// The attributes of an op as ` {...}`, empty for ops without any (taken from the
/// variant's `Debug` form: the text inside its outermost parentheses or braces).
pub fn attrs_string(op: &Op) -> String {
    if matches!(op, Op::Unary(_) | Op::Binary(_) | Op::Compare(_)) {
        return String::new();
    }
    let dbg = format!("{op:?}");
    match dbg.find(['(', '{']) {
        Some(i) if dbg.len() > i + 1 => format!(" {{{}}}", dbg[i + 1..dbg.len() - 1].trim()),
        _ => String::new(),
    }
}

impl Graph {
    /// The graph as `.ir` text; sub-graphs of control-flow nodes follow the main graph.
    pub fn to_ir(&self) -> String {
        let mut out = String::new();
        let mut subgraphs = vec![];
        write_graph(self, &mut out, &mut subgraphs);
        let mut k = 0;
        while k < subgraphs.len() {
            let g = subgraphs[k].clone();
            out.push('\n');
            write_graph(&g, &mut out, &mut subgraphs);
            k += 1;
        }
        out
    }
}

fn write_graph(g: &Graph, out: &mut String, subgraphs: &mut Vec<Graph>) {
    let _ = writeln!(
        out,
        "# IR of {}: {} nodes, {} ops",
        g.name,
        g.nodes.len(),
        g.op_count()
    );
    let _ = writeln!(out, "funcgraph {}(", g.name);
    for (i, &v) in g.inputs.iter().enumerate() {
        let _ = writeln!(
            out,
            "    %{v} : {}    # input {i}",
            type_string(g.nodes[v].ty())
        );
    }
    for (i, p) in g.params.iter().enumerate() {
        let _ = writeln!(
            out,
            "    param {i} : Ref[{}]    # {}",
            type_string(&p.tensor_type()),
            p.name()
        );
    }
    let _ = writeln!(out, ") {{");
    for (id, n) in g.nodes.iter().enumerate() {
        let types: Vec<String> = n.types.iter().map(type_string).collect();
        let ty = if types.len() == 1 {
            types[0].clone()
        } else {
            format!("({})", types.join(", "))
        };
        let args = |vs: &[usize]| {
            vs.iter()
                .map(|a| format!("%{a}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let body = match &n.kind {
            NodeKind::Input(i) => format!("Input({i})"),
            NodeKind::Parameter(i) => format!(
                "Parameter({i}: {})",
                g.params.get(*i).map(|p| p.name()).unwrap_or_default()
            ),
            NodeKind::RandomKey(i) => format!("RandomKey({i})"),
            NodeKind::Constant(t) => {
                if t.numel() <= 4 {
                    format!("Constant({:?})", t.to_f64_vec().unwrap_or_default())
                } else {
                    "Constant(...)".to_string()
                }
            }
            NodeKind::Op { op, args: a } => {
                format!("{}({}){}", op.name(), args(a), attrs_string(op))
            }
            NodeKind::Cond {
                pred,
                then_args,
                else_args,
                then_branch,
                else_branch,
            } => {
                subgraphs.push((**then_branch).clone());
                subgraphs.push((**else_branch).clone());
                format!(
                    "Cond(%{pred}, then={}({}), else={}({}))",
                    then_branch.name,
                    args(then_args),
                    else_branch.name,
                    args(else_args)
                )
            }
            NodeKind::While {
                init,
                cond_args,
                body_args,
                cond,
                body,
            } => {
                subgraphs.push((**cond).clone());
                subgraphs.push((**body).clone());
                format!(
                    "While(init=({}), cond={}(+{}), body={}(+{}))",
                    args(init),
                    cond.name,
                    args(cond_args),
                    body.name,
                    args(body_args)
                )
            }
            NodeKind::GetItem { of, index } => format!("TupleGetItem(%{of}, {index})"),
        };
        let mut line = format!("  %{id} = {body} -> {ty}    # scope: {}", n.name);
        if let Some(l) = n.location {
            let _ = write!(line, "    # In file {}:{}", l.file(), l.line());
        }
        let _ = writeln!(out, "{line}");
    }
    let outs: Vec<String> = g.outputs.iter().map(|o| format!("%{o}")).collect();
    let _ = writeln!(out, "  Return({})", outs.join(", "));
    for (p, v) in &g.updates {
        let _ = writeln!(
            out,
            "  Assign(param {p}: {}, %{v})",
            g.params.get(*p).map(|p| p.name()).unwrap_or_default()
        );
    }
    let _ = writeln!(out, "}}");
}
