//! `map`: applies a list of transforms to some columns of every row, on
//! `num_parallel_workers` threads that keep the input order.
//!
//! With one worker the rows are transformed on the consumer's thread. With more, a
//! feeder thread pulls rows from upstream in chunks, the workers transform chunks, and
//! the consumer puts them back in sequence; a fixed number of chunk "slots" bounds the
//! rows in flight. Random transforms get a generator seeded from (map seed, epoch key,
//! row index), so the output is the same for any number of workers.
//!
//! ```
//! use spore_core::{DType, Tensor};
//! use spore_data::{Map, NumpySlicesDataset, transforms::TypeCast};
//! let x = Tensor::from_vec((0..6u8).collect(), &[6]).unwrap();
//! let ds = NumpySlicesDataset::new(vec![("x", x)]).unwrap().shuffle(false).build().unwrap();
//! let ds = ds.map_with(Map::new(["x"], vec![TypeCast::new(DType::F32).into()])
//!     .output_columns(["y"]).num_parallel_workers(2)).unwrap();
//! assert_eq!(ds.get_col_names(), vec!["y"]);
//! let ys: Vec<f64> = ds.create_tuple_iterator(1).map(|r| r.unwrap()[0].item().unwrap()).collect();
//! assert_eq!(ys, vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
//! ```

use std::collections::{HashMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread;

use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use spore_core::{Error, Result, Tensor};

use crate::config::node_seed;
use crate::node::{Node, Row, Rows, Size};
use crate::pipeline::{check_unique, column_index, panic_message};
use crate::rng::{Rng, mix};
use crate::transforms::Transform;

/// Rows handed to a worker at once: large enough to amortise the channel hand-offs,
/// small enough that the first rows arrive quickly.
const CHUNK: usize = 16;
/// Chunks in flight per worker (queued, being transformed, or waiting for their turn).
const SLOTS_PER_WORKER: usize = 4;

/// The options of a `map` (MindSpore's keyword arguments).
#[derive(Clone, Debug)]
pub struct Map {
    input_columns: Vec<String>,
    output_columns: Option<Vec<String>>,
    operations: Vec<Transform>,
    workers: usize,
}

impl Map {
    /// Transforms `input_columns` (empty: the first column) with `operations`, on one
    /// worker, writing the results back to the same columns.
    pub fn new<C, S>(input_columns: C, operations: Vec<Transform>) -> Map
    where
        C: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Map {
            input_columns: input_columns.into_iter().map(Into::into).collect(),
            output_columns: None,
            operations,
            workers: 1,
        }
    }

    /// Names for the last operation's outputs. When their number equals the number of
    /// input columns they take the input columns' places; otherwise the input columns
    /// are removed and the outputs appended at the end (MindSpore's rule).
    pub fn output_columns<C, S>(mut self, columns: C) -> Map
    where
        C: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.output_columns = Some(columns.into_iter().map(Into::into).collect());
        self
    }

    pub fn num_parallel_workers(mut self, workers: usize) -> Map {
        self.workers = workers;
        self
    }
}

/// One `map` call: which columns go in, where the results go, the transforms.
struct Stage {
    inputs: Vec<usize>,
    /// Outputs replace the input columns (same count), or else `kept` columns come first
    /// and the outputs are appended.
    in_place: bool,
    kept: Vec<usize>,
    n_outputs: usize,
    ops: Vec<Transform>,
    columns: Vec<String>,
    seed: u64,
    label: String,
}

impl Stage {
    /// A stage over rows with columns `before`; `depth` is its depth in the unfused tree.
    fn new(before: &[String], map: Map, depth: usize) -> Result<Stage> {
        let ops_names: Vec<String> = map.operations.iter().map(|o| o.name()).collect();
        let in_names = if map.input_columns.is_empty() {
            before.iter().take(1).cloned().collect()
        } else {
            map.input_columns.clone()
        };
        let label = format!(
            "map(input_columns={in_names:?}, operations=[{}])",
            ops_names.join(", ")
        );
        if map.workers == 0 {
            return Err(Error::invalid(format!(
                "{label}: num_parallel_workers must be at least 1, got 0"
            )));
        }
        if map.operations.is_empty() {
            return Err(Error::invalid(format!("{label}: no operations given")));
        }
        check_unique(&label, "input_columns", &in_names)?;
        let inputs = in_names
            .iter()
            .map(|c| column_index(&label, before, c))
            .collect::<Result<Vec<_>>>()?;
        if inputs.is_empty() {
            return Err(Error::invalid(format!(
                "{label}: the dataset has no columns"
            )));
        }
        let outputs = map
            .output_columns
            .clone()
            .unwrap_or_else(|| in_names.clone());
        if outputs.is_empty() {
            return Err(Error::invalid(format!("{label}: output_columns is empty")));
        }
        let in_place = outputs.len() == inputs.len();
        let kept: Vec<usize> = (0..before.len()).filter(|i| !inputs.contains(i)).collect();
        let columns: Vec<String> = if in_place {
            let mut c = before.to_vec();
            for (&i, name) in inputs.iter().zip(&outputs) {
                c[i] = name.clone();
            }
            c
        } else {
            let mut c: Vec<String> = kept.iter().map(|&i| before[i].clone()).collect();
            c.extend(outputs.iter().cloned());
            c
        };
        check_unique(&label, "resulting columns", &columns)?;
        Ok(Stage {
            seed: node_seed(mix(0x3a9, depth as u64)),
            inputs,
            in_place,
            kept,
            n_outputs: outputs.len(),
            ops: map.operations,
            columns,
            label,
        })
    }

