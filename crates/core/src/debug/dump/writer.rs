//! Where dumped tensors go: files named as MindSpore 2.x names them, written either at
//! once (synchronous dump) or by a background thread fed through a queue with a memory
//! bound (asynchronous dump). Tensors are immutable, so queueing one is a snapshot.
//!
//! ```
//! use spore_core::debug::dump::writer::file_name;
//! assert_eq!(
//!     file_name("Conv2D", "Default/network/conv1/Conv2D-op12", 3, 7, "input", 1),
//!     "Conv2D.Default_network_conv1_Conv2D-op12.3.0.7.input.1.DefaultFormat.npy"
//! );
//! ```

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use super::stats::{STATISTIC_HEADER, TensorStats, dtype_name};
use crate::debug::npy;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// `{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}.{io}.{slot}.DefaultFormat.npy`
pub fn file_name(
    op_type: &str,
    op_name: &str,
    task_id: usize,
    timestamp: u128,
    io: &str,
    slot: usize,
) -> String {
    format!(
        "{op_type}.{}.{task_id}.0.{timestamp}.{io}.{slot}.DefaultFormat.npy",
        op_name.replace('/', "_")
    )
}

/// One tensor to write.
pub struct Record {
    pub dir: PathBuf,
    pub op_type: String,
    pub op_name: String,
    pub task_id: usize,
    pub timestamp: u128,
    pub io: &'static str,
    pub slot: usize,
    pub tensor: Tensor,
    pub write_npy: bool,
    pub write_stats: bool,
}

impl Record {
    fn bytes(&self) -> usize {
        self.tensor.numel() * self.tensor.dtype().size_in_bytes()
    }
}

/// Writes records; owns the open `statistic.csv` files.
#[derive(Default)]
struct Files {
    csv: HashMap<PathBuf, BufWriter<File>>,
}

