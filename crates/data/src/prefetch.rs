//! A bounded prefetch queue: a background thread runs the pipeline and keeps up to
//! `capacity` rows ready, so the training loop (or, later, the sink mode that feeds a
//! device) consumes rows on its own thread while the next ones are being made. It
//! iterates like the tuple iterator: one `None` per epoch end.
//!
//! ```
//! use spore_core::Tensor;
//! use spore_data::NumpySlicesDataset;
//! let x = Tensor::from_vec((0..5i32).collect(), &[5]).unwrap();
//! let ds = NumpySlicesDataset::new(vec![("x", x)]).unwrap().shuffle(false).build().unwrap();
//! let mut queue = ds.prefetch(2, Some(2)).unwrap();
//! let worker = std::thread::spawn(move || {
//!     let mut per_epoch = Vec::new();
//!     for _ in 0..2 {
//!         per_epoch.push((&mut queue).map(|r| r.unwrap()).count());
//!     }
//!     per_epoch
//! });
//! assert_eq!(worker.join().unwrap(), vec![5, 5]);
//! ```

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::thread;

use crossbeam_channel::{Receiver, bounded};
use spore_core::{Error, Result};

use crate::Dataset;
use crate::config::get_prefetch_size;
use crate::node::Row;
use crate::pipeline::panic_message;

enum Msg {
    Row(Row),
    EndOfEpoch,
    Error(Error),
}

/// The consumer end of a prefetching pipeline. Dropping it stops the producer thread at
/// its next row.
pub struct PrefetchQueue {
    rx: Receiver<Msg>,
    columns: Vec<String>,
    capacity: usize,
    num_epochs: usize,
    epoch: usize,
    done: bool,
}

impl PrefetchQueue {
    pub(crate) fn start(
        ds: Dataset,
        first_epoch: usize,
        num_epochs: usize,
        capacity: Option<usize>,
    ) -> Result<PrefetchQueue> {
        let capacity = capacity.unwrap_or_else(get_prefetch_size);
        if capacity == 0 {
            return Err(Error::invalid(
                "prefetch: capacity must be at least 1, got 0",
            ));
        }
        let (tx, rx) = bounded(capacity);
        let columns = ds.get_col_names();
        let mut it = ds
            .create_tuple_iterator(num_epochs)
            .starting_at_epoch(first_epoch);
        thread::Builder::new()
            .name("spore-prefetch".into())
            .spawn(move || {
                let run = catch_unwind(AssertUnwindSafe(|| {
                    while !it.is_finished() {
                        let msg = match it.next() {
                            Some(Ok(row)) => Msg::Row(row),
                            Some(Err(e)) => Msg::Error(e),
                            None => Msg::EndOfEpoch,
                        };
                        let stop = matches!(msg, Msg::Error(_));
                        if tx.send(msg).is_err() || stop {
                            return;
                        }
                    }
                }));
                if let Err(p) = run {
                    let msg = format!("prefetch: the pipeline panicked: {}", panic_message(&*p));
                    let _ = tx.send(Msg::Error(Error::invalid(msg)));
                }
            })
            .map_err(|e| Error::invalid(format!("prefetch: cannot start the thread: {e}")))?;
        Ok(PrefetchQueue {
            rx,
            columns,
            capacity,
            num_epochs,
            epoch: first_epoch,
            done: first_epoch >= num_epochs,
        })
    }

    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// The epoch the next row belongs to.
    pub fn epoch(&self) -> usize {
        self.epoch
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Rows (and epoch marks) ready right now.
    pub fn ready(&self) -> usize {
        self.rx.len()
    }
}

impl Iterator for PrefetchQueue {
    type Item = Result<Row>;

    fn next(&mut self) -> Option<Result<Row>> {
        if self.done {
            return None;
        }
        match self.rx.recv() {
            Ok(Msg::Row(row)) => Some(Ok(row)),
            Ok(Msg::EndOfEpoch) => {
                self.epoch += 1;
                self.done = self.epoch >= self.num_epochs;
                None
            }
            Ok(Msg::Error(e)) => {
                self.done = true;
                Some(Err(e))
            }
            Err(_) => {
                self.done = true;
                Some(Err(Error::invalid(
                    "prefetch: the producer thread stopped before the last epoch ended",
                )))
            }
        }
    }
}

/// Prefetching, offered on every pipeline.
impl Dataset {
    /// Runs the pipeline on a background thread for `num_epochs` epochs, keeping up to
    /// `capacity` rows ready (None: [`crate::config::get_prefetch_size`]), for a training
    /// loop on another thread.
    pub fn prefetch(&self, num_epochs: usize, capacity: Option<usize>) -> Result<PrefetchQueue> {
        PrefetchQueue::start(self.clone(), 0, num_epochs, capacity)
    }

    /// [`Dataset::prefetch`] for epochs `first..num_epochs` (resuming training).
    pub fn prefetch_from(
        &self,
        first: usize,
        num_epochs: usize,
        capacity: Option<usize>,
    ) -> Result<PrefetchQueue> {
        PrefetchQueue::start(self.clone(), first, num_epochs, capacity)
    }
}
