//! `spore dump`: list a dump, print its statistics, and compare two dumps (for example a
//! PyNative and a Graph run of the same step), reporting the first op whose outputs differ.
//!
//! Ops of two runs are matched by op type and occurrence: the k-th output of `Conv2D` in
//! one run against the k-th in the other, walking the first run in execution order. That
//! survives the different op names and numbering of the two modes.
//!
//! ```no_run
//! use spore_core::debug::dump::inspect;
//! println!("{}", inspect::list("/tmp/dump".as_ref()).unwrap());
//! let report = inspect::compare("/tmp/a".as_ref(), "/tmp/b".as_ref(), 1e-5).unwrap();
//! println!("{report}");
//! ```

use std::collections::HashMap;
use std::fmt;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::stats::TensorStats;
use crate::debug::npy;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// One dumped `.npy` file, parsed from its name.
#[derive(Clone, Debug)]
pub struct DumpFile {
    pub path: PathBuf,
    pub graph: String,
    pub iteration: String,
    pub op_type: String,
    pub op_name: String,
    pub task: usize,
    pub io: String,
    pub slot: usize,
}

/// Parses `{op_type}.{op_name}.{task}.{stream}.{ts}.{io}.{slot}.DefaultFormat.npy` (op
/// names may contain dots, so the fixed fields are read from the end).
pub fn parse_name(name: &str) -> Option<(String, String, usize, String, usize)> {
    let tail: Vec<&str> = name.rsplitn(8, '.').collect();
    if tail.len() != 8 || tail[0] != "npy" || tail[1] != "DefaultFormat" {
        return None;
    }
    let (slot, io, task) = (tail[2].parse().ok()?, tail[3].to_string(), tail[6]);
    let (op_type, op_name) = tail[7].split_once('.')?;
    let task = task.parse().ok()?;
    Some((op_type.to_string(), op_name.to_string(), task, io, slot))
}

/// Every dumped file under `root` (a dump `path`, or one of its rank folders).
pub fn scan(root: &Path) -> Result<Vec<DumpFile>> {
    if !root.is_dir() {
        return Err(Error::io(root, "dump folder does not exist"));
    }
    let mut out = vec![];
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).map_err(|e| Error::io(&d, e))?;
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if let Some((op_type, op_name, task, io, slot)) = parse_name(name) {
                let iteration = p
                    .parent()
                    .and_then(|q| q.file_name())
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let graph = p
                    .parent()
                    .and_then(|q| q.parent())
                    .and_then(|q| q.file_name())
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                out.push(DumpFile {
                    path: p.clone(),
                    graph,
                    iteration,
                    op_type,
                    op_name,
                    task,
                    io,
                    slot,
                });
            }
        }
    }
    if out.is_empty() {
        return Err(Error::io(
            root,
            "no dumped .npy files found (expected {op_type}.{op_name}....DefaultFormat.npy)",
        ));
    }
    out.sort_by(|a, b| {
        (&a.graph, &a.iteration, a.task, &a.io, a.slot).cmp(&(
            &b.graph,
            &b.iteration,
            b.task,
            &b.io,
            b.slot,
        ))
    });
    Ok(out)
}

type GroupEntry = (
    (String, String),
    (usize, std::collections::BTreeSet<String>),
);

/// A summary: graphs, iterations, op and file counts.
pub fn list(root: &Path) -> Result<String> {
    let files = scan(root)?;
    // (graph, iteration) -> (files, distinct op names), in order of first appearance.
    let mut groups: Vec<GroupEntry> = vec![];
    for f in &files {
        let key = (f.graph.clone(), f.iteration.clone());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, (n, ops))) => {
                *n += 1;
                ops.insert(f.op_name.clone());
            }
            None => groups.push((key, (1, [f.op_name.clone()].into()))),
        }
    }
    let mut out = format!(
        "{:<8}{:<12}{:>8}{:>8}\n",
        "graph", "iteration", "ops", "files"
    );
    for ((g, it), (n, ops)) in groups {
        let _ = writeln!(out, "{g:<8}{it:<12}{:>8}{n:>8}", ops.len());
    }
    Ok(out)
}

/// Statistics of every dumped tensor (optionally of one graph and iteration).
pub fn stats(root: &Path, graph: Option<&str>, iteration: Option<&str>) -> Result<String> {
    let mut out = String::from(
        "graph,iteration,op_type,op_name,io,slot,shape,dtype,max,min,l2norm,nan,-inf,+inf\n",
    );
    for f in scan(root)? {
        if graph.is_some_and(|g| g != f.graph) || iteration.is_some_and(|i| i != f.iteration) {
            continue;
        }
        let t = load(&f.path)?;
        let s = TensorStats::of(&t)?;
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{:?},{},{},{},{},{},{},{}",
            f.graph,
            f.iteration,
            f.op_type,
            f.op_name,
            f.io,
            f.slot,
            t.shape(),
            t.dtype(),
            s.max,
            s.min,
            s.l2norm,
            s.nan,
            s.neg_inf,
            s.pos_inf
        );
    }
    Ok(out)
}

