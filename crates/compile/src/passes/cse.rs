//! Common-subexpression elimination: an op applied to the same arguments twice is
//! computed once; small equal constants are merged. (Every primitive is pure; random ops
//! take their key as an argument, so equal keys do mean equal values.)
//!
//! ```
//! use spore_compile::{pass::Pass, passes::{Cse, Dce}};
//! use spore_core::{trace::trace, DType, TensorType};
//! let mut g = trace("f", &[TensorType::new(&[2], DType::F32)], |x| Ok(vec![x[0].exp()?.mul(&x[0].exp()?)?])).unwrap();
//! Cse.run(&mut g).unwrap();
//! Dce.run(&mut g).unwrap();
//! assert_eq!(g.op_count(), 2);
//! ```

use std::collections::HashMap;

use spore_core::Result;
use spore_core::ir::{Graph, NodeKind, ValueId};
use spore_core::op::Op;

use crate::pass::Pass;

pub struct Cse;

/// Constants up to this many elements are compared by value.
const SMALL_CONSTANT: usize = 16;

#[derive(PartialEq, Eq, Hash)]
enum Key {
    Op(Op, Vec<ValueId>),
    Constant(String, Vec<usize>, Vec<u64>),
    GetItem(ValueId, usize),
}

impl Pass for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }

    fn run(&self, g: &mut Graph) -> Result<bool> {
        let mut seen: HashMap<Key, ValueId> = HashMap::new();
        let mut changed = false;
        for i in 0..g.nodes.len() {
            let key = match &g.nodes[i].kind {
                NodeKind::Op { op, .. } if op.is_side_effect() => continue,
                NodeKind::Op { op, args } => Key::Op(op.clone(), args.clone()),
                NodeKind::Constant(t) if t.numel() <= SMALL_CONSTANT => Key::Constant(
                    t.dtype().name().to_string(),
                    t.shape().to_vec(),
                    t.to_f64_vec()?.iter().map(|v| v.to_bits()).collect(),
                ),
                NodeKind::GetItem { of, index } => Key::GetItem(*of, *index),
                _ => continue,
            };
            match seen.get(&key) {
                Some(&first) => {
                    g.replace_uses(i, first);
                    changed = true;
                }
                None => {
                    seen.insert(key, i);
                }
            }
        }
        Ok(changed)
    }
}
