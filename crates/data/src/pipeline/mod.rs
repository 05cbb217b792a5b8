//! The operations between sources and iterators: [`map`], [`shuffle`], [`batch`],
//! [`repeat`] (with take and skip) and [`columns`] (project, rename, zip, concat).
//!
//! ```
//! use spore_core::Tensor;
//! use spore_data::NumpySlicesDataset;
//! let x = Tensor::from_vec((0..5i32).collect(), &[5]).unwrap();
//! let ds = NumpySlicesDataset::new(vec![("x", x)]).unwrap().shuffle(false).build().unwrap();
//! let ds = ds.skip(1).unwrap().take(3).unwrap().rename(["x"], ["y"]).unwrap();
//! let ys: Vec<f64> = ds.create_dict_iterator(1).map(|r| r.unwrap()["y"].item().unwrap()).collect();
//! assert_eq!(ys, vec![1.0, 2.0, 3.0]);
//! ```

pub mod batch;
pub mod columns;
pub mod map;
pub mod repeat;
pub mod shuffle;

use std::any::Any;

use spore_core::{Error, Result};

/// The position of column `name`, or an error listing the columns there are.
pub(crate) fn column_index(op: &str, columns: &[String], name: &str) -> Result<usize> {
    columns.iter().position(|c| c == name).ok_or_else(|| {
        Error::invalid(format!(
            "{op}: no column named '{name}'; the dataset has columns {columns:?}"
        ))
    })
}

/// An error when a list of column names repeats one.
pub(crate) fn check_unique(op: &str, what: &str, names: &[String]) -> Result<()> {
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            return Err(Error::invalid(format!(
                "{op}: column '{n}' appears twice in {what} {names:?}"
            )));
        }
    }
    Ok(())
}

/// The message of a caught panic.
pub(crate) fn panic_message(p: &(dyn Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}
