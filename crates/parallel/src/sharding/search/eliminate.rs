//! `dynamic_programming`: variable elimination over the per-op terms of the cost.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use spore_core::ir::NodeKind;
use spore_core::{Error, Result};

use super::{Problem, leaf_root};
use crate::sharding::strategy::Strategy;

/// For each eliminated choice: the choices its best depends on, and the best per
/// assignment of them.
type BestOf = (Vec<usize>, BTreeMap<Vec<usize>, usize>);

impl Problem<'_> {
    /// Which choices each node's term depends on (indices into `choices`).
    fn scopes(&self) -> Vec<BTreeSet<usize>> {
        let g = self.graph;
        let index: HashMap<usize, usize> = self
            .choices
            .iter()
            .enumerate()
            .map(|(i, c)| (c.0, i))
            .collect();
        let mut param_deps: Vec<BTreeSet<usize>> =
            vec![BTreeSet::new(); g.params.len() + g.inputs.len()];
        let mut term = vec![BTreeSet::new(); g.nodes.len()];
        // Parameters take the layout their readers want, so their dependencies are
        // their readers'; the sets only grow, so rounds until none changes end.
        loop {
            let mut out: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); g.nodes.len()];
            let mut next_params = param_deps.clone();
            for (id, n) in g.nodes.iter().enumerate() {
                let mut own = BTreeSet::new();
                if let Some(&c) = index.get(&id) {
                    own.insert(c);
                }
                match &n.kind {
                    NodeKind::Parameter(p) => out[id] = param_deps[*p].clone(),
                    NodeKind::Input(i) => out[id] = param_deps[g.params.len() + i].clone(),
                    NodeKind::Op { args, .. } => {
                        let mut t = own.clone();
                        for &a in args {
                            t.extend(out[a].iter().copied());
                        }
                        for &a in args {
                            if let Some(p) = leaf_root(g, a) {
                                next_params[p].extend(t.iter().copied());
                            }
                        }
                        out[id] = if own.is_empty() { t.clone() } else { own };
                        term[id] = t;
                    }
                    _ => {}
                }
                if matches!(n.kind, NodeKind::Parameter(_) | NodeKind::Input(_)) {
                    term[id] = out[id].clone();
                }
            }
            if next_params == param_deps {
                break;
            }
            param_deps = next_params;
        }
        term
    }

    /// One table per distinct scope: the sum of its nodes' (seconds, bytes) for every
    /// assignment of the scope's choices. Built once; refused before any plan is made
    /// when the tables, or the elimination after them, would be too large.
    fn tables(&self) -> Result<&Vec<Table>> {
        if let Some(t) = self.tables.get() {
            return Ok(t);
        }
        let scopes = self.scopes();
        // Ordered maps throughout: every rank must add the same terms in the same order
        // and so break ties the same way, or ranks would plan differently.
        let mut groups: BTreeMap<Vec<usize>, Vec<usize>> = BTreeMap::new();
        for (id, s) in scopes.iter().enumerate() {
            groups
                .entry(s.iter().copied().collect())
                .or_default()
                .push(id);
        }
        let plans: f64 = groups.keys().map(|vars| self.table_size(vars)).sum();
        let widest = self.widest_elimination(groups.keys().cloned().collect());
        if plans > PLAN_LIMIT || widest > PLAN_LIMIT {
            return Err(Error::invalid(format!(
                "dynamic_programming on graph '{}' would cost {plans:.0} plans and tables of {widest:.0} entries (its choices meet in large groups); use recursive_programming",
                self.graph.name
            )));
        }
        let mut tables = vec![];
        for (vars, ids) in groups {
            let mut table = BTreeMap::new();
            for assignment in assignments(&vars, &self.choices) {
                let mut pick = vec![0; self.choices.len()];
                for (&v, &c) in vars.iter().zip(&assignment) {
                    pick[v] = c;
                }
                let plan = self.plan(&self.strategies(&pick))?;
                let (mut seconds, mut bytes) = (0.0, 0.0);
                for &id in &ids {
                    let (s, b) = self.term(&plan, id);
                    seconds += s;
                    bytes += b;
                }
                table.insert(assignment, (seconds, bytes));
            }
            tables.push(Table { vars, table });
        }
        Ok(self.tables.get_or_init(|| tables))
    }

    /// The largest table the elimination will build from factors over `scopes`.
    fn widest_elimination(&self, mut scopes: Vec<Vec<usize>>) -> f64 {
        let mut widest: f64 = 0.0;
        for x in 0..self.choices.len() {
            let (with_x, rest): (Vec<_>, Vec<_>) = scopes.into_iter().partition(|s| s.contains(&x));
            let joined: Vec<usize> = with_x
                .iter()
                .flatten()
                .copied()
                .filter(|&v| v != x)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            widest = widest.max(self.table_size(&joined));
            scopes = rest;
            scopes.push(joined);
        }
        widest
    }

    /// Variable elimination over the terms (exact for the cost model), with bytes
    /// weighed as `weight` seconds each.
    pub(super) fn eliminate(&self, weight: f64) -> Result<Vec<usize>> {
        let mut factors: Vec<Factor> = self
            .tables()?
            .iter()
            .map(|t| Factor {
                vars: t.vars.clone(),
                table: t
                    .table
                    .iter()
                    .map(|(k, (s, b))| (k.clone(), s + weight * b))
                    .collect(),
            })
            .collect();
        let mut best_of: Vec<BestOf> = vec![];
        for x in 0..self.choices.len() {
            let (with_x, rest): (Vec<Factor>, Vec<Factor>) =
                factors.into_iter().partition(|f| f.vars.contains(&x));
            let vars: Vec<usize> = with_x
                .iter()
                .flat_map(|f| f.vars.iter().copied())
                .filter(|&v| v != x)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let mut table = BTreeMap::new();
            let mut argmin = BTreeMap::new();
            for assignment in assignments(&vars, &self.choices) {
                let mut best = (f64::INFINITY, 0);
                for c in 0..self.choices[x].1.len() {
                    let t: f64 = with_x
                        .iter()
                        .map(|f| f.value(&vars, &assignment, x, c))
                        .sum();
                    if t < best.0 {
                        best = (t, c);
                    }
                }
                table.insert(assignment.clone(), best.0);
                argmin.insert(assignment, best.1);
            }
            best_of.push((vars.clone(), argmin));
            factors = rest;
            factors.push(Factor { vars, table });
        }
        // Back-substitute: each choice's best given the later ones.
        let mut pick = vec![0; self.choices.len()];
        for x in (0..self.choices.len()).rev() {
            let (vars, argmin) = &best_of[x];
            let key: Vec<usize> = vars.iter().map(|&v| pick[v]).collect();
            pick[x] = argmin.get(&key).copied().unwrap_or(0);
        }
        Ok(pick)
    }
}

