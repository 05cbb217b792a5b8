//! Containers: `SequentialCell` runs its cells in order (children named `0`, `1`, ...);
//! `CellList` only holds cells for a parent to call (and to name their parameters).
//!
//! ```
//! use std::sync::Arc;
//! use spore_nn::prelude::*;
//! let seq = SequentialCell::new(vec![Dense::new(4, 3).unwrap() as Arc<dyn Cell>, ReLU::new(), Dense::new(3, 2).unwrap()]);
//! let names: Vec<String> = seq.parameters_and_names().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);
//! assert_eq!(seq.len(), 3);
//! ```

use std::sync::Arc;

use spore_core::{Error, Result, Tensor};

use crate::cell::{Cell, CellBase, CellCall};

/// Cells applied one after the other; each one's outputs are the next one's inputs.
pub struct SequentialCell {
    base: CellBase,
    cells: Vec<Arc<dyn Cell>>,
}

impl SequentialCell {
    pub fn new(cells: Vec<Arc<dyn Cell>>) -> Arc<SequentialCell> {
        Arc::new(SequentialCell {
            base: CellBase::new(),
            cells,
        })
    }
    pub fn len(&self) -> usize {
        self.cells.len()
    }
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }
    pub fn get(&self, i: usize) -> Option<&Arc<dyn Cell>> {
        self.cells.get(i)
    }
}

impl Cell for SequentialCell {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut xs = inputs.to_vec();
        for c in &self.cells {
            xs = c.call(&xs)?;
        }
        Ok(xs)
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        self.cells
            .iter()
            .enumerate()
            .map(|(i, c)| (i.to_string(), c.clone()))
            .collect()
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "SequentialCell"
    }
}

/// A list of cells (children named `0`, `1`, ...). Not callable itself: a parent indexes it.
pub struct CellList {
    base: CellBase,
    cells: Vec<Arc<dyn Cell>>,
}

impl CellList {
    pub fn new(cells: Vec<Arc<dyn Cell>>) -> Arc<CellList> {
        Arc::new(CellList {
            base: CellBase::new(),
            cells,
        })
    }
    pub fn len(&self) -> usize {
        self.cells.len()
    }
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }
    pub fn get(&self, i: usize) -> Option<&Arc<dyn Cell>> {
        self.cells.get(i)
    }
    pub fn iter(&self) -> std::slice::Iter<'_, Arc<dyn Cell>> {
        self.cells.iter()
    }
}

impl Cell for CellList {
    fn construct(&self, _inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        Err(Error::invalid(
            "CellList is a container and cannot be called; call its cells (list.get(i)) instead",
        ))
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        self.cells
            .iter()
            .enumerate()
            .map(|(i, c)| (i.to_string(), c.clone()))
            .collect()
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "CellList"
    }
}