    /// Transforms one row; `seed` is this stage's seed for the epoch and `index` the row's
    /// position in it.
    fn process(&self, mut row: Row, index: u64, seed: u64) -> Result<Row> {
        let context = |e: String| Error::invalid(format!("{}, row {index}: {e}", self.label));
        let mut rng = Rng::new(mix(seed, index));
        let inputs: Vec<Tensor> = self.inputs.iter().map(|&i| row[i].clone()).collect();
        let result = catch_unwind(AssertUnwindSafe(|| {
            self.ops
                .iter()
                .try_fold(inputs, |x, op| op.apply(x, &mut rng))
        }));
        let outputs = match result {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => return Err(context(e.to_string())),
            Err(p) => {
                return Err(context(format!(
                    "an operation panicked: {}",
                    panic_message(&*p)
                )));
            }
        };
        if outputs.len() != self.n_outputs {
            return Err(context(format!(
                "the operations returned {} tensors but {} output columns were expected",
                outputs.len(),
                self.n_outputs
            )));
        }
        if self.in_place {
            for (&i, t) in self.inputs.iter().zip(outputs) {
                row[i] = t;
            }
            Ok(row)
        } else {
            let mut out: Row = self.kept.iter().map(|&i| row[i].clone()).collect();
            out.extend(outputs);
            Ok(out)
        }
    }
}

/// Consecutive `map`s with the same worker count, run as one node: each row passes
/// through every stage on the same worker. This is invisible in the results (each stage
/// keeps its own seed, column plan and error label; maps keep row order and count, so
/// row indices agree) and saves a thread hand-off per map.
pub(crate) struct MapNode {
    child: Arc<dyn Node>,
    stages: Vec<Arc<Stage>>,
    workers: usize,
}

impl MapNode {
    pub(crate) fn new(child: Arc<dyn Node>, map: Map) -> Result<MapNode> {
        let workers = map.workers;
        if let Some(prev) = child
            .as_map()
            .and_then(|m| m.downcast_ref::<MapNode>())
            .filter(|m| m.workers == workers)
        {
            let stage = Stage::new(prev.columns(), map, prev.depth() + 1)?;
            let mut stages = prev.stages.clone();
            stages.push(Arc::new(stage));
            return Ok(MapNode {
                child: prev.child.clone(),
                stages,
                workers,
            });
        }
        let stage = Stage::new(child.columns(), map, child.depth() + 1)?;
        Ok(MapNode {
            child,
            stages: vec![Arc::new(stage)],
            workers,
        })
    }

    /// Runs every stage on a row.
    fn process(&self, row: Row, index: u64, seeds: &[u64]) -> Result<Row> {
        self.stages
            .iter()
            .zip(seeds)
            .try_fold(row, |row, (stage, &seed)| stage.process(row, index, seed))
    }
}

