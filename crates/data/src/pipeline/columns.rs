//! Column operations: `project` (select and reorder), `rename`, `zip` (rows side by side)
//! and `concat` (datasets one after another).
//!
//! ```
//! use spore_core::Tensor;
//! use spore_data::NumpySlicesDataset;
//! let a = NumpySlicesDataset::new(vec![("a", Tensor::from_vec(vec![1i32, 2], &[2]).unwrap())])
//!     .unwrap().shuffle(false).build().unwrap();
//! let b = NumpySlicesDataset::new(vec![("b", Tensor::from_vec(vec![7i32, 8, 9], &[3]).unwrap())])
//!     .unwrap().shuffle(false).build().unwrap();
//! let z = a.zip(&[b]).unwrap();
//! assert_eq!(z.get_col_names(), vec!["a", "b"]);
//! assert_eq!(z.get_dataset_size().unwrap(), 2);
//! assert_eq!(z.project(["b"]).unwrap().concat(&[z.project(["b"]).unwrap()]).unwrap().get_dataset_size().unwrap(), 4);
//! ```

use std::sync::Arc;

use spore_core::{Error, Result};

use super::{check_unique, column_index};
use crate::node::{Node, Row, Rows, Size};

pub(crate) struct ProjectNode {
    child: Arc<dyn Node>,
    indices: Vec<usize>,
    columns: Vec<String>,
}

impl ProjectNode {
    pub(crate) fn new(child: Arc<dyn Node>, columns: Vec<String>) -> Result<ProjectNode> {
        if columns.is_empty() {
            return Err(Error::invalid("project: no columns given"));
        }
        check_unique("project", "columns", &columns)?;
        let indices = columns
            .iter()
            .map(|c| column_index("project", child.columns(), c))
            .collect::<Result<_>>()?;
        Ok(ProjectNode {
            child,
            indices,
            columns,
        })
    }
}

impl Node for ProjectNode {
    fn name(&self) -> String {
        format!("project({:?}) <- {}", self.columns, self.child.name())
    }
    fn columns(&self) -> &[String] {
        &self.columns
    }
    fn size(&self) -> Size {
        self.child.size()
    }
    fn depth(&self) -> usize {
        self.child.depth() + 1
    }
    fn is_sharded(&self) -> bool {
        self.child.is_sharded()
    }
    fn open(self: Arc<Self>, key: u64) -> Result<Rows> {
        let rows = self.child.clone().open(key)?;
        let node = self;
        Ok(Box::new(rows.map(move |r| {
            r.map(|row| node.indices.iter().map(|&i| row[i].clone()).collect())
        })))
    }
}

pub(crate) struct RenameNode {
    child: Arc<dyn Node>,
    columns: Vec<String>,
}

impl RenameNode {
    pub(crate) fn new(
        child: Arc<dyn Node>,
        from: Vec<String>,
        to: Vec<String>,
    ) -> Result<RenameNode> {
        if from.len() != to.len() {
            return Err(Error::invalid(format!(
                "rename: {} input columns {from:?} but {} output columns {to:?}",
                from.len(),
                to.len()
            )));
        }
        check_unique("rename", "input_columns", &from)?;
        let mut columns = child.columns().to_vec();
        for (f, t) in from.iter().zip(&to) {
            let i = column_index("rename", child.columns(), f)?;
            columns[i] = t.clone();
        }
        check_unique("rename", "the renamed columns", &columns)?;
        Ok(RenameNode { child, columns })
    }
}

impl Node for RenameNode {
    fn name(&self) -> String {
        format!("rename -> {:?} <- {}", self.columns, self.child.name())
    }
    fn columns(&self) -> &[String] {
        &self.columns
    }
    fn size(&self) -> Size {
        self.child.size()
    }
    fn depth(&self) -> usize {
        self.child.depth() + 1
    }
    fn is_sharded(&self) -> bool {
        self.child.is_sharded()
    }
    fn open(self: Arc<Self>, key: u64) -> Result<Rows> {
        self.child.clone().open(key)
    }
}

fn depth_of(children: &[Arc<dyn Node>]) -> usize {
    1 + children.iter().map(|c| c.depth()).sum::<usize>()
}

