//! Checkpoints in the safetensors format, with parameter names as keys (`conv1.weight`,
//! `moments.conv1.weight`, `global_step`): MindSpore's `save_checkpoint`,
//! `load_checkpoint` and `load_param_into_net`.
//!
//! Saving is atomic ([`atomic`]): a crash or `kill -9` mid-save leaves the previous
//! checkpoint intact. Every tensor's CRC-32 and one for the tensor table go into the
//! file's metadata ([`integrity`], MindSpore's `crc_check`), and loading checks them: a
//! flipped byte is an error naming the file and the tensor, not silently wrong weights.
//! Files from other tools (no checksums) still load. Loading validates the whole file (a
//! truncated or corrupted file is an error naming it) and `load_param_into_net` checks
//! every shape and dtype before changing anything.
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

pub mod atomic;
pub mod integrity;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors, View};
use spore_core::{DType, Error, Result, Tensor, bf16, f16, trace};

use crate::cell::{Cell, CellExt};
use atomic::write_atomic;
use integrity::Verdict;

/// Options of [`save_checkpoint_with`] and [`save_tensors_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SaveOptions {
    /// Store every tensor's CRC-32 (and the table's) in the file. On by default, unlike
    /// MindSpore's `crc_check=False`: computing them costs far less than writing the file,
    /// and a checkpoint without them cannot tell a flipped byte from a weight.
    pub crc_check: bool,
}

impl Default for SaveOptions {
    fn default() -> Self {
        SaveOptions { crc_check: true }
    }
}

/// Options of [`load_checkpoint_with`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Refuse files that carry no checksums (MindSpore's `crc_check=True`). Checksums a
    /// file does carry are checked whatever this says.
    pub crc_check: bool,
}

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
        DType::F16 => (Dtype::F16, le_bytes::<f16, 2>(t, f16::to_le_bytes)?),
        DType::BF16 => (Dtype::BF16, le_bytes::<bf16, 2>(t, bf16::to_le_bytes)?),
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

/// Writes `tensors` to `path` atomically, with checksums.
pub fn save_tensors(tensors: &[(String, Tensor)], path: impl AsRef<Path>) -> Result<()> {
    save_tensors_with(tensors, path, SaveOptions::default())
}

/// [`save_tensors`] with options.
pub fn save_tensors_with(
    tensors: &[(String, Tensor)],
    path: impl AsRef<Path>,
    options: SaveOptions,
) -> Result<()> {
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
    let mut meta = HashMap::from([("format".to_string(), "spore".to_string())]);
    if options.crc_check {
        let table = entries
            .iter()
            .map(|(n, e)| (n.as_str(), e.dtype, e.shape.as_slice(), e.bytes.as_slice()));
        integrity::add_checksums(table, &mut meta);
    }
    let bytes = safetensors::tensor::serialize(entries.iter().map(|(n, e)| (n, e)), Some(meta))
        .map_err(|e| Error::io(path, format!("cannot serialise the checkpoint: {e}")))?;
    write_atomic(path, &bytes)
}

/// Saves every parameter of `cell` (for a `TrainOneStepCell`, the optimizer state too),
/// named as `parameters_and_names` names them, with checksums.
pub fn save_checkpoint<C: Cell + ?Sized>(cell: &C, path: impl AsRef<Path>) -> Result<()> {
    save_checkpoint_with(cell, path, SaveOptions::default())
}

/// [`save_checkpoint`] with options (MindSpore's `save_checkpoint(..., crc_check=...)`).
pub fn save_checkpoint_with<C: Cell + ?Sized>(
    cell: &C,
    path: impl AsRef<Path>,
    options: SaveOptions,
) -> Result<()> {
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
    save_tensors_with(&tensors, path, options)
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

/// Reads a safetensors checkpoint and checks the checksums it carries. Errors name the
/// file: unreadable, truncated, corrupted (with the tensor that fails its check), or
/// holding a dtype Spore lacks.
pub fn load_checkpoint(path: impl AsRef<Path>) -> Result<ParamDict> {
    load_checkpoint_with(path, LoadOptions::default())
}

/// [`load_checkpoint`] with options (MindSpore's `load_checkpoint(..., crc_check=...)`).
pub fn load_checkpoint_with(path: impl AsRef<Path>, options: LoadOptions) -> Result<ParamDict> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, format!("cannot read: {e}")))?;
    decode_checkpoint(&bytes, options).map_err(|message| Error::io(path, message))
}

/// The tensors of a checkpoint held in memory; `name` (its origin) is used in errors.
pub fn load_checkpoint_bytes(bytes: &[u8], name: &str, options: LoadOptions) -> Result<ParamDict> {
    decode_checkpoint(bytes, options).map_err(|message| Error::io(name, message))
}

fn decode_checkpoint(bytes: &[u8], options: LoadOptions) -> std::result::Result<ParamDict, String> {
    let st = SafeTensors::deserialize(bytes).map_err(|e| {
        format!("not a valid safetensors checkpoint (truncated or corrupted?): {e}")
    })?;
    // `deserialize` validated the header; reading it again gives its metadata map.
    let (_, header) = SafeTensors::read_metadata(bytes)
        .map_err(|e| format!("not a valid safetensors checkpoint: {e}"))?;
    let verdict = integrity::verify(&st, header.metadata().as_ref())?;
    if options.crc_check && verdict == Verdict::Unchecked {
        return Err(
            "crc_check: the file carries no checksums (written by another tool, or saved with crc_check off)"
                .to_string(),
        );
    }
    let mut out = ParamDict::new();
    for (name, view) in st.iter() {
        let (data, shape) = (view.data(), view.shape());
        let t = match view.dtype() {
            Dtype::F32 => decode(data, shape, f32::from_le_bytes),
            Dtype::F64 => decode(data, shape, f64::from_le_bytes),
            Dtype::F16 => decode(data, shape, f16::from_le_bytes),
            Dtype::BF16 => decode(data, shape, bf16::from_le_bytes),
            Dtype::I32 => decode(data, shape, i32::from_le_bytes),
            Dtype::I64 => decode(data, shape, i64::from_le_bytes),
            Dtype::U8 => Tensor::from_vec(data.to_vec(), shape),
            Dtype::BOOL => Tensor::from_vec(data.iter().map(|&b| b != 0).collect(), shape),
            other => {
                return Err(format!(
                    "tensor {name:?} has dtype {other:?}; Spore reads F32, F64, F16, BF16, I32, I64, U8 and BOOL"
                ));
            }
        }
        .map_err(|e| format!("tensor {name:?}: {e}"))?;
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
