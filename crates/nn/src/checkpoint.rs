//! Checkpoints in the safetensors format, with parameter names as keys (`conv1.weight`,
//! `moments.conv1.weight`, `global_step`): MindSpore's `save_checkpoint`,
//! `load_checkpoint` and `load_param_into_net`.
//!
//! Saving is atomic: the file is written to a temporary file in the same folder, synced,
//! then renamed over the target, so a crash mid-save leaves the previous checkpoint intact.
//! Loading validates the whole file (a truncated or corrupted file is an error naming it)
//! and `load_param_into_net` checks every shape and dtype before changing anything.
//!
//! ```
//! use spore_nn::prelude::*;
//! let dir = std::env::temp_dir().join(format!("spore_ckpt_doc_{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("fc.safetensors");
//! let a = Dense::new(3, 2).unwrap();
//! save_checkpoint(&*a, &path).unwrap();
//! let b = Dense::new(3, 2).unwrap();
//! let report = load_param_into_net(&*b, &load_checkpoint(&path).unwrap()).unwrap();
//! assert!(report.missing.is_empty() && report.unexpected.is_empty());
//! assert_eq!(a.weight.value().to_vec::<f32>().unwrap(), b.weight.value().to_vec::<f32>().unwrap());
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use safetensors::tensor::{Dtype, SafeTensors, View};
use spore_core::{DType, Error, Result, Tensor, trace};

use crate::cell::{Cell, CellExt};

/// Tensors by name, as read from a checkpoint.
pub type ParamDict = BTreeMap<String, Tensor>;

/// What `load_param_into_net` could not match by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Parameters of the network absent from the checkpoint (left unchanged).
    pub missing: Vec<String>,
    /// Checkpoint entries that no parameter has.
    pub unexpected: Vec<String>,
}

impl LoadReport {
    /// An error listing the missing and unexpected names, unless both are empty.
    pub fn ensure_complete(&self) -> Result<()> {
        if self.missing.is_empty() && self.unexpected.is_empty() {
            return Ok(());
        }
        Err(Error::invalid(format!(
            "load_param_into_net: missing keys {:?}, unexpected keys {:?}",
            self.missing, self.unexpected
        )))
    }
}

struct Entry {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl View for &Entry {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

fn le_bytes<T: spore_core::Element, const N: usize>(
    t: &Tensor,
    to: impl Fn(T) -> [u8; N],
) -> Result<Vec<u8>> {
    Ok(t.to_vec::<T>()?.into_iter().flat_map(to).collect())
}

fn entry(name: &str, t: &Tensor) -> Result<Entry> {
    let (dtype, bytes) = match t.dtype() {
        DType::F32 => (Dtype::F32, le_bytes::<f32, 4>(t, f32::to_le_bytes)?),
        DType::F64 => (Dtype::F64, le_bytes::<f64, 8>(t, f64::to_le_bytes)?),
        DType::I32 => (Dtype::I32, le_bytes::<i32, 4>(t, i32::to_le_bytes)?),
        DType::I64 => (Dtype::I64, le_bytes::<i64, 8>(t, i64::to_le_bytes)?),
        DType::U8 => (Dtype::U8, t.to_vec::<u8>()?),
        DType::Bool => (
            Dtype::BOOL,
            t.to_vec::<bool>()?.into_iter().map(u8::from).collect(),
        ),
    };
    if t.is_symbolic() {
        return Err(Error::invalid(format!(
            "save_checkpoint: {name} is a traced value; save outside compiled functions"
        )));
    }
    Ok(Entry {
        dtype,
        shape: t.shape().to_vec(),
        bytes,
    })
}

/// Writes `tensors` to `path` atomically.
pub fn save_tensors(tensors: &[(String, Tensor)], path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let mut seen = HashSet::new();
    let mut entries = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        if !seen.insert(name.as_str()) {
            return Err(Error::io(
                path,
                format!("save_checkpoint: two tensors are named {name:?}"),
            ));
        }
        entries.push((name.clone(), entry(name, t)?));
    }
    let meta = HashMap::from([("format".to_string(), "spore".to_string())]);
    let bytes = safetensors::tensor::serialize(entries.iter().map(|(n, e)| (n, e)), Some(meta))
        .map_err(|e| Error::io(path, format!("cannot serialise the checkpoint: {e}")))?;
    write_atomic(path, &bytes)
}

/// Saves every parameter of `cell` (for a `TrainOneStepCell`, the optimizer state too),
/// named as `parameters_and_names` names them.
pub fn save_checkpoint<C: Cell + ?Sized>(cell: &C, path: impl AsRef<Path>) -> Result<()> {
    if trace::is_tracing() {
        return Err(Error::io(
            path.as_ref(),
            "save_checkpoint cannot run inside a compiled function",
        ));
    }
    let tensors: Vec<(String, Tensor)> = cell
        .parameters_and_names()
        .into_iter()
        .map(|(n, p)| (n, p.stored()))
        .collect();
    save_tensors(&tensors, path)
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Temporary file in the target's folder (a rename across file systems is not atomic),
/// fsync, rename, then fsync the folder so the rename itself is durable.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir: PathBuf = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Some(file_name) = path.file_name() else {
        return Err(Error::io(path, "the checkpoint path has no file name"));
    };
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}",
        file_name.to_string_lossy(),
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        #[cfg(unix)]
        if let Ok(d) = File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(path, format!("cannot write the checkpoint: {e}")));
    }
    Ok(())
}