pub(crate) struct ZipNode {
    children: Vec<Arc<dyn Node>>,
    columns: Vec<String>,
}

impl ZipNode {
    pub(crate) fn new(children: Vec<Arc<dyn Node>>) -> Result<ZipNode> {
        if children.len() < 2 {
            return Err(Error::invalid("zip: needs at least one other dataset"));
        }
        let columns: Vec<String> = children.iter().flat_map(|c| c.columns().to_vec()).collect();
        check_unique(
            "zip",
            "the zipped datasets' columns (rename them first)",
            &columns,
        )?;
        Ok(ZipNode { children, columns })
    }
}

impl Node for ZipNode {
    fn name(&self) -> String {
        let names: Vec<String> = self.children.iter().map(|c| c.name()).collect();
        format!("zip({})", names.join(", "))
    }
    fn columns(&self) -> &[String] {
        &self.columns
    }
    fn size(&self) -> Size {
        let sizes: Vec<Size> = self.children.iter().map(|c| c.size()).collect();
        let known = sizes.iter().filter_map(|s| match s {
            Size::Known(n) => Some(*n),
            _ => None,
        });
        match known.min() {
            // The shortest known child bounds the zip only if no unknown one can be shorter.
            Some(n) if !sizes.contains(&Size::Unknown) => Size::Known(n),
            Some(0) => Size::Known(0),
            _ if sizes.contains(&Size::Unknown) => Size::Unknown,
            _ => Size::Infinite,
        }
    }
    fn depth(&self) -> usize {
        depth_of(&self.children)
    }
    fn is_sharded(&self) -> bool {
        self.children.iter().any(|c| c.is_sharded())
    }
    fn open(self: Arc<Self>, key: u64) -> Result<Rows> {
        let mut iters: Vec<Rows> = self
            .children
            .iter()
            .map(|c| c.clone().open(key))
            .collect::<Result<_>>()?;
        Ok(Box::new(std::iter::from_fn(move || {
            let mut row: Row = Vec::new();
            for it in iters.iter_mut() {
                match it.next()? {
                    Ok(r) => row.extend(r),
                    Err(e) => return Some(Err(e)),
                }
            }
            Some(Ok(row))
        })))
    }
}

pub(crate) struct ConcatNode {
    children: Vec<Arc<dyn Node>>,
}

impl ConcatNode {
    pub(crate) fn new(children: Vec<Arc<dyn Node>>) -> Result<ConcatNode> {
        let first = children[0].columns();
        for c in &children[1..] {
            if c.columns() != first {
                return Err(Error::invalid(format!(
                    "concat: the datasets must have the same columns in the same order, got {first:?} and {:?}",
                    c.columns()
                )));
            }
        }
        Ok(ConcatNode { children })
    }
}

impl Node for ConcatNode {
    fn name(&self) -> String {
        let names: Vec<String> = self.children.iter().map(|c| c.name()).collect();
        format!("concat({})", names.join(", "))
    }
    fn columns(&self) -> &[String] {
        self.children[0].columns()
    }
    fn size(&self) -> Size {
        self.children
            .iter()
            .fold(Size::Known(0), |acc, c| match (acc, c.size()) {
                (Size::Infinite, _) | (_, Size::Infinite) => Size::Infinite,
                (Size::Unknown, _) | (_, Size::Unknown) => Size::Unknown,
                (Size::Known(a), Size::Known(b)) => Size::Known(a + b),
            })
    }
    fn depth(&self) -> usize {
        depth_of(&self.children)
    }
    fn is_sharded(&self) -> bool {
        self.children.iter().any(|c| c.is_sharded())
    }
    fn open(self: Arc<Self>, key: u64) -> Result<Rows> {
        let children = self.children.clone();
        let mut next_child = 0usize;
        let mut current: Option<Rows> = None;
        Ok(Box::new(std::iter::from_fn(move || {
            loop {
                if current.is_none() {
                    let child = children.get(next_child)?;
                    next_child += 1;
                    match child.clone().open(key) {
                        Ok(rows) => current = Some(rows),
                        Err(e) => return Some(Err(e)),
                    }
                }
                match current.as_mut().and_then(|c| c.next()) {
                    Some(r) => return Some(r),
                    None => current = None,
                }
            }
        })))
    }
}
