//! Launching an inner test on several ranks through `mpirun`.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What a finished job printed, how it ended and how long it took.
pub struct Job {
    pub status: ExitStatus,
    /// stdout, then stderr.
    pub text: String,
    pub elapsed: Duration,
}

/// How long mpirun may outlive all of its ranks.
const LAUNCHER_GRACE: Duration = Duration::from_secs(15);

/// Whether `launcher` (a process id) has `ranks` children and all have exited (zombies
/// it has not reaped). Linux's `/proc/<pid>/task/<pid>/children`; false where it is
/// missing.
fn ranks_exited(launcher: u32, ranks: usize) -> bool {
    let path = format!("/proc/{launcher}/task/{launcher}/children");
    let Ok(list) = std::fs::read_to_string(path) else {
        return false;
    };
    let children: Vec<&str> = list.split_whitespace().collect();
    children.len() == ranks
        && children.iter().all(|c| {
            std::fs::read_to_string(format!("/proc/{c}/stat"))
                .ok()
                .and_then(|stat| {
                    let after = stat.rsplit_once(')')?.1;
                    after.split_whitespace().next().map(|state| state == "Z")
                })
                .unwrap_or(false)
        })
}

/// No job of these tests takes this long unless it hangs.
const HUNG: Duration = Duration::from_secs(600);

/// Runs the inner test `inner` (its full path, e.g. `collectives::rank_collectives`) on
/// `ranks` processes with `env` set, one Spore thread per rank.
pub fn mpirun(ranks: usize, inner: &str, env: &[(&str, &str)]) -> Job {
    require_mpi_feature();
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new("mpirun");
    // As root Open MPI refuses to start without the first flag; more ranks than cores
    // need the second. `--bind-to none` lets oversubscribed ranks share the cores;
    // `--tag-output` keeps each rank's lines whole (prefixed with its rank).
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        "none",
        "--tag-output",
    ])
    .args(["-n", &ranks.to_string()])
    .arg(exe)
    .args([
        "--exact",
        inner,
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("RAYON_NUM_THREADS", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run mpirun ({e}); scripts/test.sh installs openmpi-bin")
        });
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = vec![];
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let out = read(Box::new(child.stdout.take().expect("piped stdout")));
    let err = read(Box::new(child.stderr.take().expect("piped stderr")));
    let mut launcher_note = String::new();
    let mut ranks_gone_since: Option<Instant> = None;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for mpirun") {
            break status;
        }
        // Open MPI's launcher has been seen to stay up (rarely, on a loaded host) after
        // every rank had exited; the ranks' own behaviour is what the tests check, so
        // the launcher is ended, loudly, once its ranks have been gone for a while.
        match ranks_exited(child.id(), ranks) {
            true => {
                let since = *ranks_gone_since.get_or_insert_with(Instant::now);
                if since.elapsed() > LAUNCHER_GRACE {
                    let _ = child.kill();
                    launcher_note = format!(
                        "\n[launch] mpirun was still running {} s after all {ranks} ranks had exited; the test \
                         killed it\n",
                        LAUNCHER_GRACE.as_secs()
                    );
                    eprint!("{launcher_note}");
                }
            }
            false => ranks_gone_since = None,
        }
        if started.elapsed() > HUNG {
            let _ = child.kill();
            panic!(
                "{inner} on {ranks} ranks hung: killed after {} s",
                HUNG.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Job {
        status,
        text: format!(
            "{}{}{launcher_note}",
            out.join().unwrap_or_default(),
            err.join().unwrap_or_default()
        ),
        elapsed: started.elapsed(),
    }
}

/// Runs `inner` on `ranks` processes and fails with every rank's output unless all passed.
pub fn expect_success(ranks: usize, inner: &str) {
    let job = mpirun(ranks, inner, &[]);
    let text = &job.text;
    assert!(
        job.status.success(),
        "{inner} on {ranks} ranks failed ({}):\n{text}",
        job.status
    );
    // Every rank reached the end of the inner test (see `passed`).
    let passed = text.matches(PASSED).count();
    assert_eq!(
        passed, ranks,
        "expected {ranks} ranks to pass {inner}:\n{text}"
    );
}

const PASSED: &str = "spore-inner-test-passed";

/// The last line of an inner test: one whole line (libtest's own summary is written in
/// pieces that mpirun's output tagging splits).
pub fn passed(rank: usize) {
    println!("{PASSED} by rank {rank}");
}

/// The job's world as an inner test sees it (after `init`).
pub fn world() -> (usize, usize) {
    spore_parallel::init().unwrap();
    (
        spore_parallel::get_rank(None).unwrap(),
        spore_parallel::get_group_size(None).unwrap(),
    )
}

/// Without the `mpi` feature this fails loudly: a multi-process claim never run proves
/// nothing.
fn require_mpi_feature() {
    #[cfg(not(feature = "mpi"))]
    panic!(
        "\n\n*** spore-parallel's multi-process tests need the `mpi` feature: run \
         `cargo test -p spore-parallel --features mpi` (scripts/test.sh does) ***\n"
    );
}

/// Every file under `dir`, concatenated (lossily as text).
pub fn read_all(dir: &std::path::Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            text += &read_all(&path);
        } else if let Ok(bytes) = std::fs::read(&path) {
            text += &String::from_utf8_lossy(&bytes);
        }
    }
    text
}

/// `ranks_exited` sees a parent whose children have exited but were not reaped: a shell
/// that starts two short sleeps and then becomes a long one (which never waits).
#[test]
fn exited_but_unreaped_ranks_are_seen() {
    let mut parent = Command::new("sh")
        .args(["-c", "sleep 0.1 & sleep 0.1 & exec sleep 5"])
        .spawn()
        .expect("sh");
    let pid = parent.id();
    let seen = (0..40).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        ranks_exited(pid, 2)
    });
    let _ = parent.kill();
    let _ = parent.wait();
    assert!(seen, "two exited children of {pid} were not seen");
    assert!(!ranks_exited(std::process::id(), 2));
}
