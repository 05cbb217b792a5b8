//! The MPI backend (feature `mpi`): Open MPI through the `mpi` crate. It is created on
//! the communication thread, which is therefore MPI's main thread, and only that thread
//! calls MPI (`MPI_THREAD_FUNNELED`), so the library needs no thread support of its own.
//!
//! ```no_run
//! // Started by `spore_parallel::init()` when a launcher (mpirun) started the process.
//! ```

use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use spore_kernels::{Buffer, Layout, half_float};

use super::{Backend, CommIndex, ReduceOp};

pub(crate) struct Mpi {
    /// The world first, then the groups made by `create_group`.
    comms: Vec<SimpleCommunicator>,
    /// A duplicate of the world for the end-of-job handshake, so that it can never match
    /// a collective of the job's own.
    control: Option<SimpleCommunicator>,
    /// Dropping it finalizes MPI: the last thing `finish` does.
    universe: Option<Universe>,
    rank: usize,
    size: usize,
}

/// Runs `$body` with `$s` and `$r` bound to the typed slices of two buffers of one dtype.
macro_rules! with_pair {
    ($send:expr, $recv:expr, |$s:ident, $r:ident| $body:expr) => {
        match ($send, $recv) {
            (Buffer::F32($s), Buffer::F32($r)) => $body,
            (Buffer::F64($s), Buffer::F64($r)) => $body,
            (Buffer::I32($s), Buffer::I32($r)) => $body,
            (Buffer::I64($s), Buffer::I64($r)) => $body,
            (Buffer::U8($s), Buffer::U8($r)) => $body,
            (Buffer::Bool($s), Buffer::Bool($r)) => $body,
            // 16-bit buffers are widened to float32 before they get here: by
            // `collective::reduced` for reductions, by `half_through_f32` for the rest.
            (s, r) => {
                return Err(format!(
                    "internal: buffers of {} and {} in one collective",
                    s.dtype(),
                    r.dtype()
                ));
            }
        }
    };
}

/// Runs `$body` with `$v` bound to the typed slice of a buffer.
macro_rules! with_slice {
    ($buf:expr, |$v:ident| $body:expr) => {
        match $buf {
            Buffer::F32($v) => $body,
            Buffer::F64($v) => $body,
            Buffer::I32($v) => $body,
            Buffer::I64($v) => $body,
            Buffer::U8($v) => $body,
            Buffer::Bool($v) => $body,
            b => {
                return Err(format!(
                    "internal: a {} buffer reached MPI unwidened",
                    b.dtype()
                ));
            }
        }
    };
}

/// MPI has no 16-bit float types: float16 and bfloat16 buffers are moved as float32
/// (exact both ways) and `recv` is rounded back. (Reductions get float32 buffers
/// already: `collective::reduced` widens, reduces and divides before rounding once.)
fn half_through_f32(
    send: &Buffer,
    recv: &mut Buffer,
    run: impl FnOnce(&Buffer, &mut Buffer) -> Result<(), String>,
) -> Result<(), String> {
    let wide = |b: &Buffer| half_float::widen(b, &Layout::contiguous(&[b.len()]));
    let mut wide_recv = wide(recv);
    run(&wide(send), &mut wide_recv)?;
    *recv = half_float::narrow(&wide_recv, recv.dtype());
    Ok(())
}

fn system_op(op: ReduceOp) -> SystemOperation {
    match op {
        // The engine divides after the sum.
        ReduceOp::Sum | ReduceOp::Mean => SystemOperation::sum(),
        ReduceOp::Max => SystemOperation::max(),
        ReduceOp::Min => SystemOperation::min(),
        ReduceOp::Prod => SystemOperation::product(),
    }
}

/// Ends every process of the job (`MPI_Abort` on the world). Open MPI honours it from
/// any thread, which is what it is for: the communication thread may be stuck.
pub(crate) fn abort_job(code: i32) {
    // SAFETY: MPI is initialised (this is only installed after it was) and MPI_Abort
    // takes no pointers; it does not return.
    unsafe {
        mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, code);
    }
}

impl Mpi {
    /// Initialises MPI on this thread; `None` when MPI was initialised before.
    pub(crate) fn start() -> Result<Mpi, String> {
        let (universe, threading) = mpi::initialize_with_threading(mpi::Threading::Funneled)
            .ok_or("MPI was already initialised in this process")?;
        if threading == mpi::Threading::Single {
            log::warn!(
                "the MPI library offers only MPI_THREAD_SINGLE; Spore calls it from one thread, which works with Open MPI"
            );
        }
        let world = universe.world();
        let control = world.duplicate();
        Ok(Mpi {
            rank: world.rank() as usize,
            size: world.size() as usize,
            comms: vec![world],
            control: Some(control),
            universe: Some(universe),
        })
    }

    fn comm(&self, index: CommIndex) -> Result<&SimpleCommunicator, String> {
        self.comms
            .get(index)
            .ok_or_else(|| format!("internal: no communicator #{index}"))
    }
}

