//! MindSpore's `SummaryRecord`: values added by name, then written together as the
//! summary of one step into a TensorBoard event file (`tensorboard --logdir DIR` shows
//! them; so does MindInsight's TensorBoard-compatible reader).
//!
//! ```
//! use spore_core::Tensor;
//! use spore_summary::{Plugin, SummaryRecord};
//! let dir = std::env::temp_dir().join(format!("spore_summary_doc_{}", std::process::id()));
//! let mut record = SummaryRecord::new(&dir).unwrap();
//! record.add_value(Plugin::Scalar, "loss", &Tensor::scalar(0.25f32)).unwrap();
//! record.add_value(Plugin::Histogram, "weights", &Tensor::from_vec(vec![1.0f32, -1.0], &[2]).unwrap()).unwrap();
//! record.record(1).unwrap();
//! record.close().unwrap();
//! assert!(record.path().file_name().unwrap().to_str().unwrap().starts_with("events.out.tfevents."));
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::path::Path;

use prost::Message;
use spore_core::ir::{Graph, NodeKind};
use spore_core::{Error, Result, Tensor};

use crate::event_file::EventFile;
use crate::histogram::histogram;
use crate::image::png;
use crate::proto::{Event, GraphDef, Image, Kind, NodeDef, Summary, Value, What};

/// What kind of summary a value becomes (MindSpore's plugin names: `scalar`, `image`,
/// `histogram`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plugin {
    /// A one-element tensor.
    Scalar,
    /// `[C, H, W]` or `[N, C, H, W]` (one image per sample, tagged `name/0`, `name/1`...).
    Image,
    /// Any tensor: the distribution of its values.
    Histogram,
}

/// Writes one event file.
pub struct SummaryRecord {
    file: EventFile,
    pending: Vec<Value>,
    closed: bool,
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl SummaryRecord {
    /// Opens a new event file in `dir` (created if missing).
    pub fn new(dir: impl AsRef<Path>) -> Result<SummaryRecord> {
        let mut file = EventFile::create(dir.as_ref())?;
        let first = Event {
            wall_time: now(),
            step: 0,
            what: Some(What::FileVersion("brain.Event:2".into())),
        };
        file.write(&first.encode_to_vec())?;
        file.flush()?;
        Ok(SummaryRecord {
            file,
            pending: vec![],
            closed: false,
        })
    }

    /// The event file's path.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Adds a value to the next [`SummaryRecord::record`].
    pub fn add_value(&mut self, plugin: Plugin, name: &str, value: &Tensor) -> Result<()> {
        if name.is_empty() {
            return Err(Error::invalid("SummaryRecord.add_value: the name is empty"));
        }
        let values = value.to_f64_vec()?;
        match plugin {
            Plugin::Scalar => {
                let [v] = values.as_slice() else {
                    return Err(Error::invalid(format!(
                        "SummaryRecord.add_value: scalar {name:?} must hold one value, got shape {:?}",
                        value.shape()
                    )));
                };
                self.add_scalar(name, *v);
            }
            Plugin::Histogram => self.pending.push(Value {
                tag: name.to_string(),
                kind: Some(Kind::Histo(histogram(&values))),
            }),
            Plugin::Image => {
                let shape = value.shape();
                let images: Vec<&[usize]> = match shape.len() {
                    3 => vec![shape],
                    4 => (0..shape[0]).map(|_| &shape[1..]).collect(),
                    _ => {
                        return Err(Error::invalid(format!(
                            "SummaryRecord.add_value: image {name:?} must be [C, H, W] or [N, C, H, W], got {shape:?}"
                        )));
                    }
                };
                let per: usize = images.first().map_or(0, |s| s.iter().product());
                let floats: Vec<f32> = values.iter().map(|&v| v as f32).collect();
                for (i, s) in images.iter().enumerate() {
                    let (bytes, h, w, c) = png(&floats[i * per..(i + 1) * per], s)?;
                    let tag = if images.len() == 1 {
                        name.to_string()
                    } else {
                        format!("{name}/{i}")
                    };
                    self.pending.push(Value {
                        tag,
                        kind: Some(Kind::Image(Image {
                            height: h as i32,
                            width: w as i32,
                            colorspace: c as i32,
                            encoded_image_string: bytes,
                        })),
                    });
                }
            }
        }
        Ok(())
    }

    /// Adds a scalar to the next record.
    pub fn add_scalar(&mut self, name: &str, value: f64) {
        self.pending.push(Value {
            tag: name.to_string(),
            kind: Some(Kind::SimpleValue(value as f32)),
        });
    }

    /// Writes the values added since the last call as the summary of `step`.
    pub fn record(&mut self, step: usize) -> Result<()> {
        if self.closed {
            return Err(Error::invalid(format!(
                "SummaryRecord: {} is closed",
                self.path().display()
            )));
        }
        if self.pending.is_empty() {
            return Ok(());
        }
        let event = Event {
            wall_time: now(),
            step: step as i64,
            what: Some(What::Summary(Summary {
                value: std::mem::take(&mut self.pending),
            })),
        };
        self.file.write(&event.encode_to_vec())
    }

    /// Writes `graph` for TensorBoard's Graphs tab: one node per value, named by its
    /// scope, with the op's name and its inputs.
    pub fn set_graph(&mut self, graph: &Graph) -> Result<()> {
        if self.closed {
            return Err(Error::invalid(format!(
                "SummaryRecord: {} is closed",
                self.path().display()
            )));
        }
        let node = graph
            .nodes
            .iter()
            .map(|n| NodeDef {
                name: n.name.clone(),
                op: match &n.kind {
                    NodeKind::Input(_) => "Input".into(),
                    NodeKind::Parameter(_) => "Parameter".into(),
                    NodeKind::Constant(_) => "Const".into(),
                    NodeKind::RandomKey(_) => "RandomKey".into(),
                    NodeKind::Op { op, .. } => op.name(),
                    NodeKind::Cond { .. } => "Cond".into(),
                    NodeKind::While { .. } => "While".into(),
                    NodeKind::GetItem { .. } => "GetItem".into(),
                },
                input: n
                    .args()
                    .iter()
                    .map(|&a| graph.nodes[a].name.clone())
                    .collect(),
            })
            .collect();
        let event = Event {
            wall_time: now(),
            step: 0,
            what: Some(What::GraphDef(GraphDef { node }.encode_to_vec())),
        };
        self.file.write(&event.encode_to_vec())
    }

    pub fn flush(&mut self) -> Result<()> {
        self.file.flush()
    }

    /// Flushes and closes; later records are errors.
    pub fn close(&mut self) -> Result<()> {
        self.closed = true;
        self.file.flush()
    }
}

impl Drop for SummaryRecord {
    fn drop(&mut self) {
        let _ = self.file.flush();
    }
}
