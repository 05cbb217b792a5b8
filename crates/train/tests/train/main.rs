//! spore-train's integration tests: sinking semantics, resuming, callbacks, metrics,
//! bad input.

mod amp;
mod callbacks;
mod metrics;
mod resume;
mod sinking;

use std::sync::{Arc, Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

/// Training tests share the global mode and random generators: one at a time.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

use spore_core::{DType, Result, Tensor};
use spore_data::{Dataset, NumpySlicesDataset};
use spore_nn::cell::{Cell, CellBase, CellCall, child};
use spore_nn::layers::Dense;

/// `rows` rows of 4 features whose first feature is the row index, labels `index % 3`,
/// batched by 2 (drop_remainder), optionally shuffled.
pub fn numbered(rows: usize, shuffle: bool) -> Dataset {
    let x: Vec<f32> = (0..rows).flat_map(|i| [i as f32, 0.5, -0.5, 1.0]).collect();
    let y: Vec<i32> = (0..rows).map(|i| (i % 3) as i32).collect();
    let ds = NumpySlicesDataset::new(vec![
        ("x", Tensor::from_vec(x, &[rows, 4]).unwrap()),
        ("y", Tensor::from_vec(y, &[rows]).unwrap()),
    ])
    .unwrap()
    .shuffle(shuffle)
    .build()
    .unwrap();
    ds.batch(2, true).unwrap()
}

/// A dense layer that records the first feature of every batch it sees (in PyNative mode
/// `construct` runs for every step, so this is the order batches were consumed in).
pub struct Recorder {
    base: CellBase,
    pub dense: Arc<Dense>,
    pub seen: Arc<Mutex<Vec<f32>>>,
}

impl Recorder {
    pub fn new() -> Arc<Recorder> {
        Arc::new(Recorder {
            base: CellBase::new(),
            dense: Dense::new(4, 3).unwrap(),
            seen: Arc::new(Mutex::new(vec![])),
        })
    }
}

impl Cell for Recorder {
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        if !inputs[0].is_symbolic() {
            self.seen
                .lock()
                .unwrap()
                .push(inputs[0].to_vec::<f32>()?[0]);
        }
        self.dense.call(inputs)
    }
    fn cells(&self) -> Vec<(String, Arc<dyn Cell>)> {
        vec![child("dense", &self.dense)]
    }
    fn base(&self) -> &CellBase {
        &self.base
    }
    fn class_name(&self) -> &'static str {
        "Recorder"
    }
}

pub fn ones(shape: &[usize]) -> Tensor {
    Tensor::ones(shape, DType::F32).unwrap()
}
