//! MindSpore's communication management: `init`, ranks, group sizes and groups.
//!
//! ```
//! use spore_parallel::{get_group_size, get_rank, init};
//! init().unwrap(); // under mpirun: one rank of the job; otherwise a job of one process
//! assert!(get_rank(None).unwrap() < get_group_size(None).unwrap());
//! ```
//!
//! Launched by `mpirun` (Open MPI's `OMPI_COMM_WORLD_SIZE`, or PMI/PMIx variables),
//! `init` starts MPI; the binary must then be built with the `mpi` feature. Started
//! directly, it makes a one-process job on the local backend, so the same program runs
//! alone and under `mpirun -n 4`.

use std::collections::HashMap;
use std::sync::{Mutex, Once, OnceLock};

use spore_core::{Error, Result};

use crate::backend::CommIndex;
use crate::engine::{BackendKind, Engine, engine_timeout_from};

/// The group of every rank (MindSpore's `GlobalComm.WORLD_COMM_GROUP`).
pub const WORLD_COMM_GROUP: &str = "world_group";

static ENGINE: OnceLock<Engine> = OnceLock::new();
static GROUPS: Mutex<Option<HashMap<String, GroupInfo>>> = Mutex::new(None);
static AT_EXIT: Once = Once::new();

/// A group's communicator and its members (world ranks, in group-rank order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GroupInfo {
    pub(crate) name: String,
    pub(crate) comm: CommIndex,
    pub(crate) world_ranks: Vec<usize>,
    /// This process's rank within the group.
    pub(crate) rank: usize,
}

impl GroupInfo {
    pub(crate) fn size(&self) -> usize {
        self.world_ranks.len()
    }
    /// `op on group 'g' (rank r of n)`, for error messages.
    pub(crate) fn describe(&self, op: &str) -> String {
        format!(
            "{op} on group '{}' (rank {} of {})",
            self.name,
            self.rank,
            self.size()
        )
    }
}

/// How many processes the launcher started, if one did.
fn launched_size() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
}

/// Starts this rank's communication (MindSpore's `init()`); call it once, before
/// building the network. A second call does nothing.
pub fn init() -> Result<()> {
    // One initialisation at a time: a second thread waits and then finds it done.
    static STARTING: Mutex<()> = Mutex::new(());
    let _one = STARTING.lock().unwrap_or_else(|p| p.into_inner());
    if ENGINE.get().is_some() {
        return Ok(());
    }
    let timeout = engine_timeout_from(std::env::var("SPORE_COMM_TIMEOUT").ok().as_deref())?;
    let engine = match launched_size() {
        Some(n) if n > 1 || cfg!(feature = "mpi") => start_mpi(n, timeout)?,
        _ => Engine::start(
            BackendKind::Local,
            || Ok(Box::new(crate::backend::local::Local::default())),
            None,
            timeout,
        )?,
    };
    let world = GroupInfo {
        name: WORLD_COMM_GROUP.to_string(),
        comm: 0,
        world_ranks: (0..engine.size).collect(),
        rank: engine.rank,
    };
    spore_core::debug::set_process_rank(engine.rank as u32);
    if ENGINE.set(engine).is_err() {
        return Err(Error::invalid("init: internal: initialised twice"));
    }
    groups(|g| {
        g.insert(WORLD_COMM_GROUP.to_string(), world);
    });
    AT_EXIT.call_once(|| {
        // SAFETY: registers a plain extern "C" function with no arguments.
        unsafe {
            libc::atexit(end_of_process);
        }
    });
    crate::data_parallel::install();
    Ok(())
}

#[cfg(feature = "mpi")]
fn start_mpi(_launched: usize, timeout: std::time::Duration) -> Result<Engine> {
    Engine::start(
        BackendKind::Mpi,
        || {
            crate::backend::mpi::Mpi::start()
                .map(|m| Box::new(m) as Box<dyn crate::backend::Backend>)
        },
        Some(crate::backend::mpi::abort_job),
        timeout,
    )
}

#[cfg(not(feature = "mpi"))]
fn start_mpi(launched: usize, _timeout: std::time::Duration) -> Result<Engine> {
    Err(Error::invalid(format!(
        "init: this process was started by an MPI launcher with {launched} ranks, but Spore was built without MPI; \
         rebuild with `--features mpi` (for example `cargo build --release --features mpi --example lenet_distributed`)"
    )))
}

/// At the process's end: the end-of-job handshake, or the job's abort when this rank
/// cannot end cleanly (see `engine`).
extern "C" fn end_of_process() {
    let Some(engine) = ENGINE.get() else { return };
    if let Some(why) = engine.why_stuck() {
        engine.abort_job(&why);
    }
    if let Err(e) = engine.finish() {
        engine.abort_job(&format!(
            "{e} (another rank may be waiting for this one in a collective it never joined, or may have failed)"
        ));
    }
}