fn load(p: &Path) -> Result<Tensor> {
    let bytes = std::fs::read(p).map_err(|e| Error::io(p, e))?;
    npy::decode(&bytes).map_err(|e| Error::io(p, e))
}

/// The outcome of [`compare`].
#[derive(Clone, Debug)]
pub struct CompareReport {
    pub compared: usize,
    pub unmatched: usize,
    /// (op name in the first dump, in the second, largest difference)
    pub first_difference: Option<(String, String, f64)>,
}

impl fmt::Display for CompareReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "compared {} op outputs ({} without a counterpart)",
            self.compared, self.unmatched
        )?;
        match &self.first_difference {
            None => write!(f, "no difference beyond the tolerance"),
            Some((a, b, d)) => write!(f, "first difference: {a} (vs {b}), max abs diff {d:e}"),
        }
    }
}

/// Largest element difference beyond `tolerance` (0 when within it; infinite for a
/// shape mismatch).
fn difference(x: &Tensor, y: &Tensor, tolerance: f64) -> Result<f64> {
    if x.shape() != y.shape() {
        return Ok(f64::INFINITY);
    }
    let (xv, yv) = (x.to_f64_vec()?, y.to_f64_vec()?);
    let mut worst = 0.0f64;
    for (p, q) in xv.iter().zip(&yv) {
        let d = if p.is_nan() && q.is_nan() {
            0.0
        } else {
            (p - q).abs()
        };
        if d.is_nan() || d > tolerance * (1.0 + q.abs()) {
            worst = worst.max(if d.is_nan() { f64::INFINITY } else { d });
        }
    }
    Ok(worst)
}

/// Compares the outputs of two dumps, op by op in execution order.
///
/// The dump with fewer outputs is walked and matched against the other: an optimised
/// graph computes a subset of what the same step computes op by op (trace-time constants,
/// merged duplicates and removed identities are missing from it), so every op it ran has
/// a counterpart in the PyNative run. Names in the report keep the arguments' order.
///
/// Outputs are grouped by op type and shape; within a group the first dump's outputs are
/// matched in order against the second's, skipping outputs of the second that match
/// nothing (a graph may have merged or dropped duplicates). An output of the first dump
/// whose value the second holds under another op (an identity the compiler removed, such
/// as `x * 1`) counts as matched. The first output whose value the second dump does not
/// hold at all is the first difference.
pub fn compare(a: &Path, b: &Path, tolerance: f64) -> Result<CompareReport> {
    let outputs = |root: &Path| -> Result<Vec<(DumpFile, Tensor)>> {
        scan(root)?
            .into_iter()
            .filter(|f| f.io == "output" && f.op_type != "Parameter")
            .map(|f| {
                let t = load(&f.path)?;
                Ok((f, t))
            })
            .collect()
    };
    let (mut fa, mut fb) = (outputs(a)?, outputs(b)?);
    let swapped = fa.len() > fb.len();
    if swapped {
        std::mem::swap(&mut fa, &mut fb);
    }
    let mut groups: HashMap<(String, Vec<usize>), Vec<usize>> = HashMap::new();
    let mut by_shape: HashMap<Vec<usize>, Vec<usize>> = HashMap::new();
    for (k, (f, t)) in fb.iter().enumerate() {
        groups
            .entry((f.op_type.clone(), t.shape().to_vec()))
            .or_default()
            .push(k);
        by_shape.entry(t.shape().to_vec()).or_default().push(k);
    }
    let held_anywhere = |x: &Tensor| -> Result<bool> {
        for &k in by_shape.get(x.shape()).map(Vec::as_slice).unwrap_or(&[]) {
            if difference(x, &fb[k].1, tolerance)? == 0.0 {
                return Ok(true);
            }
        }
        Ok(false)
    };
    let mut next: HashMap<(String, Vec<usize>), usize> = HashMap::new();
    let mut report = CompareReport {
        compared: 0,
        unmatched: 0,
        first_difference: None,
    };
    for (f, x) in &fa {
        let key = (f.op_type.clone(), x.shape().to_vec());
        let Some(candidates) = groups.get(&key) else {
            report.unmatched += 1;
            continue;
        };
        let start = next.get(&key).copied().unwrap_or(0);
        if start >= candidates.len() {
            report.unmatched += 1;
            continue;
        }
        report.compared += 1;
        let mut matched = None;
        for (offset, &k) in candidates[start..].iter().enumerate() {
            if difference(x, &fb[k].1, tolerance)? == 0.0 {
                matched = Some(start + offset);
                break;
            }
        }
        match matched {
            Some(j) => {
                next.insert(key, j + 1);
            }
            None if held_anywhere(x)? => {}
            None => {
                let (g, y) = &fb[candidates[start]];
                if report.first_difference.is_none() {
                    let (walked, other) = (f.op_name.clone(), g.op_name.clone());
                    let names = if swapped {
                        (other, walked)
                    } else {
                        (walked, other)
                    };
                    report.first_difference =
                        Some((names.0, names.1, difference(x, y, tolerance)?));
                }
                next.insert(key, start + 1);
            }
        }
    }
    Ok(report)
}
