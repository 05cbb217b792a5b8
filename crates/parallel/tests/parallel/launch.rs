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
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for mpirun") {
            break status;
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
            "{}{}",
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
