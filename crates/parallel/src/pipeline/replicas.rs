//! The data-parallel replicas of a pipeline stage: their group, and which parameters
//! belong to it. The training cells find a parameter's group here (by the parameter,
//! not the context), so only a stage's own parameters have their gradients averaged
//! over its replicas, whatever the context says later.

use std::collections::HashMap;
use std::sync::Mutex;

use spore_core::{Error, Parameter, Result};

use super::stages::Place;
use crate::management::{create_group, group};

/// Parameter id to the replica group of the stage that owns it.
static OWNERS: Mutex<Option<HashMap<u64, String>>> = Mutex::new(None);

/// The group of this rank's stage replicas (made once, by its members), or `None` when
/// the stage runs on one rank.
pub(crate) fn replica_group(place: &Place) -> Result<Option<String>> {
    match place.per_stage {
        1 => Ok(None),
        _ => stage_group(place).map(Some),
    }
}

/// The group of the ranks of this rank's stage, made once by its members (the stage's
/// data-parallel replicas, or the ranks its cells are sharded over).
pub(crate) fn stage_group(place: &Place) -> Result<String> {
    let name = format!(
        "pipeline_stage{}_of{}_ranks{}",
        place.stage, place.stages, place.per_stage
    );
    if group(Some(&name)).is_err() {
        create_group(&name, &place.stage_ranks())?;
    }
    Ok(name)
}

/// Records that `params` are trained by the replicas of `group`.
pub(crate) fn register(params: &[Parameter], group: &str) {
    let mut owners = OWNERS.lock().unwrap_or_else(|p| p.into_inner());
    let map = owners.get_or_insert_with(HashMap::new);
    for p in params {
        map.insert(p.id(), group.to_string());
    }
}

/// The replica group that trains all of `params`; `None` when none of them belongs to
/// one. Parameters of several groups, or of a group and none, are an error: one
/// optimizer cannot average them consistently.
pub(crate) fn replica_group_of(params: &[Parameter]) -> Result<Option<String>> {
    let owners = OWNERS.lock().unwrap_or_else(|p| p.into_inner());
    let Some(map) = owners.as_ref() else {
        return Ok(None);
    };
    let mut found: Option<&String> = None;
    let mut outside: Option<&Parameter> = None;
    for p in params {
        match (map.get(&p.id()), found) {
            (None, _) => outside = outside.or(Some(p)),
            (Some(g), None) => found = Some(g),
            (Some(g), Some(f)) if g != f => {
                return Err(Error::invalid(format!(
                    "the optimizer's parameters belong to two pipeline stages' replica groups ('{f}' and \
                     '{g}', at {}); give each stage's optimizer only that stage's PipelineCell parameters",
                    p.name()
                )));
            }
            _ => {}
        }
    }
    match (found, outside) {
        (Some(g), Some(p)) => Err(Error::invalid(format!(
            "the optimizer's parameters mix a pipeline stage's (group '{g}') with others ({}, not in that \
             stage); give it only the PipelineCell's trainable_params()",
            p.name()
        ))),
        (g, _) => Ok(g.cloned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spore_core::{DType, Tensor};

    fn param(name: &str) -> Parameter {
        Parameter::new(Tensor::zeros(&[2], DType::F32).unwrap(), name)
    }

    #[test]
    fn an_optimizer_trains_one_replica_group_or_none() {
        let (a, b, c, d) = (param("a"), param("b"), param("c"), param("d"));
        register(&[a.clone(), b.clone()], "g1");
        register(std::slice::from_ref(&c), "g2");
        assert_eq!(
            replica_group_of(&[a.clone(), b]).unwrap().as_deref(),
            Some("g1")
        );
        assert_eq!(replica_group_of(std::slice::from_ref(&d)).unwrap(), None);
        let two = replica_group_of(&[a.clone(), c]).unwrap_err().to_string();
        assert!(two.contains("two pipeline stages"), "{two}");
        let mixed = replica_group_of(&[a, d]).unwrap_err().to_string();
        assert!(mixed.contains("mix"), "{mixed}");
    }
}
