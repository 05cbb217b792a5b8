//! Logging through the `log` facade, with the level taken from `GLOG_v` as MindSpore does
//! (0 DEBUG, 1 INFO, 2 WARNING (default), 3 ERROR, 4 CRITICAL); `SPORE_LOG` overrides it.
//! [`init`] installs a small stderr logger unless the program installed its own.
//!
//! ```
//! spore_core::logging::init();
//! log::warn!("shown at the default level");
//! ```

use std::sync::Once;

use log::{Level, LevelFilter, Log, Metadata, Record};

struct StderrLogger;

impl Log for StderrLogger {
    fn enabled(&self, m: &Metadata) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &Record) {
        if self.enabled(r.metadata()) {
            let tag = match r.level() {
                Level::Error => "ERROR",
                Level::Warn => "WARNING",
                Level::Info => "INFO",
                Level::Debug | Level::Trace => "DEBUG",
            };
            eprintln!("[{tag}] {}: {}", r.target(), r.args());
        }
    }
    fn flush(&self) {}
}

static LOGGER: StderrLogger = StderrLogger;
static INIT: Once = Once::new();

/// The level `GLOG_v` (or `SPORE_LOG`) asks for.
pub fn level_from_env() -> LevelFilter {
    let v = std::env::var("SPORE_LOG")
        .or_else(|_| std::env::var("GLOG_v"))
        .unwrap_or_default();
    match v.trim() {
        "0" => LevelFilter::Debug,
        "1" => LevelFilter::Info,
        "3" | "4" => LevelFilter::Error,
        _ => LevelFilter::Warn,
    }
}

/// Installs the stderr logger once (no-op if a logger is already set).
pub fn init() {
    INIT.call_once(|| {
        if log::set_logger(&LOGGER).is_ok() {
            log::set_max_level(level_from_env());
        }
    });
}
