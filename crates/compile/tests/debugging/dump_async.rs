//! The asynchronous writer (`e2e_dump_settings.enable: false`): a background thread writes
//! what ops queue. It must write exactly what the synchronous dump writes, wait for the
//! writer when its queue is full, and report a write error instead of losing it.

use spore_compile::jit;
use spore_core::Tensor;
use spore_core::debug::dump::{self, config::DumpConfig};

use std::collections::BTreeMap;

use super::{LeNet, batch, dump_json, files_under, serial, temp_dir};

/// A dumped file's path below the graph's folder (`rank_0/LeNet/<graph>/`), with the
/// timestamp field (microseconds since the epoch: the only run of 13 or more digits)
/// replaced, so that two dumps of the same steps name their files alike.
fn stable_name(below_graph: &str) -> String {
    below_graph
        .split('.')
        .map(|f| {
            if f.len() >= 13 && f.bytes().all(|b| b.is_ascii_digit()) {
                "T"
            } else {
                f
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Dumps `runs` compiled LeNet steps with the synchronous or asynchronous writer; returns
/// the graph's dump folder and its files, by stable name.
fn dump_steps(
    name: &str,
    synchronous: bool,
    runs: usize,
) -> (std::path::PathBuf, BTreeMap<String, String>) {
    let dir = temp_dir(name);
    let (x, y) = batch();
    let net = std::sync::Arc::new(LeNet::new());
    let n2 = net.clone();
    let step = jit(name, move |a: &[Tensor]| Ok(vec![n2.step(&a[0], &a[1])?]));
    let json = dump_json(&dir, r#", "saved_data": "full""#)
        .replace(r#""enable": true"#, &format!(r#""enable": {synchronous}"#));
    let config = DumpConfig::parse(&json).unwrap();
    assert_eq!(config.synchronous, synchronous);
    dump::enable(config).unwrap();
    let mut result = Ok(vec![]);
    for _ in 0..runs {
        result = step.call(&[x.clone(), y.clone()]);
        if result.is_err() {
            break;
        }
    }
    dump::disable().unwrap();
    result.unwrap();
    let graphs: Vec<_> = std::fs::read_dir(dir.join("rank_0/LeNet"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(graphs.len(), 1, "one compiled graph: {graphs:?}");
    let graph = graphs[0].clone();
    let files = files_under(&graph)
        .into_iter()
        .map(|f| (stable_name(&f), f))
        .collect();
    (graph, files)
}

#[test]
fn asynchronous_dump_writes_what_the_synchronous_dump_writes() {
    let _guard = serial();
    let (sync_dir, sync_files) = dump_steps("dump-sync", true, 3);
    let (async_dir, async_files) = dump_steps("dump-async", false, 3);
    let npy_count = sync_files.keys().filter(|n| n.ends_with(".npy")).count();
    assert!(npy_count > 100, "only {npy_count} tensors dumped");
    let only_in = |a: &BTreeMap<String, String>, b: &BTreeMap<String, String>| {
        a.keys()
            .filter(|k| !b.contains_key(*k))
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert!(
        sync_files.len() == async_files.len() && only_in(&sync_files, &async_files).is_empty(),
        "the writers wrote different files: {} against {}; only synchronous: {:?}; only asynchronous: {:?}",
        sync_files.len(),
        async_files.len(),
        only_in(&sync_files, &async_files),
        only_in(&async_files, &sync_files)
    );
    // Same network, same inputs: every tensor has the same bytes, and each statistic.csv
    // one line per tensor.
    for (name, sync_file) in &sync_files {
        let (s, a) = (sync_dir.join(sync_file), async_dir.join(&async_files[name]));
        if name.ends_with(".npy") {
            let same = std::fs::read(&s).unwrap() == std::fs::read(&a).unwrap();
            assert!(same, "{name}: the asynchronous writer wrote other bytes");
        } else if name.ends_with("statistic.csv") {
            let lines = |p: &std::path::Path| std::fs::read_to_string(p).unwrap().lines().count();
            assert_eq!(lines(&s), lines(&a), "{name}");
            assert!(lines(&s) > 100, "{name}: {} lines", lines(&s));
        }
    }
}

#[test]
fn asynchronous_dump_reports_a_write_error() {
    let _guard = serial();
    let dir = temp_dir("dump-async-error");
    let json = dump_json(&dir, "").replace(r#""enable": true"#, r#""enable": false"#);
    dump::enable(DumpConfig::parse(&json).unwrap()).unwrap();
    // A file where the writer thread wants the network's folder: nothing can be written
    // below it, and the error must reach the caller.
    std::fs::write(dir.join("rank_0/LeNet"), b"not a folder").unwrap();
    let (x, y) = batch();
    let net = std::sync::Arc::new(LeNet::new());
    let n2 = net.clone();
    let step = jit("async_error", move |a: &[Tensor]| {
        Ok(vec![n2.step(&a[0], &a[1])?])
    });
    let result = step.call(&[x, y]);
    let disabled = dump::disable();
    let err = match (result, disabled) {
        (Err(e), _) | (Ok(_), Err(e)) => e.to_string(),
        (Ok(_), Ok(())) => panic!("a dump that could not be written reported no error"),
    };
    assert!(
        err.contains("rank_0/LeNet"),
        "the error should name the path: {err}"
    );
}