/// Ends this rank's communication now (MindSpore's `release()`); later collectives are
/// errors. The end of the process does the same.
pub fn release() -> Result<()> {
    match ENGINE.get() {
        Some(e) => e.finish(),
        None => Ok(()),
    }
}

/// Whether `init` has run.
pub fn is_initialized() -> bool {
    ENGINE.get().is_some()
}

/// Which transport this job runs on (`None` before `init`).
pub fn backend_kind() -> Option<BackendKind> {
    ENGINE.get().map(|e| e.kind)
}

pub(crate) fn engine() -> Result<&'static Engine> {
    ENGINE.get().ok_or_else(|| {
        Error::invalid(
            "communication is not initialised: call spore_parallel::init() first (under mpirun for several processes)",
        )
    })
}

fn groups<R>(f: impl FnOnce(&mut HashMap<String, GroupInfo>) -> R) -> R {
    let mut g = GROUPS.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

/// A group by name (`None`: the world).
pub(crate) fn group(name: Option<&str>) -> Result<GroupInfo> {
    engine()?;
    let name = name.unwrap_or(WORLD_COMM_GROUP);
    groups(|g| g.get(name).cloned()).ok_or_else(|| {
        Error::invalid(format!(
            "no communication group named '{name}'; create it with create_group (the world is '{WORLD_COMM_GROUP}')"
        ))
    })
}

/// This process's rank in `group` (`None`: the world). MindSpore's `get_rank`.
pub fn get_rank(group_name: Option<&str>) -> Result<usize> {
    Ok(group(group_name)?.rank)
}

/// How many ranks `group` has (`None`: the world). MindSpore's `get_group_size`.
pub fn get_group_size(group_name: Option<&str>) -> Result<usize> {
    Ok(group(group_name)?.size())
}

/// The world rank of `group`'s rank `group_rank`.
pub fn get_world_rank_from_group_rank(group_name: &str, group_rank: usize) -> Result<usize> {
    let g = group(Some(group_name))?;
    g.world_ranks.get(group_rank).copied().ok_or_else(|| {
        Error::invalid(format!(
            "group '{group_name}' has {} ranks; there is no group rank {group_rank}",
            g.size()
        ))
    })
}

/// `world_rank`'s rank within `group`.
pub fn get_group_rank_from_world_rank(world_rank: usize, group_name: &str) -> Result<usize> {
    let g = group(Some(group_name))?;
    g.world_ranks
        .iter()
        .position(|&r| r == world_rank)
        .ok_or_else(|| {
            Error::invalid(format!(
                "world rank {world_rank} is not in group '{group_name}' (its ranks are {:?})",
                g.world_ranks
            ))
        })
}

/// Makes a group of the given world ranks (MindSpore's `create_group`); group ranks
/// follow the order given. Called by every member, and only by members, at the same
/// point of their programs.
pub fn create_group(name: &str, world_ranks: &[usize]) -> Result<()> {
    let engine = engine()?;
    let bad = |why: String| Err(Error::invalid(format!("create_group('{name}'): {why}")));
    if name.is_empty() || name == WORLD_COMM_GROUP {
        return bad(format!(
            "the name must be non-empty and not '{WORLD_COMM_GROUP}'"
        ));
    }
    if groups(|g| g.contains_key(name)) {
        return bad("a group of that name exists".into());
    }
    if world_ranks.is_empty() {
        return bad("the group needs at least one rank".into());
    }
    for (i, &r) in world_ranks.iter().enumerate() {
        if r >= engine.size {
            return bad(format!(
                "rank {r} is out of range for a job of {} ranks",
                engine.size
            ));
        }
        if world_ranks[..i].contains(&r) {
            return bad(format!("rank {r} is listed twice"));
        }
    }
    let Some(rank) = world_ranks.iter().position(|&r| r == engine.rank) else {
        return bad(format!(
            "this process (rank {}) is not among {world_ranks:?}; only members create a group",
            engine.rank
        ));
    };
    let ranks = world_ranks.to_vec();
    let what = || {
        format!(
            "create_group('{name}') on rank {} of {}",
            engine.rank, engine.size
        )
    };
    let comm = engine
        .run(what, move |b| b.create_group(&ranks))?
        .map_err(|e| Error::invalid(format!("create_group('{name}'): {e}")))?;
    let info = GroupInfo {
        name: name.to_string(),
        comm,
        world_ranks: world_ranks.to_vec(),
        rank,
    };
    groups(|g| g.insert(name.to_string(), info));
    Ok(())
}

/// Forgets a group made by `create_group` (its communicator stays until the end).
pub fn destroy_group(name: &str) -> Result<()> {
    if name == WORLD_COMM_GROUP {
        return Err(Error::invalid(format!(
            "destroy_group: the world group '{WORLD_COMM_GROUP}' cannot be destroyed"
        )));
    }
    match groups(|g| g.remove(name)) {
        Some(_) => Ok(()),
        None => Err(Error::invalid(format!(
            "destroy_group: no group named '{name}'"
        ))),
    }
}
