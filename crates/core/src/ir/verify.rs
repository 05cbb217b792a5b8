//! The verifier: checks a graph's structure and types, so that a pass that breaks an
//! invariant is caught at once (passes are checked by re-running it).
//!
//! ```
//! use spore_core::{trace::trace, DType, TensorType};
//! let mut g = trace("f", &[TensorType::new(&[2], DType::F32)], |x| Ok(vec![x[0].exp()?])).unwrap();
//! assert!(g.verify().is_ok());
//! g.outputs[0] = 99;
//! assert!(g.verify().unwrap_err().to_string().contains("output 0"));
//! ```

use super::{Graph, NodeKind};
use crate::error::{Error, Result};
use crate::tensor::TensorType;

impl Graph {
    pub fn verify(&self) -> Result<()> {
        let bad = |what: String| {
            Err(Error::invalid(format!(
                "graph {} is malformed: {what}",
                self.name
            )))
        };
        let n = self.nodes.len();
        for id in 0..n {
            self.verify_node(id)?;
        }
        for (k, &o) in self.outputs.iter().enumerate() {
            if o >= n {
                return bad(format!("output {k} refers to %{o}, beyond the {n} nodes"));
            }
        }
        for &(p, v) in &self.updates {
            match (self.params.get(p), self.nodes.get(v)) {
                (Some(param), Some(node)) if param.tensor_type() == *node.ty() => {}
                _ => {
                    return bad(format!(
                        "update of parameter {p} from %{v} is out of range or mistyped"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks node `id`: it is typed, reads only earlier values, and its kind agrees with
    /// the graph's inputs, parameters and keys and with its op's shape rule.
    fn verify_node(&self, id: usize) -> Result<()> {
        let bad = |what: String| {
            Err(Error::invalid(format!(
                "graph {} is malformed: {what}",
                self.name
            )))
        };
        let node = &self.nodes[id];
        let here = format!("node %{id} ({})", node.name);
        if node.types.is_empty() {
            return bad(format!("{here} has no type"));
        }
        for a in node.args() {
            if a >= id {
                return bad(format!("{here} uses %{a}, which is not defined before it"));
            }
        }
        match &node.kind {
            NodeKind::Input(i) if self.inputs.get(*i) != Some(&id) => {
                return bad(format!(
                    "{here} is Input({i}) but inputs[{i}] is {:?}",
                    self.inputs.get(*i)
                ));
            }
            NodeKind::Parameter(i) => match self.params.get(*i) {
                None => {
                    return bad(format!(
                        "{here} reads parameter {i} of {}",
                        self.params.len()
                    ));
                }
                Some(p) if p.tensor_type() != *node.ty() => {
                    return bad(format!(
                        "{here} has type {} but parameter {} is {}",
                        node.ty(),
                        p.name(),
                        p.tensor_type()
                    ));
                }
                _ => {}
            },
            NodeKind::RandomKey(k) if *k >= self.num_keys => {
                return bad(format!("{here} is key {k} of {}", self.num_keys));
            }
            NodeKind::Constant(t) if t.tensor_type() != node.ty() => {
                return bad(format!(
                    "{here}: constant of type {} recorded as {}",
                    t.tensor_type(),
                    node.ty()
                ));
            }
            NodeKind::Op { op, args } => {
                let types: Vec<&TensorType> = args.iter().map(|&a| self.nodes[a].ty()).collect();
                match op.infer(&types) {
                    Ok(t) if &t == node.ty() => {}
                    Ok(t) => {
                        return bad(format!(
                            "{here}: {} infers {t} but the node says {}",
                            op.name(),
                            node.ty()
                        ));
                    }
                    Err(m) => return bad(format!("{here}: {}: {m}", op.name())),
                }
            }
            NodeKind::Cond {
                pred,
                then_args,
                else_args,
                then_branch,
                else_branch,
            } => {
                if self.nodes[*pred].ty().numel() != 1 {
                    return bad(format!("{here}: the predicate must have one element"));
                }
                for (args, g) in [(then_args, then_branch), (else_args, else_branch)] {
                    g.verify()?;
                    self.check_call(&here, args, g, &node.types)?;
                }
            }
            NodeKind::While {
                init,
                cond_args,
                body_args,
                cond,
                body,
            } => {
                cond.verify()?;
                body.verify()?;
                let state: Vec<TensorType> =
                    init.iter().map(|&a| self.nodes[a].ty().clone()).collect();
                if node.types != state {
                    return bad(format!(
                        "{here}: loop outputs differ from the initial state"
                    ));
                }
                let with =
                    |extra: &Vec<usize>| init.iter().chain(extra).copied().collect::<Vec<_>>();
                self.check_call(
                    &here,
                    &with(cond_args),
                    cond,
                    &[cond.nodes[cond.outputs[0]].ty().clone()],
                )?;
                self.check_call(&here, &with(body_args), body, &state)?;
            }
            NodeKind::GetItem { of, index } => match self.nodes[*of].types.get(*index) {
                Some(t) if t == node.ty() => {}
                _ => return bad(format!("{here}: output {index} of %{of} does not match")),
            },
            _ => {}
        }
        Ok(())
    }

    /// Checks that calling `g` with `args` of this graph type-checks and returns `outs`.
    fn check_call(&self, here: &str, args: &[usize], g: &Graph, outs: &[TensorType]) -> Result<()> {
        let arg_types: Vec<&TensorType> = args.iter().map(|&a| self.nodes[a].ty()).collect();
        let param_types: Vec<&TensorType> = g.inputs.iter().map(|&i| g.nodes[i].ty()).collect();
        let out_types: Vec<TensorType> =
            g.outputs.iter().map(|&o| g.nodes[o].ty().clone()).collect();
        if arg_types != param_types || out_types != outs {
            return Err(Error::invalid(format!(
                "graph {} is malformed: {here} calls {} with mismatched types",
                self.name, g.name
            )));
        }
        Ok(())
    }
}
