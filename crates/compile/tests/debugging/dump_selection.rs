//! `kernels` filtering, iteration ranges and `input_output` select exactly what they promise.

use spore_compile::jit;
use spore_core::Tensor;
use spore_core::debug::dump::{self, config::DumpConfig};

use super::{LeNet, batch, dump_json, files_under, serial, temp_dir};

/// Runs `runs` compiled LeNet steps with a dump configured by `extra`; returns the dumped
/// files (relative to rank_0/LeNet/{graph}/).
fn dumped(name: &str, extra: &str, runs: usize) -> Vec<String> {
    let dir = temp_dir(name);
    let (x, y) = batch();
    let net = std::sync::Arc::new(LeNet::new());
    let n2 = net.clone();
    let step = jit(name, move |a: &[Tensor]| Ok(vec![n2.step(&a[0], &a[1])?]));
    dump::enable(
        DumpConfig::parse(&dump_json(&dir, extra).replace("\"dump_mode\": 0, ", "")).unwrap(),
    )
    .unwrap();
    let mut result = Ok(vec![]);
    for _ in 0..runs {
        result = step.call(&[x.clone(), y.clone()]);
    }
    dump::disable().unwrap();
    result.unwrap();
    let base = dir.join("rank_0/LeNet");
    let graph = std::fs::read_dir(&base)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    files_under(&graph)
}

fn op_types(files: &[String]) -> std::collections::BTreeSet<String> {
    files
        .iter()
        .filter(|f| f.ends_with(".npy"))
        .map(|f| {
            f.rsplit('/')
                .next()
                .unwrap()
                .split('.')
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

#[test]
fn kernels_iterations_and_input_output_select_exactly() {
    let _guard = serial();
    // An op-type entry matches by case-insensitive substring.
    let files = dumped("sel-type", r#", "dump_mode": 1, "kernels": ["conv2d"]"#, 1);
    let types = op_types(&files);
    assert_eq!(
        types.into_iter().collect::<Vec<_>>(),
        vec!["Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput"]
    );

    // A full scope name matches one op.
    let all = dumped("sel-all", r#", "dump_mode":0"#, 1);
    let a_matmul = all
        .iter()
        .find(|f| f.contains("/MatMul.") && f.contains(".output."))
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    let full_name = a_matmul.split('.').nth(1).unwrap().replace('_', "/");
    let files = dumped(
        "sel-name",
        &format!(r#", "dump_mode": 1, "kernels": ["{full_name}"]"#),
        1,
    );
    let names: std::collections::BTreeSet<String> = files
        .iter()
        .filter(|f| f.ends_with(".npy"))
        .map(|f| {
            f.rsplit('/')
                .next()
                .unwrap()
                .split('.')
                .nth(1)
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");

    // Iteration ranges: "1|3" of 4 runs dumps exactly iterations 1 and 3.
    let files = dumped("sel-iter", r#", "dump_mode":0, "iteration": "1|3""#, 4);
    let iterations: std::collections::BTreeSet<&str> =
        files.iter().map(|f| f.split('/').next().unwrap()).collect();
    assert_eq!(iterations.into_iter().collect::<Vec<_>>(), vec!["1", "3"]);

    // input_output: 1 only inputs, 2 only outputs.
    for (mode, want, not) in [("1", ".input.", ".output."), ("2", ".output.", ".input.")] {
        let files = dumped(
            &format!("sel-io{mode}"),
            &format!(r#", "dump_mode": 1, "kernels": ["ReLU"], "input_output": {mode}"#),
            1,
        );
        let npy: Vec<&String> = files.iter().filter(|f| f.ends_with(".npy")).collect();
        assert!(
            !npy.is_empty() && npy.iter().all(|f| f.contains(want) && !f.contains(not)),
            "{npy:?}"
        );
    }

    // saved_data "statistic" writes statistic.csv with MindSpore's header and no .npy.
    let files = dumped(
        "sel-stat",
        r#", "dump_mode": 1, "kernels": ["MaxPool"], "saved_data": "statistic""#,
        1,
    );
    assert!(
        files.iter().all(|f| !f.ends_with(".npy"))
            && files.iter().any(|f| f.ends_with("statistic.csv")),
        "{files:?}"
    );
}
