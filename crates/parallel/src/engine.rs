//! The communication thread. Every call into the transport runs here, in submission
//! order: a rank's collectives therefore happen in the order its program issued them
//! (the same on every rank), MPI is only ever called from one thread, and a collective
//! submitted without waiting (a gradient bucket's AllReduce) runs while the submitting
//! thread goes on computing.
//!
//! Faults end the job instead of hanging it:
//! - a caller waits at most the communication timeout (`SPORE_COMM_TIMEOUT`, seconds,
//!   default 300) for a collective, then gets an error naming the op, its group and this
//!   rank; the transport is then stuck in that collective, so the end of the process
//!   aborts the whole job (`MPI_Abort`) rather than waiting for it;
//! - at the end of the process every rank waits twice that bound for the others to end,
//!   then shuts MPI down; a rank that never arrives (gone, or stuck waiting for a rank
//!   that has ended) makes the others abort the job with a message;
//! - a rank killed by a signal is noticed by `mpirun`, which ends the others.
//!
//! ```
//! let t = spore_parallel::engine_timeout_from(Some("2.5")).unwrap();
//! assert_eq!(t.as_millis(), 2500);
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use spore_core::{Error, Result};

use crate::backend::{AbortJob, Backend};

type Job = Box<dyn FnOnce(&mut dyn Backend) + Send>;

enum Message {
    Run(Job),
    /// End of the job: the handshake with the other ranks, then shutting down.
    Finish(Sender<std::result::Result<(), String>>),
}

/// Which transport a job runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// One process, no launcher.
    Local,
    /// Open MPI (feature `mpi`).
    Mpi,
}

pub(crate) struct Engine {
    jobs: Sender<Message>,
    pub(crate) rank: usize,
    pub(crate) size: usize,
    pub(crate) kind: BackendKind,
    pub(crate) timeout: Duration,
    /// Set when a caller gave up waiting: the thread is stuck inside the transport.
    wedged: AtomicBool,
    finished: AtomicBool,
    abort: Option<AbortJob>,
    thread: std::sync::Mutex<Option<JoinHandle<()>>>,
}

/// Parses `SPORE_COMM_TIMEOUT` (seconds, fractions allowed; default 300).
pub fn engine_timeout_from(value: Option<&str>) -> Result<Duration> {
    let Some(v) = value else {
        return Ok(Duration::from_secs(300));
    };
    match v.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Duration::from_secs_f64(s)),
        _ => Err(Error::invalid(format!(
            "SPORE_COMM_TIMEOUT must be a positive number of seconds, got {v:?}"
        ))),
    }
}

/// A submitted job's result, to be waited for.
pub(crate) struct Pending<R> {
    reply: Receiver<R>,
}

impl Engine {
    /// Starts the communication thread with the backend `make` builds there.
    pub(crate) fn start(
        kind: BackendKind,
        make: impl FnOnce() -> std::result::Result<Box<dyn Backend>, String> + Send + 'static,
        abort: Option<AbortJob>,
        timeout: Duration,
    ) -> Result<Engine> {
        let (jobs, inbox) = unbounded::<Message>();
        let (ready_tx, ready_rx) = bounded::<std::result::Result<(usize, usize), String>>(1);
        let thread = std::thread::Builder::new()
            .name("spore-communication".into())
            .spawn(move || serve(make, inbox, ready_tx, timeout))
            .map_err(|e| {
                Error::invalid(format!("init: cannot start the communication thread: {e}"))
            })?;
        let (rank, size) = ready_rx
            .recv()
            .map_err(|_| Error::invalid("init: the communication thread ended while starting"))?
            .map_err(|e| Error::invalid(format!("init: {e}")))?;
        Ok(Engine {
            jobs,
            rank,
            size,
            kind,
            timeout,
            wedged: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            abort,
            thread: std::sync::Mutex::new(Some(thread)),
        })
    }

