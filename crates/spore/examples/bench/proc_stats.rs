//! What `/proc` tells the harness: the machine's and this process's CPU time (to see how
//! much of the machine other processes took while a workload was timed) and this process's
//! resident memory.
//!
//! ```text
//! let before = CpuTicks::now();   // ... timed steps ...
//! let share = before.zip(CpuTicks::now()).map(|(a, b)| a.foreign_share_until(b));
//! ```

/// CPU time in clock ticks since boot: the whole machine's busy and total time
/// (`/proc/stat`) and this process's (`/proc/self/stat`, all its threads).
#[derive(Clone, Copy)]
pub struct CpuTicks {
    busy: u64,
    total: u64,
    own: u64,
}

impl CpuTicks {
    /// Now, or `None` off Linux (or when `/proc` reads as something unexpected).
    pub fn now() -> Option<CpuTicks> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        // user nice system idle iowait irq softirq steal, as the peers' driver counts.
        let machine: Vec<u64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .take(8)
            .map(|v| v.parse().ok())
            .collect::<Option<_>>()?;
        if machine.len() < 8 {
            return None;
        }
        let total: u64 = machine.iter().sum();
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        // After the command name (which may hold spaces and parentheses) come the state,
        // ten more fields, then user and system time.
        let after_name: Vec<&str> = own.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks = |i: usize| after_name.get(i)?.parse::<u64>().ok();
        Some(CpuTicks {
            busy: total - machine[3] - machine[4],
            total,
            own: ticks(11)? + ticks(12)?,
        })
    }

    /// Share of the machine's CPU capacity that other processes used from `self` to
    /// `later`: busy time that was not this process's, over all CPUs' time.
    pub fn foreign_share_until(self, later: CpuTicks) -> f64 {
        let total = later.total.saturating_sub(self.total);
        let own = later.own.saturating_sub(self.own);
        let foreign = later.busy.saturating_sub(self.busy).saturating_sub(own);
        if total == 0 {
            0.0
        } else {
            foreign as f64 / total as f64
        }
    }
}

/// Resident memory now (`VmRSS`, MiB).
pub fn rss_mb() -> f64 {
    proc_status_mb("VmRSS:")
}

/// Peak resident memory of this process in MiB (`VmHWM`), as the peers report it.
pub fn peak_rss_mb() -> f64 {
    proc_status_mb("VmHWM:")
}

/// A `/proc/self/status` line in kB, as MiB (NaN where there is none).
fn proc_status_mb(key: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}