fn decode<T: spore_core::Element, const N: usize>(
    data: &[u8],
    shape: &[usize],
    from: impl Fn([u8; N]) -> T,
) -> Result<Tensor> {
    let values: Vec<T> = data
        .chunks_exact(N)
        .map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            from(a)
        })
        .collect();
    Tensor::from_vec(values, shape)
}

/// Reads a safetensors checkpoint. Errors name the file: unreadable, truncated, corrupted,
/// or holding a dtype Spore lacks.
pub fn load_checkpoint(path: impl AsRef<Path>) -> Result<ParamDict> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, format!("cannot read: {e}")))?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| {
        Error::io(
            path,
            format!("not a valid safetensors checkpoint (truncated or corrupted?): {e}"),
        )
    })?;
    let mut out = ParamDict::new();
    for (name, view) in st.iter() {
        let (data, shape) = (view.data(), view.shape());
        let t = match view.dtype() {
            Dtype::F32 => decode(data, shape, f32::from_le_bytes),
            Dtype::F64 => decode(data, shape, f64::from_le_bytes),
            Dtype::I32 => decode(data, shape, i32::from_le_bytes),
            Dtype::I64 => decode(data, shape, i64::from_le_bytes),
            Dtype::U8 => Tensor::from_vec(data.to_vec(), shape),
            Dtype::BOOL => Tensor::from_vec(data.iter().map(|&b| b != 0).collect(), shape),
            other => {
                return Err(Error::io(
                    path,
                    format!(
                        "tensor {name:?} has dtype {other:?}; Spore reads F32, F64, I32, I64, U8 and BOOL"
                    ),
                ));
            }
        }
        .map_err(|e| Error::io(path, format!("tensor {name:?}: {e}")))?;
        out.insert(name.to_string(), t);
    }
    Ok(out)
}

/// Copies `dict` into the parameters of `cell` by name. Every shape and dtype is checked
/// first (mismatches are one error listing each by name, and nothing is loaded); names
/// found on one side only are reported.
pub fn load_param_into_net<C: Cell + ?Sized>(cell: &C, dict: &ParamDict) -> Result<LoadReport> {
    if trace::is_tracing() {
        return Err(Error::invalid(
            "load_param_into_net cannot run inside a compiled function",
        ));
    }
    let params = cell.parameters_and_names();
    let mut report = LoadReport::default();
    let mut mismatches = Vec::new();
    let mut updates = Vec::new();
    for (name, p) in &params {
        match dict.get(name) {
            None => report.missing.push(name.clone()),
            Some(t) if t.tensor_type() != &p.tensor_type() => mismatches.push(format!(
                "{name}: checkpoint has {}, the parameter is {}",
                t.tensor_type(),
                p.tensor_type()
            )),
            Some(t) => updates.push((p, t)),
        }
    }
    if !mismatches.is_empty() {
        return Err(Error::invalid(format!(
            "load_param_into_net: {} parameter(s) do not match the checkpoint: {}",
            mismatches.len(),
            mismatches.join("; ")
        )));
    }
    let names: HashSet<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
    report.unexpected = dict
        .keys()
        .filter(|k| !names.contains(k.as_str()))
        .cloned()
        .collect();
    for (p, t) in updates {
        p.assign(t)?;
    }
    Ok(report)
}

/// `load_checkpoint` then `load_param_into_net`, naming the file in any error.
pub fn load_checkpoint_into<C: Cell + ?Sized>(
    cell: &C,
    path: impl AsRef<Path>,
) -> Result<LoadReport> {
    let path = path.as_ref();
    let dict = load_checkpoint(path)?;
    load_param_into_net(cell, &dict).map_err(|e| Error::io(path, e))
}