/// The most plans, or entries of one table, `dynamic_programming` builds; above it,
/// it refuses before building anything.
const PLAN_LIMIT: f64 = 200_000.0;

impl Problem<'_> {
    /// How many assignments the choices `vars` have.
    fn table_size(&self, vars: &[usize]) -> f64 {
        vars.iter()
            .map(|&v| self.choices[v].1.len() as f64)
            .product()
    }
}

/// One scope's (seconds, bytes) per assignment of its choices.
pub(super) struct Table {
    vars: Vec<usize>,
    table: BTreeMap<Vec<usize>, (f64, f64)>,
}

/// A term table over some choices.
struct Factor {
    vars: Vec<usize>,
    table: BTreeMap<Vec<usize>, f64>,
}

impl Factor {
    /// The table's value where the variables `vars` take `assignment` and `x` takes `c`.
    fn value(&self, vars: &[usize], assignment: &[usize], x: usize, c: usize) -> f64 {
        let key: Vec<usize> = self
            .vars
            .iter()
            .map(|v| {
                if *v == x {
                    c
                } else {
                    vars.iter()
                        .position(|w| w == v)
                        .map_or(0, |i| assignment[i])
                }
            })
            .collect();
        self.table.get(&key).copied().unwrap_or(f64::INFINITY)
    }
}

/// Every assignment of candidate indices to `vars`.
fn assignments(vars: &[usize], choices: &[(usize, Vec<Strategy>)]) -> Vec<Vec<usize>> {
    let mut all = vec![vec![]];
    for &v in vars {
        all = all
            .into_iter()
            .flat_map(|a: Vec<usize>| {
                (0..choices[v].1.len()).map(move |c| {
                    let mut b = a.clone();
                    b.push(c);
                    b
                })
            })
            .collect();
    }
    all
}
