//! The Dump configuration: MindSpore's JSON file (seed 003), validated field by field.
//!
//! ```
//! use spore_core::debug::dump::config::DumpConfig;
//! let cfg = DumpConfig::parse(r#"{"common_dump_settings": {
//!     "dump_mode": 0, "path": "/tmp/dump", "net_name": "LeNet", "iteration": "0|5-8",
//!     "input_output": 0, "kernels": [], "support_device": [0]}}"#).unwrap();
//! assert!(cfg.iteration_selected(6) && !cfg.iteration_selected(9));
//! let err = DumpConfig::parse(r#"{"common_dump_settings": {"dump_mode": 7}}"#).unwrap_err();
//! assert!(err.to_string().contains("missing required field common_dump_settings.path"));
//! ```

use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// What the dump writes for each selected tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SavedData {
    /// `.npy` files.
    Tensor,
    /// Only `statistic.csv`.
    Statistic,
    /// Both.
    Full,
}

/// Which iterations to dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Iterations {
    All,
    Ranges(Vec<(u64, u64)>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpConfig {
    /// 0: every op; 1: only the ops matched by `kernels`.
    pub dump_mode: u8,
    pub path: PathBuf,
    pub net_name: String,
    pub iteration: Iterations,
    /// 0: inputs and outputs; 1: inputs; 2: outputs.
    pub input_output: u8,
    pub kernels: Vec<String>,
    pub support_device: Vec<u32>,
    /// 0: off; non-zero: keep only ops whose outputs hold NaN or Inf (overflow detection).
    pub op_debug_mode: u8,
    pub saved_data: SavedData,
    /// `e2e_dump_settings.enable`: write synchronously while ops run.
    pub synchronous: bool,
    pub trans_flag: bool,
    /// The configuration text, copied into `.dump_metadata/`.
    pub source: String,
}

const COMMON_FIELDS: &[&str] = &[
    "dump_mode",
    "path",
    "net_name",
    "iteration",
    "input_output",
    "kernels",
    "support_device",
    "op_debug_mode",
    "saved_data",
];
const REQUIRED_FIELDS: &[&str] = &[
    "dump_mode",
    "path",
    "net_name",
    "iteration",
    "input_output",
    "kernels",
    "support_device",
];

fn err(message: String) -> Error {
    Error::invalid(format!("dump config: {message}"))
}

fn int_in(obj: &Map<String, Value>, key: &str, allowed: &[u64]) -> Result<u8> {
    let v = &obj[key];
    match v.as_u64() {
        Some(n) if allowed.contains(&n) => Ok(n as u8),
        _ => Err(err(format!(
            "common_dump_settings.{key} must be one of {}, got {v}",
            allowed
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Parses `"all"` or `"0|5-8|100-120"`.
pub fn parse_iterations(s: &str) -> Result<Iterations> {
    let s = s.trim();
    if s == "all" {
        return Ok(Iterations::All);
    }
    let bad = || {
        err(format!(
            "common_dump_settings.iteration must be \"all\" or ranges like \"0|5-8|100-120\", got {s:?}"
        ))
    };
    let mut ranges = vec![];
    for part in s.split('|') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (
                a.trim().parse::<u64>().map_err(|_| bad())?,
                b.trim().parse::<u64>().map_err(|_| bad())?,
            ),
            None => {
                let n = part.trim().parse::<u64>().map_err(|_| bad())?;
                (n, n)
            }
        };
        if a > b {
            return Err(bad());
        }
        ranges.push((a, b));
    }
    Ok(Iterations::Ranges(ranges))
}

type Object = Map<String, Value>;

/// The top-level object, its keys checked.
fn top_level(root: &Value) -> Result<&Object> {
    let root = root
        .as_object()
        .ok_or_else(|| err("the top level must be a JSON object".into()))?;
    for k in root.keys() {
        if k != "common_dump_settings" && k != "e2e_dump_settings" {
            return Err(err(format!(
                "unknown field {k:?}; known: common_dump_settings, e2e_dump_settings"
            )));
        }
    }
    Ok(root)
}

/// `common_dump_settings`, its keys checked (no unknown one, every required one).
fn common_settings(root: &Object) -> Result<&Object> {
    let common = root
        .get("common_dump_settings")
        .and_then(Value::as_object)
        .ok_or_else(|| err("missing required object common_dump_settings".into()))?;
    for k in common.keys() {
        if !COMMON_FIELDS.contains(&k.as_str()) {
            return Err(err(format!(
                "unknown field common_dump_settings.{k}; known: {}",
                COMMON_FIELDS.join(", ")
            )));
        }
    }
    for k in REQUIRED_FIELDS {
        if !common.contains_key(*k) {
            return Err(err(format!(
                "missing required field common_dump_settings.{k}"
            )));
        }
    }
    Ok(common)
}

/// `path`: an absolute path.
fn dump_path(common: &Object) -> Result<PathBuf> {
    let path_text = common["path"]
        .as_str()
        .ok_or_else(|| err("common_dump_settings.path must be a string".into()))?;
    let path = PathBuf::from(path_text);
    if !path.is_absolute() {
        return Err(err(format!(
            "common_dump_settings.path must be an absolute path, got {path_text:?}"
        )));
    }
    Ok(path)
}

/// `net_name`: letters, digits, '_', '-' and '.'.
fn net_name(common: &Object) -> Result<String> {
    let name = common["net_name"].as_str().unwrap_or("").to_string();
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.';
    if name.is_empty() || !name.chars().all(valid) {
        return Err(err(format!(
            "common_dump_settings.net_name must be a non-empty name of letters, digits, '_', '-' or '.', got {}",
            common["net_name"]
        )));
    }
    Ok(name)
}

/// `iteration`: "all" or ranges.
fn iterations(common: &Object) -> Result<Iterations> {
    match common["iteration"].as_str() {
        Some(s) => parse_iterations(s),
        None => Err(err(format!(
            "common_dump_settings.iteration must be a string such as \"all\" or \"0|5-8\", got {}",
            common["iteration"]
        ))),
    }
}

/// `kernels`: op names or types (not empty when only they are dumped).
fn kernels(common: &Object, dump_mode: u8) -> Result<Vec<String>> {
    let Some(list) = common["kernels"].as_array() else {
        return Err(err(
            "common_dump_settings.kernels must be a list of op names or types".into(),
        ));
    };
    let kernels: Vec<String> = list
        .iter()
        .map(|k| {
            k.as_str().map(str::to_string).ok_or_else(|| {
                err(format!(
                    "common_dump_settings.kernels entries must be strings, got {k}"
                ))
            })
        })
        .collect::<Result<_>>()?;
    if dump_mode == 1 && kernels.is_empty() {
        return Err(err(
            "common_dump_settings.kernels must not be empty when dump_mode is 1".into(),
        ));
    }
    Ok(kernels)
}

/// `support_device`: device ids.
fn support_device(common: &Object) -> Result<Vec<u32>> {
    let Some(list) = common["support_device"].as_array() else {
        return Err(err(
            "common_dump_settings.support_device must be a list of device ids".into(),
        ));
    };
    list.iter()
        .map(|d| {
            d.as_u64()
                .filter(|&d| d < 4096)
                .map(|d| d as u32)
                .ok_or_else(|| {
                    err(format!(
                        "common_dump_settings.support_device entries must be device ids 0..4096, got {d}"
                    ))
                })
        })
        .collect()
}

/// `saved_data`: tensors, statistics or both (tensors when absent).
fn saved_data(common: &Object) -> Result<SavedData> {
    match common.get("saved_data").map(|v| v.as_str()) {
        None | Some(Some("tensor")) => Ok(SavedData::Tensor),
        Some(Some("statistic")) => Ok(SavedData::Statistic),
        Some(Some("full")) => Ok(SavedData::Full),
        Some(_) => Err(err(format!(
            "common_dump_settings.saved_data must be one of \"tensor\", \"statistic\", \"full\", got {}",
            common["saved_data"]
        ))),
    }
}

/// `e2e_dump_settings`: (enable, trans_flag), both false when absent.
fn e2e_settings(root: &Object) -> Result<(bool, bool)> {
    let (mut synchronous, mut trans_flag) = (false, false);
    let Some(e2e) = root.get("e2e_dump_settings") else {
        return Ok((synchronous, trans_flag));
    };
    let e2e = e2e
        .as_object()
        .ok_or_else(|| err("e2e_dump_settings must be an object".into()))?;
    for (k, v) in e2e {
        let flag = v.as_bool().ok_or_else(|| {
            err(format!(
                "e2e_dump_settings.{k} must be true or false, got {v}"
            ))
        });
        match k.as_str() {
            "enable" => synchronous = flag?,
            "trans_flag" => trans_flag = flag?,
            _ => {
                return Err(err(format!(
                    "unknown field e2e_dump_settings.{k}; known: enable, trans_flag"
                )));
            }
        }
    }
    Ok((synchronous, trans_flag))
}

impl DumpConfig {
    /// Parses and validates the JSON text.
    pub fn parse(text: &str) -> Result<DumpConfig> {
        let root: Value =
            serde_json::from_str(text).map_err(|e| err(format!("not valid JSON: {e}")))?;
        let root = top_level(&root)?;
        let common = common_settings(root)?;
        // Checked in the order the fields are documented: the first mistake is reported.
        let dump_mode = int_in(common, "dump_mode", &[0, 1])?;
        let path = dump_path(common)?;
        let net_name = net_name(common)?;
        let iteration = iterations(common)?;
        let input_output = int_in(common, "input_output", &[0, 1, 2])?;
        let kernels = kernels(common, dump_mode)?;
        let support_device = support_device(common)?;
        let op_debug_mode = if common.contains_key("op_debug_mode") {
            int_in(common, "op_debug_mode", &[0, 1, 2, 3])?
        } else {
            0
        };
        let saved_data = saved_data(common)?;
        let (synchronous, trans_flag) = e2e_settings(root)?;
        Ok(DumpConfig {
            dump_mode,
            path,
            net_name,
            iteration,
            input_output,
            kernels,
            support_device,
            op_debug_mode,
            saved_data,
            synchronous,
            trans_flag,
            source: text.to_string(),
        })
    }

    /// Whether iteration `it` is dumped.
    pub fn iteration_selected(&self, it: u64) -> bool {
        match &self.iteration {
            Iterations::All => true,
            Iterations::Ranges(r) => r.iter().any(|&(a, b)| (a..=b).contains(&it)),
        }
    }

    /// Whether an op of type `op_type` named `name` is dumped. A `kernels` entry without
    /// `/` and `-op` matches op types by case-insensitive substring; others are full names.
    pub fn op_selected(&self, op_type: &str, name: &str) -> bool {
        if self.dump_mode == 0 {
            return true;
        }
        let lower = op_type.to_ascii_lowercase();
        self.kernels.iter().any(|k| {
            if !k.contains('/') && !k.contains("-op") {
                lower.contains(&k.to_ascii_lowercase())
            } else {
                k == name
            }
        })
    }
}
