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

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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

/// What the end of the process needs to know about the communication thread.
#[derive(Default)]
struct Health {
    /// Jobs submitted and not yet finished.
    outstanding: AtomicUsize,
    /// The latest collective a caller gave up waiting for.
    timed_out: Mutex<Option<String>>,
    /// A job panicked: the transport's state is unknown.
    panicked: Mutex<Option<String>>,
}

pub(crate) struct Engine {
    jobs: Sender<Message>,
    pub(crate) rank: usize,
    pub(crate) size: usize,
    pub(crate) kind: BackendKind,
    pub(crate) timeout: Duration,
    health: Arc<Health>,
    finished: AtomicBool,
    abort: Option<AbortJob>,
    thread: Mutex<Option<JoinHandle<()>>>,
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
        let health = Arc::new(Health::default());
        let (ready_tx, ready_rx) = bounded::<std::result::Result<(usize, usize), String>>(1);
        let thread = std::thread::Builder::new()
            .name("spore-communication".into())
            .spawn({
                let health = health.clone();
                move || serve(make, inbox, ready_tx, timeout, &health)
            })
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
            health,
            finished: AtomicBool::new(false),
            abort,
            thread: Mutex::new(Some(thread)),
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
        self.health.outstanding.fetch_add(1, Ordering::AcqRel);
        if self.jobs.send(Message::Run(run)).is_err() {
            self.health.outstanding.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::invalid(
                "communication: the communication thread has ended",
            ));
        }
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
        if let Some(why) = self.why_stuck() {
            return Err(Error::invalid(format!(
                "communication on rank {} of {}: {why}, so MPI cannot be shut down cleanly",
                self.rank, self.size
            )));
        }
        let (tx, rx) = bounded(1);
        if self.jobs.send(Message::Finish(tx)).is_err() {
            return Err(Error::invalid(format!(
                "communication on rank {} of {}: the communication thread has ended",
                self.rank, self.size
            )));
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

    /// Why the transport cannot be shut down cleanly, if it cannot: a job panicked, or a
    /// collective a caller gave up on is still running after a short grace (one that
    /// completed late does not count).
    pub(crate) fn why_stuck(&self) -> Option<String> {
        let lock = |m: &Mutex<Option<String>>| {
            m.lock()
                .map(|g| g.clone())
                .unwrap_or_else(|p| p.into_inner().clone())
        };
        if let Some(p) = lock(&self.health.panicked) {
            return Some(format!("the communication thread panicked in {p}"));
        }
        let timed_out = lock(&self.health.timed_out)?;
        let grace = Instant::now() + self.timeout.min(Duration::from_secs(5));
        while self.health.outstanding.load(Ordering::Acquire) > 0 {
            if Instant::now() >= grace {
                return Some(format!("{timed_out} never completed"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// Ends every process of the job with `message` (printed first). Called at the end
    /// of the process (inside `atexit`), hence `_exit` rather than `exit`.
    pub(crate) fn abort_job(&self, message: &str) -> ! {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        eprintln!(
            "[spore rank {} of {}] {message}; ending the whole job",
            self.rank, self.size
        );
        if let Some(abort) = self.abort {
            abort(1);
        }
        // SAFETY: `_exit` ends the process at once; nothing runs after it.
        unsafe { libc::_exit(1) }
    }
}

impl<R> Pending<R> {
    /// Waits for the result, at most the engine's timeout.
    pub(crate) fn wait(self, engine: &Engine, what: impl FnOnce() -> String) -> Result<R> {
        match self.reply.recv_timeout(engine.timeout) {
            Ok(r) => Ok(r),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                let what = what();
                if let Ok(mut t) = engine.health.timed_out.lock() {
                    *t = Some(what.clone());
                }
                Err(Error::invalid(format!(
                    "{what} did not complete within {} s: another rank has not joined it \
                     (it failed, ended, is stuck, or issued different collectives); \
                     SPORE_COMM_TIMEOUT sets the bound, and this process's end ends the whole job",
                    engine.timeout.as_secs_f64(),
                )))
            }
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Err(Error::invalid(format!(
                "{}: the communication thread failed before the collective completed (rank {} of {})",
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
    health: &Health,
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
            Message::Run(job) => {
                // A panic must not take the thread down silently: the waiting caller
                // gets an error (its reply channel closes) and the end of the process
                // aborts the job, since the transport's state is unknown.
                if let Err(p) = catch_unwind(AssertUnwindSafe(|| job(backend.as_mut()))) {
                    let why = p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "a collective".into());
                    if let Ok(mut slot) = health.panicked.lock() {
                        *slot = Some(why);
                    }
                }
                health.outstanding.fetch_sub(1, Ordering::AcqRel);
            }
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
