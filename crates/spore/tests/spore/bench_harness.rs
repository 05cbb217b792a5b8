//! The benchmark harness measures in child processes; the thread count asked for must
//! reach them (it once set only the parent's pool, so every figure ran on 2 threads).

use std::path::PathBuf;

/// `target/<profile>/examples/bench`, which `cargo test` builds with the tests.
fn bench_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let bin = profile_dir.join("examples").join("bench");
    assert!(
        bin.is_file(),
        "{} is missing: run the tests with `cargo test --workspace` (it builds the examples)",
        bin.display()
    );
    let modified = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).unwrap();
    let sources = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/bench");
    let newest = std::fs::read_dir(&sources)
        .unwrap()
        .map(|e| modified(&e.unwrap().path()))
        .max()
        .unwrap();
    assert!(
        modified(&bin) >= newest,
        "{} is older than its source: run the tests with `cargo test --workspace` (it builds the examples)",
        bin.display()
    );
    bin
}

#[test]
fn bench_children_run_on_the_requested_thread_count() {
    let bin = bench_binary();
    let dir = std::env::temp_dir().join(format!("spore-bench-threads-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for threads in [1usize, 3] {
        let json = dir.join(format!("t{threads}.jsonl"));
        let out = std::process::Command::new(&bin)
            .args([
                "--only",
                "fma_peak",
                "--quick",
                "--threads",
                &threads.to_string(),
            ])
            .arg("--json")
            .arg(&json)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "bench failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(&json).unwrap();
        let record: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(
            record["threads"].as_u64(),
            Some(threads as u64),
            "the child measured on another thread count: {record}"
        );
    }
    let bad = std::process::Command::new(&bin)
        .args(["--only", "fma_peak", "--threads", "zero"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--threads expects"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `bench/run_all.sh` hands `SPORE_BENCH_THREADS` to Spore's harness and host probe, not
/// only to the peers (through their environment variables).
#[test]
fn run_all_passes_the_thread_count_to_spore() {
    let script = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/run_all.sh"),
    )
    .unwrap();
    let spore_lines: Vec<&str> = script
        .lines()
        .filter(|l| l.contains("spore_args=(") || l.contains("--child fma_peak"))
        .collect();
    assert_eq!(spore_lines.len(), 2, "{spore_lines:?}");
    for l in spore_lines {
        assert!(
            l.contains(r#"--threads "$THREADS""#),
            "no thread count in: {l}"
        );
    }
}