fn rank_of(r: usize) -> Result<i32, String> {
    i32::try_from(r).map_err(|_| format!("rank {r} does not fit MPI's int"))
}

impl Backend for Mpi {
    fn world_rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.size
    }

    fn create_group(&mut self, world_ranks: &[usize]) -> Result<CommIndex, String> {
        let ranks: Vec<i32> = world_ranks
            .iter()
            .map(|&r| rank_of(r))
            .collect::<Result<_, _>>()?;
        let world = self.comm(0)?;
        let group = world.group().include(&ranks);
        // MPI_Comm_create_group: collective over the group's members only.
        let comm = world
            .split_by_subgroup(&group)
            .ok_or_else(|| format!("rank {} is not among ranks {world_ranks:?}", self.rank))?;
        self.comms.push(comm);
        Ok(self.comms.len() - 1)
    }

    fn all_reduce(
        &mut self,
        comm: CommIndex,
        send: &Buffer,
        recv: &mut Buffer,
        op: ReduceOp,
    ) -> Result<(), String> {
        let c = self.comm(comm)?;
        with_pair!(send, recv, |s, r| c.all_reduce_into(
            &s[..],
            &mut r[..],
            system_op(op)
        ));
        Ok(())
    }

    fn all_gather(
        &mut self,
        comm: CommIndex,
        send: &Buffer,
        recv: &mut Buffer,
    ) -> Result<(), String> {
        if send.dtype().is_half() {
            return half_through_f32(send, recv, |s, r| self.all_gather(comm, s, r));
        }
        let c = self.comm(comm)?;
        with_pair!(send, recv, |s, r| c.all_gather_into(&s[..], &mut r[..]));
        Ok(())
    }

    fn reduce_scatter(
        &mut self,
        comm: CommIndex,
        send: &Buffer,
        recv: &mut Buffer,
        op: ReduceOp,
    ) -> Result<(), String> {
        let c = self.comm(comm)?;
        with_pair!(send, recv, |s, r| c.reduce_scatter_block_into(
            &s[..],
            &mut r[..],
            system_op(op)
        ));
        Ok(())
    }

    fn broadcast(&mut self, comm: CommIndex, data: &mut Buffer, root: usize) -> Result<(), String> {
        if data.dtype().is_half() {
            let send = data.clone();
            return half_through_f32(&send, data, |_, r| self.broadcast(comm, r, root));
        }
        let c = self.comm(comm)?;
        let root = c.process_at_rank(rank_of(root)?);
        with_slice!(data, |v| root.broadcast_into(&mut v[..]));
        Ok(())
    }

    fn all_to_all(
        &mut self,
        comm: CommIndex,
        send: &Buffer,
        recv: &mut Buffer,
    ) -> Result<(), String> {
        if send.dtype().is_half() {
            return half_through_f32(send, recv, |s, r| self.all_to_all(comm, s, r));
        }
        let c = self.comm(comm)?;
        with_pair!(send, recv, |s, r| c.all_to_all_into(&s[..], &mut r[..]));
        Ok(())
    }

    fn send(
        &mut self,
        comm: CommIndex,
        data: &Buffer,
        dest: usize,
        tag: i32,
    ) -> Result<(), String> {
        if data.dtype().is_half() {
            let wide = half_float::widen(data, &Layout::contiguous(&[data.len()]));
            return self.send(comm, &wide, dest, tag);
        }
        let c = self.comm(comm)?;
        let to = c.process_at_rank(rank_of(dest)?);
        with_slice!(data, |v| to.send_with_tag(&v[..], tag));
        Ok(())
    }

    fn recv(
        &mut self,
        comm: CommIndex,
        data: &mut Buffer,
        src: usize,
        tag: i32,
    ) -> Result<(), String> {
        if data.dtype().is_half() {
            let send = data.clone();
            return half_through_f32(&send, data, |_, r| self.recv(comm, r, src, tag));
        }
        let c = self.comm(comm)?;
        let from = c.process_at_rank(rank_of(src)?);
        with_slice!(data, |v| {
            from.receive_into_with_tag(&mut v[..], tag);
        });
        Ok(())
    }

    fn barrier(&mut self, comm: CommIndex) -> Result<(), String> {
        self.comm(comm)?.barrier();
        Ok(())
    }

    fn finish(&mut self, timeout: Duration) -> Result<(), String> {
        let Some(control) = &self.control else {
            return Ok(());
        };
        // A non-blocking barrier polled against a deadline: a rank that never arrives
        // (stuck waiting for this one, or gone) must not hang this one forever.
        let mut request = control.immediate_barrier();
        let deadline = Instant::now() + timeout;
        loop {
            match request.test() {
                Ok(_) => break,
                Err(pending) => request = pending,
            }
            if Instant::now() >= deadline {
                // The request stays pending: MPI ends with the job's abort.
                std::mem::forget(request);
                return Err(format!(
                    "not every rank reached the end of the job within {} s",
                    timeout.as_secs_f64()
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // Communicators before the universe: freeing one after MPI_Finalize is an error.
        self.comms.clear();
        self.control = None;
        self.universe = None;
        Ok(())
    }
}
