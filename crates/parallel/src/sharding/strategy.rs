//! Sharding strategies (MindSpore's `shard(in_strategy)`): per input, how many ways each
//! dimension is cut. Strategies are set by the operator's scope path, the names that
//! `save_graphs` prints, so that a network needs no change to be sharded.
//!
//! ```
//! use spore_parallel::sharding::{Strategies, Strategy};
//! let s: Strategy = "((2, 1), (1, 4))".parse().unwrap();
//! assert_eq!(s.inputs, [vec![2, 1], vec![1, 4]]);
//! let mut all = Strategies::new();
//! // The MatMul of the layer `fc1` (`Default/.../fc1/MatMul-op3`): columns split 4 ways.
//! all.shard("fc1/MatMul", "((1, 1), (1, 4))").unwrap();
//! assert!(all.find("Default/_backbone/fc1/MatMul-op3").is_some());
//! assert!(all.find("Default/_backbone/fc10/MatMul-op9").is_none());
//! ```

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use spore_core::{Error, Result};

/// The most ways a dimension can be split: MindSpore's largest `device_num` (Spore's
/// planner and context take at most that many devices too).
const MAX_FACTOR: usize = 4096;

/// One operator's strategy: for each input, the number of blocks per dimension, and
/// optionally (MindSpore's `out_strategy`) the blocks its output is left in.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Strategy {
    pub inputs: Vec<Vec<usize>>,
    pub output: Option<Vec<usize>>,
}

fn check_factors(what: &str, factors: &[Vec<usize>]) -> Result<()> {
    if factors.iter().flatten().any(|&f| f == 0 || f > MAX_FACTOR) {
        return Err(Error::invalid(format!(
            "a strategy's {what} split factors must be in [1, {MAX_FACTOR}] (a job has at most that many ranks), \
             got {factors:?}"
        )));
    }
    Ok(())
}

impl Strategy {
    pub fn new(inputs: Vec<Vec<usize>>) -> Result<Strategy> {
        check_factors("input", &inputs)?;
        Ok(Strategy {
            inputs,
            output: None,
        })
    }

    /// The output's factors (see [`Strategy::with_output`]).
    pub fn with_output_factors(mut self, output: Vec<usize>) -> Result<Strategy> {
        check_factors("output", std::slice::from_ref(&output))?;
        self.output = Some(output);
        Ok(self)
    }

    /// MindSpore's `shard(in_strategy, out_strategy)`: `out_strategy` has one tuple, the
    /// output's (`((4, 1),)`). It may split a dimension the inputs leave whole over the
    /// devices that hold partial sums (a ReduceScatter instead of an AllReduce).
    pub fn with_output(self, out_strategy: &str) -> Result<Strategy> {
        let parsed: Strategy = out_strategy.parse()?;
        match <[Vec<usize>; 1]>::try_from(parsed.inputs) {
            Ok([output]) => self.with_output_factors(output),
            Err(all) => Err(Error::invalid(format!(
                "out_strategy {out_strategy:?}: expected one tuple (the output's), such as ((4, 1),), got {}",
                all.len()
            ))),
        }
    }
}

impl FromStr for Strategy {
    type Err = Error;
    /// MindSpore's tuple syntax: `((2, 1), (1, 4))`; `()` is a scalar input.
    fn from_str(text: &str) -> Result<Strategy> {
        let bad = |why: &str| {
            Error::invalid(format!(
                "strategy {text:?}: {why}; expected a tuple of tuples such as ((2, 1), (1, 4))"
            ))
        };
        // `((1, 1),)`: a trailing comma, as Python writes a one-tuple.
        let s: String = text
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect::<String>()
            .replace(",)", ")");
        let inner = s
            .strip_prefix('(')
            .and_then(|s| s.strip_suffix(')'))
            .ok_or_else(|| bad("missing the outer parentheses"))?;
        let mut inputs = vec![];
        let mut rest = inner;
        while !rest.is_empty() {
            let body = rest
                .strip_prefix('(')
                .ok_or_else(|| bad("each input's strategy must be in parentheses"))?;
            let end = body.find(')').ok_or_else(|| bad("unclosed parenthesis"))?;
            let inside = &body[..end];
            let factors = if inside.is_empty() {
                vec![]
            } else {
                inside
                    .split(',')
                    .map(|f| {
                        f.parse::<usize>()
                            .map_err(|_| bad(&format!("{f:?} is not a count")))
                    })
                    .collect::<Result<Vec<usize>>>()?
            };
            inputs.push(factors);
            rest = &body[end + 1..];
            if !rest.is_empty() {
                rest = rest
                    .strip_prefix(',')
                    .filter(|r| !r.is_empty())
                    .ok_or_else(|| bad("inputs' strategies must be separated by commas"))?;
            }
        }
        Strategy::new(inputs)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .inputs
            .iter()
            .map(|i| {
                let v: Vec<String> = i.iter().map(|x| x.to_string()).collect();
                format!("({})", v.join(", "))
            })
            .collect();
        write!(f, "({})", parts.join(", "))?;
        if let Some(out) = &self.output {
            let v: Vec<String> = out.iter().map(|x| x.to_string()).collect();
            write!(f, " out (({}),)", v.join(", "))?;
        }
        Ok(())
    }
}

