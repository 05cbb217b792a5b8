//! The backend of a one-process job: every collective over one rank is a copy, and a
//! message to oneself waits in a queue until received.
//!
//! ```
//! // Used by `spore_parallel::init()` when no launcher started the process.
//! ```

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use spore_kernels::Buffer;

use super::{Backend, CommIndex, ReduceOp};

#[derive(Default)]
pub(crate) struct Local {
    /// Messages sent to this rank, by (communicator, tag), oldest first.
    mailbox: HashMap<(CommIndex, i32), VecDeque<Buffer>>,
    groups: usize,
}

fn same_length(what: &str, a: &Buffer, b: &Buffer) -> Result<(), String> {
    if a.len() != b.len() || a.dtype() != b.dtype() {
        return Err(format!(
            "{what}: expected a buffer of {} {} elements, got {} {}",
            a.len(),
            a.dtype(),
            b.len(),
            b.dtype()
        ));
    }
    Ok(())
}

impl Backend for Local {
    fn world_rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        1
    }
    fn create_group(&mut self, world_ranks: &[usize]) -> Result<CommIndex, String> {
        if world_ranks != [0] {
            return Err(format!(
                "a one-process job has rank 0 only; cannot make a group of ranks {world_ranks:?}"
            ));
        }
        self.groups += 1;
        Ok(self.groups)
    }
    fn all_reduce(
        &mut self,
        _: CommIndex,
        send: &Buffer,
        recv: &mut Buffer,
        _: ReduceOp,
    ) -> Result<(), String> {
        same_length("all_reduce", recv, send)?;
        *recv = send.clone();
        Ok(())
    }
    fn all_gather(&mut self, _: CommIndex, send: &Buffer, recv: &mut Buffer) -> Result<(), String> {
        same_length("all_gather", recv, send)?;
        *recv = send.clone();
        Ok(())
    }
    fn reduce_scatter(
        &mut self,
        _: CommIndex,
        send: &Buffer,
        recv: &mut Buffer,
        _: ReduceOp,
    ) -> Result<(), String> {
        same_length("reduce_scatter", recv, send)?;
        *recv = send.clone();
        Ok(())
    }
    fn broadcast(&mut self, _: CommIndex, _: &mut Buffer, _: usize) -> Result<(), String> {
        Ok(())
    }
    fn all_to_all(&mut self, _: CommIndex, send: &Buffer, recv: &mut Buffer) -> Result<(), String> {
        same_length("all_to_all", recv, send)?;
        *recv = send.clone();
        Ok(())
    }
    fn send(&mut self, comm: CommIndex, data: &Buffer, _: usize, tag: i32) -> Result<(), String> {
        self.mailbox
            .entry((comm, tag))
            .or_default()
            .push_back(data.clone());
        Ok(())
    }
    fn recv(
        &mut self,
        comm: CommIndex,
        data: &mut Buffer,
        _: usize,
        tag: i32,
    ) -> Result<(), String> {
        let Some(message) = self
            .mailbox
            .get_mut(&(comm, tag))
            .and_then(VecDeque::pop_front)
        else {
            // One process cannot wait for itself: nothing else will ever send.
            return Err(format!(
                "receive with tag {tag}: nothing was sent to this rank with that tag (a one-process job)"
            ));
        };
        same_length("receive", data, &message)?;
        *data = message;
        Ok(())
    }
    fn barrier(&mut self, _: CommIndex) -> Result<(), String> {
        Ok(())
    }
    fn finish(&mut self, _: Duration) -> Result<(), String> {
        Ok(())
    }
}
