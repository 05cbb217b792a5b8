//! `NumpySlicesDataset`: rows sliced from in-memory arrays along their first axis (one
//! tensor per column, all with the same length), as MindSpore's `NumpySlicesDataset`.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_data::NumpySlicesDataset;
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
//! let y = Tensor::from_vec(vec![0i32, 1], &[2]).unwrap();
//! let ds = NumpySlicesDataset::new(vec![("x", x), ("y", y)]).unwrap().shuffle(false).build().unwrap();
//! let row = ds.create_tuple_iterator(1).next().unwrap().unwrap();
//! assert_eq!((row[0].shape(), row[1].shape()), (&[2usize][..], &[][..]));
//! ```

use spore_core::{Error, Result, Tensor};

use super::{RandomAccess, Sampling, SourceNode, shard_options};
use crate::Dataset;
use crate::node::Row;
use crate::pipeline::check_unique;
use crate::tensors::{contiguous, row_of};

/// Builder for an in-memory source.
pub struct NumpySlicesDataset {
    columns: Vec<String>,
    data: Vec<Tensor>,
    len: usize,
    sampling: Sampling,
}

shard_options!(NumpySlicesDataset);

impl NumpySlicesDataset {
    /// `(column name, array)` pairs; every array must have the same first dimension.
    pub fn new<S: Into<String>>(columns: Vec<(S, Tensor)>) -> Result<NumpySlicesDataset> {
        let (names, arrays): (Vec<String>, Vec<Tensor>) =
            columns.into_iter().map(|(n, t)| (n.into(), t)).unzip();
        if names.is_empty() {
            return Err(Error::invalid("NumpySlicesDataset: no columns given"));
        }
        check_unique("NumpySlicesDataset", "column names", &names)?;
        let mut len = None;
        for (n, t) in names.iter().zip(&arrays) {
            let Some(&first) = t.shape().first() else {
                return Err(Error::invalid(format!(
                    "NumpySlicesDataset: column '{n}' is a 0-d tensor; it has no rows to slice"
                )));
            };
            match len {
                None => len = Some(first),
                Some(l) if l != first => {
                    return Err(Error::invalid(format!(
                        "NumpySlicesDataset: column '{n}' has {first} rows but '{}' has {l}",
                        names[0]
                    )));
                }
                _ => {}
            }
        }
        // Made contiguous once, so that each row is a plain slice copy.
        let data = arrays.iter().map(contiguous).collect::<Result<Vec<_>>>()?;
        Ok(NumpySlicesDataset {
            columns: names,
            data,
            len: len.unwrap_or(0),
            sampling: Sampling::default(),
        })
    }

    pub fn shuffle(mut self, shuffle: bool) -> NumpySlicesDataset {
        self.sampling.shuffle = shuffle;
        self
    }

    pub fn num_samples(mut self, n: usize) -> NumpySlicesDataset {
        self.sampling.num_samples = Some(n);
        self
    }

    pub fn build(self) -> Result<Dataset> {
        let name = format!("NumpySlicesDataset({:?})", self.columns);
        self.sampling.check(&name)?;
        let source = SliceSource {
            data: self.data,
            len: self.len,
        };
        Ok(Dataset::from_node(SourceNode::new(
            name,
            source,
            self.columns,
            self.sampling,
        )))
    }
}

struct SliceSource {
    data: Vec<Tensor>,
    len: usize,
}

impl RandomAccess for SliceSource {
    fn len(&self) -> usize {
        self.len
    }
    fn row(&self, i: usize) -> Result<Row> {
        self.data.iter().map(|t| row_of(t, i)).collect()
    }
}