/// Strategies by operator path: `fc1/MatMul` applies to every MatMul whose scope ends in
/// `fc1` (a whole-segment match), `MatMul` to every MatMul, and a full node name
/// (`Default/fc1/MatMul-op3`, as searches and strategy files write them) to that node.
/// A full node name wins over a path; among paths, the last one set wins.
#[derive(Clone, Debug, Default)]
pub struct Strategies {
    entries: Vec<(String, Strategy)>,
    /// Entry index by path, for exact names.
    by_path: HashMap<String, usize>,
}

impl Strategies {
    pub fn new() -> Strategies {
        Strategies::default()
    }

    /// Sets the strategy of the operators `path` names (MindSpore's `op.shard(...)`).
    pub fn shard(&mut self, path: &str, strategy: &str) -> Result<&mut Strategies> {
        let s = strategy.parse()?;
        self.set(path, s)
    }

    /// [`Strategies::shard`] with MindSpore's `out_strategy` too:
    /// `shard_with_output("fc2/MatMul", "((1, 4), (4, 1))", "((4, 1),)")` reduce-scatters
    /// the product's partial sums by rows instead of adding them whole on every rank.
    pub fn shard_with_output(
        &mut self,
        path: &str,
        strategy: &str,
        out_strategy: &str,
    ) -> Result<&mut Strategies> {
        let s = strategy.parse::<Strategy>()?.with_output(out_strategy)?;
        self.set(path, s)
    }

    /// Like [`Strategies::shard`] with a parsed strategy.
    pub fn set(&mut self, path: &str, strategy: Strategy) -> Result<&mut Strategies> {
        let path = path.trim_matches('/');
        if path.is_empty() {
            return Err(Error::invalid(
                "a strategy's operator path is empty; name the op as save_graphs prints it, e.g. fc1/MatMul",
            ));
        }
        match self.by_path.get(path) {
            Some(&i) => self.entries[i].1 = strategy,
            None => {
                self.by_path.insert(path.to_string(), self.entries.len());
                self.entries.push((path.to_string(), strategy));
            }
        }
        Ok(self)
    }

    /// The strategy for the node named `node_name` (`Default/fc1/MatMul-op3`).
    pub fn find(&self, node_name: &str) -> Option<(&str, &Strategy)> {
        let entry = |i: usize| {
            let (p, s) = &self.entries[i];
            (p.as_str(), s)
        };
        if let Some(&i) = self.by_path.get(node_name) {
            return Some(entry(i));
        }
        let key = op_path(node_name);
        let ends_with_segments = |name: &str, p: &str| {
            name == p
                || (name.len() > p.len()
                    && name.ends_with(p)
                    && name.as_bytes()[name.len() - p.len() - 1] == b'/')
        };
        self.entries
            .iter()
            .rposition(|(p, _)| ends_with_segments(node_name, p) || ends_with_segments(key, p))
            .map(entry)
    }

    /// The paths set, in order.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(p, _)| p.as_str())
    }

    /// Every entry, in order.
    pub fn entries(&self) -> &[(String, Strategy)] {
        &self.entries
    }
}

/// A node name without its `-opN` counter: `Default/fc1/MatMul-op3` -> `Default/fc1/MatMul`.
pub fn op_path(node_name: &str) -> &str {
    match node_name.rfind("-op") {
        Some(i) if node_name[i + 3..].chars().all(|c| c.is_ascii_digit()) => &node_name[..i],
        _ => node_name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuples_parse_and_print() {
        let s: Strategy = "((2,1),(1,4))".parse().unwrap();
        assert_eq!(s.to_string(), "((2, 1), (1, 4))");
        let scalar: Strategy = "((4, 1), ())".parse().unwrap();
        assert_eq!(scalar.inputs, [vec![4, 1], vec![]]);
        for bad in [
            "(((2,1),(1,2)))",
            "(2,1)",
            "((2,x))",
            "((0,1))",
            "((2,1)",
            "2",
            "((2,1)(1,4))",
            "((2,,1))",
            "((18446744073709551615, 2))",
        ] {
            assert!(bad.parse::<Strategy>().is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn out_strategies_are_one_tuple() {
        // Python's one-tuple, `((2, 1),)`, is one input's strategy, spaced as it may be.
        let one: Strategy = "((2, 1),)".parse().unwrap();
        assert_eq!(one.inputs, [vec![2, 1]]);
        assert_eq!(
            "((2, 1) , )".parse::<Strategy>().unwrap().inputs,
            [vec![2, 1]]
        );
        let s = "((1, 4), (4, 1))"
            .parse::<Strategy>()
            .unwrap()
            .with_output("((4, 1),)")
            .unwrap();
        assert_eq!(s.output, Some(vec![4, 1]));
        assert_eq!(s.to_string(), "((1, 4), (4, 1)) out ((4, 1),)");
        let two = "((1, 4), (4, 1))"
            .parse::<Strategy>()
            .unwrap()
            .with_output("((4, 1), (1, 1))");
        assert!(two.unwrap_err().to_string().contains("expected one tuple"));
        let zero = "((1, 4), (4, 1))"
            .parse::<Strategy>()
            .unwrap()
            .with_output("((0, 1),)");
        assert!(zero.is_err());
    }

    #[test]
    fn paths_match_whole_segments() {
        let mut s = Strategies::new();
        s.shard("MatMul", "((2, 1), (1, 1))").unwrap();
        s.shard("fc2/MatMul", "((1, 2), (2, 1))").unwrap();
        assert_eq!(s.find("Default/fc1/MatMul-op1").unwrap().0, "MatMul");
        assert_eq!(s.find("Default/fc2/MatMul-op4").unwrap().0, "fc2/MatMul");
        assert!(s.find("Default/fc2/BatchMatMul-op4").is_none());
    }
}