impl Files {
    fn write(&mut self, r: &Record) -> Result<()> {
        std::fs::create_dir_all(&r.dir)
            .map_err(|e| Error::io(&r.dir, format!("cannot create dump folder: {e}")))?;
        if r.write_npy {
            let path = r.dir.join(file_name(
                &r.op_type,
                &r.op_name,
                r.task_id,
                r.timestamp,
                r.io,
                r.slot,
            ));
            std::fs::write(&path, npy::encode(&r.tensor)?)
                .map_err(|e| Error::io(&path, format!("cannot write dump: {e}")))?;
        }
        if r.write_stats {
            let path = r.dir.join("statistic.csv");
            if !self.csv.contains_key(&path) {
                let fresh = !path.exists();
                let f = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(|e| Error::io(&path, e))?;
                let mut w = BufWriter::new(f);
                if fresh {
                    writeln!(w, "{STATISTIC_HEADER}").map_err(|e| Error::io(&path, e))?;
                }
                self.csv.insert(path.clone(), w);
            }
            let s = TensorStats::of(&r.tensor)?;
            let shape = format!(
                "({})",
                r.tensor
                    .shape()
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let line = format!(
                "{},{},{},0,{},{},{},{},{},\"{shape}\",{},{},{},{},{},{}",
                r.op_type,
                r.op_name,
                r.task_id,
                r.timestamp,
                r.io,
                r.slot,
                r.bytes(),
                dtype_name(&r.tensor),
                s.max,
                s.min,
                s.l2norm,
                s.nan,
                s.neg_inf,
                s.pos_inf
            );
            if let Some(w) = self.csv.get_mut(&path) {
                writeln!(w, "{line}").map_err(|e| Error::io(&path, e))?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        for (p, w) in &mut self.csv {
            w.flush().map_err(|e| Error::io(p, e))?;
        }
        Ok(())
    }
}

enum Job {
    Write(Record),
    Flush(SyncSender<Result<()>>),
}

/// Synchronous or background writing, with at most `max_pending_bytes` queued.
pub struct Writer {
    sync: Option<Mutex<Files>>,
    queue: Option<SyncSender<Job>>,
    pending: Arc<(Mutex<usize>, Condvar)>,
    max_pending_bytes: usize,
    thread: Mutex<Option<JoinHandle<()>>>,
    first_error: Arc<Mutex<Option<Error>>>,
}

impl Writer {
    pub fn synchronous() -> Writer {
        Writer {
            sync: Some(Mutex::new(Files::default())),
            queue: None,
            pending: Arc::new((Mutex::new(0), Condvar::new())),
            max_pending_bytes: 0,
            thread: Mutex::new(None),
            first_error: Arc::new(Mutex::new(None)),
        }
    }

    pub fn asynchronous(max_pending_bytes: usize) -> Writer {
        let (tx, rx): (SyncSender<Job>, Receiver<Job>) = sync_channel(4096);
        let pending = Arc::new((Mutex::new(0usize), Condvar::new()));
        let first_error: Arc<Mutex<Option<Error>>> = Arc::new(Mutex::new(None));
        let (p, fe) = (pending.clone(), first_error.clone());
        let thread = std::thread::Builder::new()
            .name("spore-dump-writer".into())
            .spawn(move || {
                let mut files = Files::default();
                for job in rx {
                    match job {
                        Job::Write(r) => {
                            let bytes = r.bytes();
                            if let Err(e) = files.write(&r) {
                                log::error!("dump: {e}");
                                if let Ok(mut g) = fe.lock() {
                                    g.get_or_insert(e);
                                }
                            }
                            let (lock, cv) = &*p;
                            if let Ok(mut n) = lock.lock() {
                                *n = n.saturating_sub(bytes);
                            }
                            cv.notify_all();
                        }
                        Job::Flush(done) => {
                            let r = files.flush();
                            let _ = done.send(r);
                        }
                    }
                }
            })
            .ok();
        Writer {
            sync: None,
            queue: Some(tx),
            pending,
            max_pending_bytes,
            thread: Mutex::new(thread),
            first_error,
        }
    }

    /// Writes now (synchronous) or queues, waiting while the queue holds too many bytes.
    pub fn submit(&self, r: Record) -> Result<()> {
        if let Some(files) = &self.sync {
            return files
                .lock()
                .map_err(|_| Error::invalid("dump writer poisoned"))?
                .write(&r);
        }
        let Some(q) = &self.queue else { return Ok(()) };
        let bytes = r.bytes();
        {
            let (lock, cv) = &*self.pending;
            let mut n = lock
                .lock()
                .map_err(|_| Error::invalid("dump queue poisoned"))?;
            while *n > 0 && *n + bytes > self.max_pending_bytes {
                n = cv
                    .wait(n)
                    .map_err(|_| Error::invalid("dump queue poisoned"))?;
            }
            *n += bytes;
        }
        q.send(Job::Write(r))
            .map_err(|_| Error::invalid("dump writer thread stopped"))
    }

    /// Waits until everything submitted is on disk; reports the first write error.
    pub fn flush(&self) -> Result<()> {
        if let Some(files) = &self.sync {
            files
                .lock()
                .map_err(|_| Error::invalid("dump writer poisoned"))?
                .flush()?;
        } else if let Some(q) = &self.queue {
            let (tx, rx) = sync_channel(1);
            q.send(Job::Flush(tx))
                .map_err(|_| Error::invalid("dump writer thread stopped"))?;
            rx.recv()
                .map_err(|_| Error::invalid("dump writer thread stopped"))??;
        }
        match self.first_error.lock().ok().and_then(|mut e| e.take()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.flush();
        self.queue.take();
        if let Some(t) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue bound smaller than two records: every submit after the first waits for the
    /// writer thread, and still every record reaches the disk, in order, with its bytes.
    #[test]
    fn asynchronous_writer_waits_when_full_and_loses_nothing() {
        let dir = std::env::temp_dir().join(format!("spore-writer-{}", std::process::id()));
        std::fs::remove_dir_all(&dir).ok();
        let writer = Writer::asynchronous(100);
        let tensors: Vec<Tensor> = (0..50)
            .map(|i| Tensor::from_vec(vec![i as f32; 16], &[16]).unwrap())
            .collect();
        for (i, t) in tensors.iter().enumerate() {
            let record = Record {
                dir: dir.clone(),
                op_type: "Add".into(),
                op_name: format!("Default/Add-op{i}"),
                task_id: i,
                timestamp: 1,
                io: "output",
                slot: 0,
                tensor: t.clone(),
                write_npy: true,
                write_stats: true,
            };
            writer.submit(record).unwrap();
        }
        writer.flush().unwrap();
        for (i, t) in tensors.iter().enumerate() {
            let path = dir.join(file_name(
                "Add",
                &format!("Default/Add-op{i}"),
                i,
                1,
                "output",
                0,
            ));
            let read = npy::decode(&std::fs::read(&path).unwrap()).unwrap();
            assert_eq!(read.to_vec::<f32>().unwrap(), t.to_vec::<f32>().unwrap());
        }
        let csv = std::fs::read_to_string(dir.join("statistic.csv")).unwrap();
        let tasks: Vec<&str> = csv
            .lines()
            .skip(1)
            .map(|l| l.split(',').nth(2).unwrap_or(""))
            .collect();
        let expected: Vec<String> = (0..50).map(|i| i.to_string()).collect();
        assert_eq!(tasks, expected, "statistic.csv rows in submission order");
        drop(writer);
        std::fs::remove_dir_all(&dir).ok();
    }
}
