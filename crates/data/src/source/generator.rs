//! `GeneratorDataset`: rows from Rust code, as MindSpore's `GeneratorDataset` takes a
//! Python generator or a random-access object. [`GeneratorDataset::from_iter`] calls a
//! factory once per epoch for an iterator of rows; [`GeneratorDataset::from_fn`] reads
//! row `i` of `len` (and so supports `shuffle` and `num_samples` like the file sources).
//! A row is anything [`IntoRow`]: `Vec<Tensor>`, one `Tensor`, or a `Result` of those.
//! Panics in the user's code become errors.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_data::GeneratorDataset;
//! let ds = GeneratorDataset::from_iter(["x"], || (0..3).map(|i| Tensor::scalar(i as f32)))
//!     .build()
//!     .unwrap();
//! assert_eq!(ds.get_dataset_size().unwrap(), 3); // counted by running an epoch
//! let squares = GeneratorDataset::from_fn(["sq"], 4, |i| Tensor::scalar((i * i) as i64))
//!     .shuffle(false)
//!     .build()
//!     .unwrap();
//! let v: Vec<f64> = squares.create_tuple_iterator(1).map(|r| r.unwrap()[0].item().unwrap()).collect();
//! assert_eq!(v, vec![0.0, 1.0, 4.0, 9.0]);
//! ```

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use spore_core::{Error, Result, Tensor};

use super::{RandomAccess, Sampling, SourceNode};
use crate::Dataset;
use crate::node::{Node, Row, Rows, Size};
use crate::pipeline::{check_unique, panic_message};

/// What a generator may yield for one row.
pub trait IntoRow {
    fn into_row(self) -> Result<Row>;
}

impl IntoRow for Vec<Tensor> {
    fn into_row(self) -> Result<Row> {
        Ok(self)
    }
}

impl IntoRow for Tensor {
    fn into_row(self) -> Result<Row> {
        Ok(vec![self])
    }
}

impl<const N: usize> IntoRow for [Tensor; N] {
    fn into_row(self) -> Result<Row> {
        Ok(self.into())
    }
}

impl<R: IntoRow> IntoRow for Result<R> {
    fn into_row(self) -> Result<Row> {
        self?.into_row()
    }
}

type Factory = Arc<dyn Fn() -> Box<dyn Iterator<Item = Result<Row>> + Send> + Send + Sync>;
type Reader = Arc<dyn Fn(usize) -> Result<Row> + Send + Sync>;

enum Kind {
    Iter(Factory),
    Random { len: usize, read: Reader },
}

/// Builder for a generator source.
pub struct GeneratorDataset {
    columns: Vec<String>,
    kind: Kind,
    shuffle: Option<bool>,
    num_samples: Option<usize>,
    /// `num_shards`, `shard_id` and a sampler's seed (random-access generators only).
    shards: Sampling,
}

impl GeneratorDataset {
    /// Rows from a fresh iterator each epoch (`factory` is called once per epoch, so the
    /// data can be re-read). Not shuffled; the size is found by running an epoch.
    pub fn from_iter<C, S, F, I, R>(column_names: C, factory: F) -> GeneratorDataset
    where
        C: IntoIterator<Item = S>,
        S: Into<String>,
        F: Fn() -> I + Send + Sync + 'static,
        I: IntoIterator<Item = R>,
        I::IntoIter: Send + 'static,
        R: IntoRow + 'static,
    {
        let factory: Factory =
            Arc::new(move || Box::new(factory().into_iter().map(IntoRow::into_row)));
        GeneratorDataset {
            columns: column_names.into_iter().map(Into::into).collect(),
            kind: Kind::Iter(factory),
            shuffle: None,
            num_samples: None,
            shards: Sampling::default(),
        }
    }

    /// Row `i` is `read(i)` for `i < len`; shuffled by default, as MindSpore does for
    /// random-access sources.
    pub fn from_fn<C, S, F, R>(column_names: C, len: usize, read: F) -> GeneratorDataset
    where
        C: IntoIterator<Item = S>,
        S: Into<String>,
        F: Fn(usize) -> R + Send + Sync + 'static,
        R: IntoRow,
    {
        GeneratorDataset {
            columns: column_names.into_iter().map(Into::into).collect(),
            kind: Kind::Random {
                len,
                read: Arc::new(move |i| read(i).into_row()),
            },
            shuffle: None,
            num_samples: None,
            shards: Sampling::default(),
        }
    }

    /// Random order per epoch (random-access generators only).
    pub fn shuffle(mut self, shuffle: bool) -> GeneratorDataset {
        self.shuffle = Some(shuffle);
        self
    }

