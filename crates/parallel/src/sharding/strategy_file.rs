//! Strategy files (MindSpore's `strategy_ckpt_config`): the strategy of every sharded
//! operator by node name, as JSON, so that a searched plan can be saved and reused.
//!
//! ```
//! use spore_parallel::sharding::{load_strategies, save_strategies, Strategies};
//! let mut s = Strategies::new();
//! s.shard("Default/_backbone/0/MatMul-op1", "((1, 1), (1, 4))").unwrap();
//! let path = std::env::temp_dir().join(format!("strategy-doc-{}.json", std::process::id()));
//! save_strategies(&path, &s, 4).unwrap();
//! let (back, devices) = load_strategies(&path).unwrap();
//! assert_eq!(devices, 4);
//! assert_eq!(back.entries(), s.entries());
//! # std::fs::remove_file(&path).unwrap();
//! ```
//!
//! The file: `{"format": "spore-strategies", "version": 1, "device_num": 4,
//! "strategies": [{"node": "<node name>", "strategy": [[1, 1], [1, 4]]}, ...]}`, in
//! the order set. It is
//! written to a temporary file and renamed, so a crash never leaves half a file.

use std::path::Path;

use serde_json::{Value, json};
use spore_core::{Error, Result};

use super::strategy::{Strategies, Strategy};

const FORMAT: &str = "spore-strategies";

/// Writes `strategies` (planned for `devices` ranks) to `path` as JSON.
pub fn save_strategies(path: &Path, strategies: &Strategies, devices: usize) -> Result<()> {
    let list: Vec<Value> = strategies
        .entries()
        .iter()
        .map(|(name, s)| match &s.output {
            Some(out) => json!({"node": name, "strategy": s.inputs, "out_strategy": [out]}),
            None => json!({"node": name, "strategy": s.inputs}),
        })
        .collect();
    let doc = json!({
        "format": FORMAT,
        "version": 1,
        "device_num": devices,
        "strategies": list,
    });
    let text = serde_json::to_string_pretty(&doc)
        .map_err(|e| Error::io(path, format!("cannot encode the strategies: {e}")))?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text)
        .map_err(|e| Error::io(&tmp, format!("cannot write the strategy file: {e}")))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        Error::io(
            path,
            format!("cannot move the strategy file into place: {e}"),
        )
    })
}

/// Reads a strategy file: the strategies and the device count they were made for.
pub fn load_strategies(path: &Path) -> Result<(Strategies, usize)> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::io(path, format!("cannot read the strategy file: {e}")))?;
    let bad = |why: String| Error::io(path, format!("not a Spore strategy file: {why}"));
    let doc: Value = serde_json::from_str(&text).map_err(|e| bad(format!("invalid JSON ({e})")))?;
    if doc.get("format").and_then(Value::as_str) != Some(FORMAT) {
        return Err(bad(format!("\"format\" must be \"{FORMAT}\"")));
    }
    if doc.get("version").and_then(Value::as_u64) != Some(1) {
        return Err(bad("only version 1 is known".into()));
    }
    let devices = doc
        .get("device_num")
        .and_then(Value::as_u64)
        .filter(|&d| (1..=4096).contains(&d))
        .ok_or_else(|| bad("\"device_num\" must be an integer in [1, 4096]".into()))?;
    let entries = doc
        .get("strategies")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("\"strategies\" must be a list".into()))?;
    let mut strategies = Strategies::new();
    for (i, entry) in entries.iter().enumerate() {
        let name = entry
            .get("node")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("entry {i} needs a \"node\" name")))?;
        let inputs = entry
            .get("strategy")
            .and_then(parse_inputs)
            .ok_or_else(|| {
                bad(format!(
                    "the strategy of '{name}' must be a list of lists of positive integers"
                ))
            })?;
        let mut strategy = Strategy::new(inputs)?;
        if let Some(out) = entry.get("out_strategy") {
            let one = parse_inputs(out)
                .and_then(|o| <[Vec<usize>; 1]>::try_from(o).ok())
                .ok_or_else(|| {
                    bad(format!(
                        "the out_strategy of '{name}' must be a list of one list of positive integers"
                    ))
                })?;
            let [output] = one;
            strategy = strategy.with_output_factors(output)?;
        }
        strategies.set(name, strategy)?;
    }
    Ok((strategies, devices as usize))
}

fn parse_inputs(v: &Value) -> Option<Vec<Vec<usize>>> {
    v.as_array()?
        .iter()
        .map(|input| {
            input
                .as_array()?
                .iter()
                .map(|f| {
                    f.as_u64()
                        .filter(|f| (1..=1 << 20).contains(f))
                        .map(|f| f as usize)
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_strategies_round_trip() {
        let path =
            std::env::temp_dir().join(format!("spore-out-strategy-{}.json", std::process::id()));
        let mut s = Strategies::new();
        s.shard_with_output("fc2/MatMul", "((1, 4), (4, 1))", "((4, 1),)")
            .unwrap();
        s.shard("fc1/MatMul", "((1, 1), (1, 4))").unwrap();
        save_strategies(&path, &s, 4).unwrap();
        let (back, devices) = load_strategies(&path).unwrap();
        assert_eq!(devices, 4);
        assert_eq!(back.entries(), s.entries());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn malformed_files_are_errors() {
        let dir = std::env::temp_dir().join(format!("spore-strategy-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cases = [
            ("not json", "not JSON"),
            (r#"{"format": "other"}"#, "format"),
            (r#"{"format": "spore-strategies", "version": 2}"#, "version"),
            (
                r#"{"format": "spore-strategies", "version": 1, "device_num": 0}"#,
                "device_num",
            ),
            (
                r#"{"format": "spore-strategies", "version": 1, "device_num": 4, "strategies": [{"node": "a", "strategy": [[0]]}]}"#,
                "positive integers",
            ),
            (
                r#"{"format": "spore-strategies", "version": 1, "device_num": 4, "strategies": [{"node": "a", "strategy": "x"}]}"#,
                "positive integers",
            ),
            (
                r#"{"format": "spore-strategies", "version": 1, "device_num": 4, "strategies": [{"node": "a", "strategy": [[1]], "out_strategy": [[1], [2]]}]}"#,
                "one list",
            ),
        ];
        for (i, (text, expected)) in cases.iter().enumerate() {
            let path = dir.join(format!("{i}.json"));
            std::fs::write(&path, text).unwrap();
            let e = load_strategies(&path).unwrap_err().to_string();
            assert!(
                e.contains(expected) || e.contains("invalid JSON"),
                "{text}: {e}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
