//! Dead-code elimination: drops nodes whose values reach no output and no parameter
//! update. Inputs stay (they are the graph's signature), and so do side effects (Print).
//!
//! ```
//! use spore_compile::{pass::Pass, passes::Dce};
//! use spore_core::{trace::trace, DType, TensorType};
//! let mut g = trace("f", &[TensorType::new(&[2], DType::F32)], |x| {
//!     let _unused = x[0].exp()?;
//!     Ok(vec![x[0].neg()?])
//! }).unwrap();
//! assert!(Dce.run(&mut g).unwrap());
//! assert_eq!(g.op_count(), 1);
//! ```

use spore_core::Result;
use spore_core::ir::{Graph, NodeKind};

use crate::pass::Pass;

pub struct Dce;

impl Pass for Dce {
    fn name(&self) -> &'static str {
        "dce"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut live = vec![false; g.nodes.len()];
        for &o in g.outputs.iter().chain(g.updates.iter().map(|(_, v)| v)) {
            live[o] = true;
        }
        for (i, n) in g.nodes.iter().enumerate() {
            if matches!(n.kind, NodeKind::Input(_)) || n.op().is_some_and(|op| op.is_side_effect())
            {
                live[i] = true;
            }
        }
        for i in (0..g.nodes.len()).rev() {
            if live[i] {
                for a in g.nodes[i].args() {
                    live[a] = true;
                }
            }
        }
        let changed = live.iter().any(|l| !l);
        if changed {
            g.retain(&live);
        }
        Ok(changed)
    }
}