    /// At most `n` rows per epoch.
    pub fn num_samples(mut self, n: usize) -> GeneratorDataset {
        self.num_samples = Some(n);
        self
    }

    /// Splits the rows into this many disjoint shards (random-access generators only).
    pub fn num_shards(mut self, n: usize) -> GeneratorDataset {
        self.shards.num_shards = Some(n);
        self
    }

    /// Which shard this process reads, in `[0, num_shards)`.
    pub fn shard_id(mut self, id: usize) -> GeneratorDataset {
        self.shards.shard_id = Some(id);
        self
    }

    /// Samples with a [`crate::DistributedSampler`] (random-access generators only).
    pub fn sampler(mut self, sampler: crate::DistributedSampler) -> GeneratorDataset {
        self.shards.use_sampler(sampler);
        self.shuffle = Some(sampler.shuffle);
        self.num_samples = sampler.num_samples;
        self
    }

    pub fn build(self) -> Result<Dataset> {
        let label = format!("GeneratorDataset(column_names={:?})", self.columns);
        if self.columns.is_empty() {
            return Err(Error::invalid(format!("{label}: column_names is empty")));
        }
        check_unique(&label, "column_names", &self.columns)?;
        match self.kind {
            Kind::Random { len, read } => {
                self.shards.check(&label)?;
                let sampling = Sampling {
                    shuffle: self.shuffle.unwrap_or(true),
                    num_samples: self.num_samples,
                    ..self.shards
                };
                let source = RandomSource {
                    len,
                    read,
                    label: label.clone(),
                    width: self.columns.len(),
                };
                Ok(Dataset::from_node(SourceNode::new(
                    label,
                    source,
                    self.columns,
                    sampling,
                )))
            }
            Kind::Iter(factory) => {
                if self.shards.num_shards.is_some() || self.shards.shard_id.is_some() {
                    return Err(Error::invalid(format!(
                        "{label}: num_shards and shard_id need random access; use GeneratorDataset::from_fn"
                    )));
                }
                if self.shuffle == Some(true) {
                    return Err(Error::invalid(format!(
                        "{label}: shuffle needs random access; use GeneratorDataset::from_fn, or .shuffle(buffer_size) on the dataset"
                    )));
                }
                Ok(Dataset::from_node(IterNode {
                    factory,
                    columns: self.columns,
                    num_samples: self.num_samples,
                    label,
                }))
            }
        }
    }
}

/// Checks a row's width, naming the generator and the row.
fn checked(label: &str, width: usize, index: usize, row: Result<Row>) -> Result<Row> {
    let row = row.map_err(|e| Error::invalid(format!("{label}, row {index}: {e}")))?;
    if row.len() != width {
        return Err(Error::invalid(format!(
            "{label}: row {index} has {} tensors but there are {width} columns",
            row.len()
        )));
    }
    Ok(row)
}

fn guarded<T>(label: &str, f: impl FnOnce() -> T) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        Error::invalid(format!(
            "{label}: the generator panicked: {}",
            panic_message(&*p)
        ))
    })
}

struct RandomSource {
    len: usize,
    read: Reader,
    label: String,
    width: usize,
}

impl RandomAccess for RandomSource {
    fn len(&self) -> usize {
        self.len
    }
    fn row(&self, i: usize) -> Result<Row> {
        let row = guarded(&self.label, || (self.read)(i))?;
        checked(&self.label, self.width, i, row)
    }
}

struct IterNode {
    factory: Factory,
    columns: Vec<String>,
    num_samples: Option<usize>,
    label: String,
}

impl Node for IterNode {
    fn name(&self) -> String {
        self.label.clone()
    }
    fn columns(&self) -> &[String] {
        &self.columns
    }
    fn size(&self) -> Size {
        match self.num_samples {
            Some(0) => Size::Known(0),
            _ => Size::Unknown,
        }
    }
    fn depth(&self) -> usize {
        1
    }
    fn open(self: Arc<Self>, _key: u64) -> Result<Rows> {
        let mut it = guarded(&self.label, || (self.factory)())?;
        let node = self;
        let limit = node.num_samples.unwrap_or(usize::MAX);
        let mut index = 0usize;
        Ok(Box::new(std::iter::from_fn(move || {
            if index >= limit {
                return None;
            }
            let next = match guarded(&node.label, || it.next()) {
                Ok(n) => n?,
                Err(e) => return Some(Err(e)),
            };
            index += 1;
            Some(checked(&node.label, node.columns.len(), index - 1, next))
        })))
    }
}
