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

impl DumpConfig {
    /// Parses and validates the JSON text.
    pub fn parse(text: &str) -> Result<DumpConfig> {
        let root: Value =
            serde_json::from_str(text).map_err(|e| err(format!("not valid JSON: {e}")))?;
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
        let dump_mode = int_in(common, "dump_mode", &[0, 1])?;
        let path_text = common["path"]
            .as_str()
            .ok_or_else(|| err("common_dump_settings.path must be a string".into()))?;
        let path = PathBuf::from(path_text);
        if !path.is_absolute() {
            return Err(err(format!(
                "common_dump_settings.path must be an absolute path, got {path_text:?}"
            )));
        }
        let net_name = common["net_name"].as_str().unwrap_or("").to_string();
        if net_name.is_empty()
            || !net_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
        {
            return Err(err(format!(
                "common_dump_settings.net_name must be a non-empty name of letters, digits, '_', '-' or '.', got {}",
                common["net_name"]
            )));
        }
        let iteration = match common["iteration"].as_str() {
            Some(s) => parse_iterations(s)?,
            None => {
                return Err(err(format!(
                    "common_dump_settings.iteration must be a string such as \"all\" or \"0|5-8\", got {}",
                    common["iteration"]
                )));
            }
        };
        let input_output = int_in(common, "input_output", &[0, 1, 2])?;
        let kernels: Vec<String> = match common["kernels"].as_array() {
            Some(a) => a
                .iter()
                .map(|k| {
                    k.as_str().map(str::to_string).ok_or_else(|| {
                        err(format!(
                            "common_dump_settings.kernels entries must be strings, got {k}"
                        ))
                    })
                })
                .collect::<Result<_>>()?,
            None => {
                return Err(err(
                    "common_dump_settings.kernels must be a list of op names or types".into(),
                ));
            }
        };
        if dump_mode == 1 && kernels.is_empty() {
            return Err(err(
                "common_dump_settings.kernels must not be empty when dump_mode is 1".into(),
            ));
        }
        let support_device: Vec<u32> = match common["support_device"].as_array() {
            Some(a) => a
                .iter()
                .map(|d| d.as_u64().filter(|&d| d < 4096).map(|d| d as u32).ok_or_else(|| err(format!("common_dump_settings.support_device entries must be device ids 0..4096, got {d}"))))
                .collect::<Result<_>>()?,
            None => return Err(err("common_dump_settings.support_device must be a list of device ids".into())),
        };
        let op_debug_mode = if common.contains_key("op_debug_mode") {
            int_in(common, "op_debug_mode", &[0, 1, 2, 3])?
        } else {
            0
        };
        let saved_data = match common.get("saved_data").map(|v| v.as_str()) {
            None | Some(Some("tensor")) => SavedData::Tensor,
            Some(Some("statistic")) => SavedData::Statistic,
            Some(Some("full")) => SavedData::Full,
            Some(_) => {
                return Err(err(format!(
                    "common_dump_settings.saved_data must be one of \"tensor\", \"statistic\", \"full\", got {}",
                    common["saved_data"]
                )));
            }
        };
        let (mut synchronous, mut trans_flag) = (false, false);
        if let Some(e2e) = root.get("e2e_dump_settings") {
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
        }
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