    /// Queues `job` behind every job submitted before it.
    pub(crate) fn submit<R: Send + 'static>(
        &self,
        job: impl FnOnce(&mut dyn Backend) -> R + Send + 'static,
    ) -> Result<Pending<R>> {
        if self.finished.load(Ordering::Acquire) {
            return Err(Error::invalid(
                "communication: the job's communication was released (release() or the end of the process); no collective can run",
            ));
        }
        let (tx, reply) = bounded(1);
        let run: Job = Box::new(move |b| {
            let _ = tx.send(job(b));
        });
        self.jobs
            .send(Message::Run(run))
            .map_err(|_| Error::invalid("communication: the communication thread has ended"))?;
        Ok(Pending { reply })
    }

    /// Submits and waits; `what` names the collective in a timeout error.
    pub(crate) fn run<R: Send + 'static>(
        &self,
        what: impl FnOnce() -> String,
        job: impl FnOnce(&mut dyn Backend) -> R + Send + 'static,
    ) -> Result<R> {
        self.submit(job)?.wait(self, what)
    }

    /// Ends communication on this rank (see the module's documentation). Idempotent.
    pub(crate) fn finish(&self) -> Result<()> {
        if self.finished.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if self.wedged.load(Ordering::Acquire) {
            return Err(Error::invalid(
                "communication: a collective never completed, so MPI cannot be shut down cleanly",
            ));
        }
        let (tx, rx) = bounded(1);
        if self.jobs.send(Message::Finish(tx)).is_err() {
            return Ok(());
        }
        // The handshake itself is bounded by twice the timeout; the margin covers jobs
        // queued before it.
        let outcome = rx
            .recv_timeout(self.timeout * 3 + Duration::from_secs(5))
            .map_err(|_| "the communication thread did not finish".to_string())
            .and_then(|r| r);
        if let Err(e) = outcome {
            return Err(Error::invalid(format!(
                "communication on rank {} of {}: {e}",
                self.rank, self.size
            )));
        }
        if let Ok(mut t) = self.thread.lock()
            && let Some(handle) = t.take()
        {
            let _ = handle.join();
        }
        Ok(())
    }

    /// Ends every process of the job with `message` (printed first).
    pub(crate) fn abort_job(&self, message: &str) -> ! {
        eprintln!(
            "[spore rank {} of {}] {message}; ending the whole job",
            self.rank, self.size
        );
        if let Some(abort) = self.abort {
            abort(1);
        }
        std::process::exit(1)
    }
}

impl<R> Pending<R> {
    /// Waits for the result, at most the engine's timeout.
    pub(crate) fn wait(self, engine: &Engine, what: impl FnOnce() -> String) -> Result<R> {
        match self.reply.recv_timeout(engine.timeout) {
            Ok(r) => Ok(r),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                engine.wedged.store(true, Ordering::Release);
                Err(Error::invalid(format!(
                    "{} did not complete within {} s on rank {} of {}: another rank has not joined it \
                     (it failed, ended, is stuck, or issued different collectives); \
                     SPORE_COMM_TIMEOUT sets the bound",
                    what(),
                    engine.timeout.as_secs_f64(),
                    engine.rank,
                    engine.size
                )))
            }
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Err(Error::invalid(format!(
                "{}: the communication thread ended before the collective ran (rank {} of {})",
                what(),
                engine.rank,
                engine.size
            ))),
        }
    }
}

/// The communication thread's loop.
fn serve(
    make: impl FnOnce() -> std::result::Result<Box<dyn Backend>, String>,
    inbox: Receiver<Message>,
    ready: Sender<std::result::Result<(usize, usize), String>>,
    timeout: Duration,
) {
    let mut backend = match make() {
        Ok(b) => b,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = ready.send(Ok((backend.world_rank(), backend.world_size())));
    for message in inbox {
        match message {
            Message::Run(job) => job(backend.as_mut()),
            Message::Finish(reply) => {
                // Twice a collective's bound: a rank still waiting in a collective for
                // this one gives up first, so the job's end is reported by the rank
                // that was left waiting (the one whose message explains the failure).
                let _ = reply.send(backend.finish(timeout * 2));
                return;
            }
        }
    }
}

/// Whether the engine's thread is stuck (a caller timed out).
impl Engine {
    pub(crate) fn is_wedged(&self) -> bool {
        self.wedged.load(Ordering::Acquire)
    }
}