impl Node for MapNode {
    fn name(&self) -> String {
        let labels: Vec<&str> = self.stages.iter().rev().map(|s| s.label.as_str()).collect();
        format!("{} <- {}", labels.join(" <- "), self.child.name())
    }
    fn columns(&self) -> &[String] {
        match self.stages.last() {
            Some(s) => &s.columns,
            None => self.child.columns(),
        }
    }
    fn size(&self) -> Size {
        self.child.size()
    }
    fn depth(&self) -> usize {
        // The depth of the unfused chain, so that fusing does not change any seed.
        self.child.depth() + self.stages.len()
    }
    fn is_sharded(&self) -> bool {
        self.child.is_sharded()
    }
    fn as_map(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
    fn open(self: Arc<Self>, key: u64) -> Result<Rows> {
        let upstream = self.child.clone().open(key)?;
        let seeds: Arc<[u64]> = self.stages.iter().map(|s| mix(s.seed, key)).collect();
        if self.workers <= 1 {
            let node = self;
            return Ok(Box::new(upstream.enumerate().map(move |(i, r)| {
                r.and_then(|row| node.process(row, i as u64, &seeds))
            })));
        }
        Ok(Box::new(ParallelMap::start(self, upstream, seeds)?))
    }
}

struct Task {
    seq: u64,
    first_index: u64,
    rows: Vec<Result<Row>>,
}

/// The consumer side of a multi-worker map.
struct ParallelMap {
    done: Receiver<(u64, Vec<Result<Row>>)>,
    slots: Receiver<()>,
    pending: HashMap<u64, Vec<Result<Row>>>,
    ready: VecDeque<Result<Row>>,
    next_seq: u64,
    finished: bool,
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<()> {
    thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map(|_| ())
        .map_err(|e| Error::invalid(format!("map: cannot start a worker thread: {e}")))
}

impl ParallelMap {
    fn start(node: Arc<MapNode>, mut upstream: Rows, seeds: Arc<[u64]>) -> Result<ParallelMap> {
        let workers = node.workers;
        let (slot_tx, slot_rx) = bounded::<()>(workers * SLOTS_PER_WORKER);
        let (task_tx, task_rx) = unbounded::<Task>();
        let (done_tx, done_rx) = unbounded();
        // Threads are detached: when the consumer is dropped its channel ends close, and
        // each thread stops at its next send.
        spawn("spore-map-feed", move || {
            let (mut seq, mut index) = (0u64, 0u64);
            loop {
                let mut rows = Vec::with_capacity(CHUNK);
                let mut last = false;
                while rows.len() < CHUNK {
                    match catch_unwind(AssertUnwindSafe(|| upstream.next())) {
                        Ok(Some(r)) => {
                            last = r.is_err();
                            rows.push(r);
                            if last {
                                break;
                            }
                        }
                        Ok(None) => {
                            last = true;
                            break;
                        }
                        Err(p) => {
                            rows.push(Err(Error::invalid(format!(
                                "the pipeline upstream of map panicked: {}",
                                panic_message(&*p)
                            ))));
                            last = true;
                            break;
                        }
                    }
                }
                if rows.is_empty() || slot_tx.send(()).is_err() {
                    break;
                }
                let n = rows.len() as u64;
                let task = Task {
                    seq,
                    first_index: index,
                    rows,
                };
                if task_tx.send(task).is_err() {
                    break;
                }
                seq += 1;
                index += n;
                if last {
                    break;
                }
            }
        })?;
        for _ in 0..workers {
            let (rx, tx, node): (Receiver<Task>, Sender<_>, _) =
                (task_rx.clone(), done_tx.clone(), node.clone());
            let seeds = seeds.clone();
            spawn("spore-map-worker", move || {
                for task in rx.iter() {
                    let out: Vec<Result<Row>> = task
                        .rows
                        .into_iter()
                        .zip(task.first_index..)
                        .map(|(r, i)| r.and_then(|row| node.process(row, i, &seeds)))
                        .collect();
                    if tx.send((task.seq, out)).is_err() {
                        break;
                    }
                }
            })?;
        }
        Ok(ParallelMap {
            done: done_rx,
            slots: slot_rx,
            pending: HashMap::new(),
            ready: VecDeque::new(),
            next_seq: 0,
            finished: false,
        })
    }
}

impl Iterator for ParallelMap {
    type Item = Result<Row>;

    fn next(&mut self) -> Option<Result<Row>> {
        loop {
            if let Some(r) = self.ready.pop_front() {
                return Some(r);
            }
            if self.finished {
                return None;
            }
            if let Some(chunk) = self.pending.remove(&self.next_seq) {
                self.next_seq += 1;
                // The chunk has left the pipeline: free its slot for the feeder.
                let _ = self.slots.try_recv();
                self.ready.extend(chunk);
                continue;
            }
            match self.done.recv() {
                Ok((seq, rows)) => {
                    self.pending.insert(seq, rows);
                }
                Err(_) => {
                    // Every worker has exited: the epoch is over.
                    self.finished = true;
                    if !self.pending.is_empty() {
                        return Some(Err(Error::invalid(
                            "map: a worker stopped before delivering its rows",
                        )));
                    }
                }
            }
        }
    }
}
