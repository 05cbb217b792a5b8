//! The pass interface and the one list passes run from. With `save_graphs` on, the graph
//! after every pass is written as `NN_<pass>.ir` and `NN_<pass>.dot`.
//!
//! ```
//! use spore_compile::pass::{default_passes, run_passes};
//! use spore_core::{trace::trace, DType, TensorType};
//! let mut g = trace("f", &[TensorType::new(&[4], DType::F32)], |x| {
//!     Ok(vec![x[0].exp()?.add(&x[0].exp()?)?]) // the second exp is a duplicate
//! }).unwrap();
//! run_passes(&mut g, &default_passes(), None).unwrap();
//! // CSE merged the two exps; fusion then put the exp and the add that reads it twice
//! // into one loop.
//! assert_eq!(g.op_count(), 1);
//! ```

use std::path::Path;

use spore_core::ir::{Graph, NodeKind};
use spore_core::{Error, Result};

use crate::passes::{ConstFold, Cse, Dce, Simplify, fusion_passes, is_fusion_stage};

/// A graph-to-graph transformation that preserves what the graph computes.
pub trait Pass {
    fn name(&self) -> &'static str;
    /// Rewrites `g`; returns whether anything changed.
    fn run(&self, g: &mut Graph) -> Result<bool>;
}

/// The standard pipeline: clean up, fold and simplify, then fusion's stages one by one
/// (`passes::fusion_passes`), then clean up again. Every rewrite is one named stage, so
/// `save_graphs` shows the graph after each.
pub fn default_passes() -> Vec<Box<dyn Pass>> {
    let mut passes: Vec<Box<dyn Pass>> = vec![
        Box::new(Dce),
        Box::new(Cse),
        Box::new(ConstFold),
        Box::new(Simplify),
        Box::new(Cse),
        Box::new(Dce),
    ];
    passes.extend(fusion_passes());
    passes.push(Box::new(Dce));
    passes
}

/// The pipeline used while a dump is active: the standard one without fusion's stages,
/// so that every op of the source keeps its name and its own dump files.
pub fn dump_passes() -> Vec<Box<dyn Pass>> {
    default_passes()
        .into_iter()
        .filter(|p| !is_fusion_stage(p.name()))
        .collect()
}

/// Writes `NN_<name>.ir` and `NN_<name>.dot` into `dir`.
pub fn save_graph(g: &Graph, dir: &Path, index: usize, name: &str) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(dir, format!("cannot create save_graphs_path: {e}")))?;
    for (ext, text) in [("ir", g.to_ir()), ("dot", g.to_dot())] {
        let path = dir.join(format!("{index:02}_{name}.{ext}"));
        std::fs::write(&path, text)
            .map_err(|e| Error::io(&path, format!("cannot write graph: {e}")))?;
    }
    Ok(())
}

/// Runs `passes` in order, verifying after each; with `save_dir`, writes the traced graph
/// as `00_trace` and the graph after pass `k` as `k_<pass>`. The sub-graphs of `cond` and
/// `while_loop` nodes go through the same passes first, their stages written into
/// `<save_dir>/node<i>_<branch>/`.
pub fn run_passes(g: &mut Graph, passes: &[Box<dyn Pass>], save_dir: Option<&Path>) -> Result<()> {
    for (i, node) in g.nodes.iter_mut().enumerate() {
        let branches: [(&str, &mut Graph); 2] = match &mut node.kind {
            NodeKind::Cond {
                then_branch,
                else_branch,
                ..
            } => [("then", then_branch), ("else", else_branch)],
            NodeKind::While { cond, body, .. } => [("cond", cond), ("body", body)],
            _ => continue,
        };
        for (branch, sub) in branches {
            let dir = save_dir.map(|d| d.join(format!("node{i}_{branch}")));
            run_passes(sub, passes, dir.as_deref())?;
        }
    }
    g.verify()?;
    if let Some(dir) = save_dir {
        save_graph(g, dir, 0, "trace")?;
    }
    for (k, pass) in passes.iter().enumerate() {
        let changed = pass.run(g)?;
        g.verify()
            .map_err(|e| Error::invalid(format!("pass {} broke the graph: {e}", pass.name())))?;
        log::debug!(
            "pass {} on {}: changed={changed}, {} ops",
            pass.name(),
            g.name,
            g.op_count()
        );
        if let Some(dir) = save_dir {
            save_graph(g, dir, k + 1, pass.name())?;
        }
    }
    Ok(())
}
