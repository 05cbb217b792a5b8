//! A dump of one LeNet training iteration in Graph and in PyNative mode: the documented
//! files exist, every `.npy` loads (with Spore's reader and with NumPy), and the values
//! equal the intermediates computed eagerly.

use spore_compile::jit;
use spore_core::Tensor;
use spore_core::debug::{dump, npy};
use spore_core::ops::Conv2dOptions;

use super::{LeNet, batch, dump_json, files_under, serial, temp_dir};

fn enable(dir: &std::path::Path) {
    dump::enable(spore_core::debug::dump::config::DumpConfig::parse(&dump_json(dir, "")).unwrap())
        .unwrap();
}

/// The first dumped file whose name starts with `prefix` and contains `io`.
fn find(files: &[String], prefix: &str, io: &str) -> String {
    let mut hits: Vec<&String> = files
        .iter()
        .filter(|f| f.rsplit('/').next().unwrap().starts_with(prefix) && f.contains(io))
        .collect();
    // Task id (execution position) is the third dot-separated field.
    hits.sort_by_key(|f| {
        f.rsplit('/')
            .next()
            .unwrap()
            .split('.')
            .nth(2)
            .and_then(|t| t.parse::<usize>().ok())
            .unwrap_or(0)
    });
    hits.first()
        .unwrap_or_else(|| panic!("no {prefix} {io} in {files:?}"))
        .to_string()
}

/// NumPy's sum of a dumped `.npy` file. Python 3 with NumPy is required: `scripts/test.sh`
/// installs it, and without it this cross-check fails instead of passing unchecked.
fn numpy_sum(path: &std::path::Path) -> f64 {
    let out = std::process::Command::new("python3")
        .args(["-c", "import numpy, sys; a = numpy.load(sys.argv[1]); print(float(a.astype('float64').sum()), a.dtype)"])
        .arg(path)
        .output()
        .unwrap_or_else(|e| {
            panic!("the NumPy cross-check needs python3 with numpy (scripts/test.sh installs it): {e}")
        });
    if !out.status.success() {
        panic!(
            "numpy could not load {} (is numpy installed? scripts/test.sh installs it): {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "unexpected output from numpy for {}: {stdout:?}",
                path.display()
            )
        })
}

fn check_dump(root: &std::path::Path, graph_id: usize, lenet_w0: &Tensor, x: &Tensor) {
    let rank = root.join("rank_0");
    let files = files_under(&rank);
    assert!(
        files.contains(&".dump_metadata/data_dump.json".to_string()),
        "{files:?}"
    );
    let iter_dir = format!("LeNet/{graph_id}/0/");
    let in_iter: Vec<String> = files
        .iter()
        .filter(|f| f.starts_with(&iter_dir))
        .cloned()
        .collect();
    assert!(!in_iter.is_empty(), "nothing under {iter_dir}: {files:?}");
    for f in &in_iter {
        let name = f.rsplit('/').next().unwrap();
        // {op_type}.{op_name}.{task}.{stream}.{ts}.{io}.{slot}.DefaultFormat.npy; op names
        // may hold dots (parameter names), so read the fixed fields from the end.
        let parts: Vec<&str> = name.rsplitn(8, '.').collect();
        assert_eq!(parts.len(), 8, "{name}");
        assert_eq!((parts[0], parts[1]), ("npy", "DefaultFormat"), "{name}");
        assert!(parts[2].parse::<usize>().is_ok(), "{name}");
        assert!(parts[3] == "input" || parts[3] == "output", "{name}");
        assert!(
            parts[4].parse::<u128>().is_ok()
                && parts[5] == "0"
                && parts[6].parse::<usize>().is_ok(),
            "{name}"
        );
    }
    let mut expected = vec![
        "Conv2D",
        "ReLU",
        "MaxPool",
        "MatMul",
        "Conv2DBackpropFilter",
    ];
    if graph_id != 0 {
        expected.push("Parameter"); // a compiled graph dumps its parameters each iteration
    }
    for op in expected {
        assert!(
            in_iter.iter().any(|f| f.contains(&format!("/{op}."))),
            "no {op} dump in {in_iter:?}"
        );
    }
    // The first convolution's input 1 is the weight and its output is conv(x, w0).
    let conv_out = rank.join(find(&in_iter, "Conv2D.", ".output."));
    let dumped = npy::decode(&std::fs::read(&conv_out).unwrap()).unwrap();
    let eager = x.conv2d(lenet_w0, &Conv2dOptions::default()).unwrap();
    super::assert_close(&dumped, &eager, 1e-6, "dumped conv output");
    let sum = numpy_sum(&conv_out);
    let want: f64 = eager.to_f64_vec().unwrap().iter().sum();
    assert!(
        (sum - want).abs() < 1e-3 * (1.0 + want.abs()),
        "numpy sum {sum} vs {want}"
    );
    let every_npy: Vec<&String> = in_iter.iter().filter(|f| f.ends_with(".npy")).collect();
    for f in every_npy.iter().step_by(7) {
        let ours = npy::decode(&std::fs::read(rank.join(f)).unwrap())
            .unwrap_or_else(|e| panic!("{f}: {e}"));
        let sum = numpy_sum(&rank.join(f));
        let values = ours.to_f64_vec().unwrap();
        let want: f64 = values.iter().sum();
        // The two sums add in different orders: allow f64 rounding of the absolute sum.
        let scale: f64 = values.iter().map(|v| v.abs()).sum();
        assert!(
            (sum - want).abs() <= 1e-9 * (1.0 + scale) || (sum.is_nan() && want.is_nan()),
            "{f}: numpy sums {sum}, Spore's reader {want}"
        );
    }
}

#[test]
fn dump_of_one_lenet_iteration_in_graph_and_pynative_mode() {
    let _guard = serial();
    let (x, y) = batch();

    // Graph mode: the training step is one compiled graph.
    let dir = temp_dir("lenet-graph");
    let net = std::sync::Arc::new(LeNet::new());
    let w0 = net.params[0].stored();
    let n2 = net.clone();
    let step = jit("lenet_step", move |a: &[Tensor]| {
        Ok(vec![n2.step(&a[0], &a[1])?])
    });
    enable(&dir);
    let result = step.call(&[x.clone(), y.clone()]);
    dump::disable().unwrap();
    result.unwrap();
    let order_files: Vec<String> = files_under(&dir.join("rank_0/execution_order"));
    assert_eq!(order_files.len(), 1, "{order_files:?}");
    let graph_id: usize = order_files[0]
        .trim_start_matches("ms_execution_order_graph_")
        .trim_end_matches(".csv")
        .parse()
        .unwrap();
    let order =
        std::fs::read_to_string(dir.join("rank_0/execution_order").join(&order_files[0])).unwrap();
    assert!(order.starts_with("NodeExecutionOrder-FullNameWithScope\n"));
    assert!(
        order.lines().any(|l| l.starts_with("Gradients/Default/")),
        "backward ops are named under Gradients/"
    );
    assert!(
        dir.join(format!(
            "rank_0/graphs/ms_output_trace_code_graph_{graph_id}.ir"
        ))
        .is_file()
    );
    check_dump(&dir, graph_id, &w0, &x);

    // PyNative mode: every op call under graph 0.
    let dir = temp_dir("lenet-eager");
    let net = LeNet::new();
    let w0 = net.params[0].stored();
    enable(&dir);
    let result = net.step(&x, &y);
    dump::disable().unwrap();
    result.unwrap();
    check_dump(&dir, 0, &w0, &x);
}

#[test]
fn dump_compare_finds_no_difference_between_modes_and_names_a_planted_one() {
    use spore_core::debug::dump::inspect;
    let _guard = serial();
    let (x, y) = batch();
    let (eager_dir, graph_dir) = (temp_dir("cmp-eager"), temp_dir("cmp-graph"));
    let eager_net = LeNet::new();
    enable(&eager_dir);
    let r = eager_net.step(&x, &y);
    dump::disable().unwrap();
    r.unwrap();
    let net = std::sync::Arc::new(LeNet::new());
    let n2 = net.clone();
    let step = jit("cmp_step", move |a: &[Tensor]| {
        Ok(vec![n2.step(&a[0], &a[1])?])
    });
    enable(&graph_dir);
    let r = step.call(&[x.clone(), y.clone()]);
    dump::disable().unwrap();
    r.unwrap();

    let listing = inspect::list(&graph_dir).unwrap();
    assert!(listing.lines().count() >= 2, "{listing}");
    let stats = inspect::stats(&eager_dir, None, None).unwrap();
    assert!(stats.lines().any(|l| l.contains(",Conv2D,")), "{stats}");

    let report = inspect::compare(&eager_dir, &graph_dir, 1e-4).unwrap();
    assert!(report.compared > 20, "{report}");
    assert!(
        report.first_difference.is_none(),
        "PyNative and Graph agree: {report}"
    );

    // Plant a difference in the graph dump's second MaxPool output: it is reported first.
    let files = inspect::scan(&graph_dir).unwrap();
    let pool = files
        .iter()
        .filter(|f| f.op_type == "MaxPool" && f.io == "output")
        .nth(1)
        .unwrap();
    let t = npy::decode(&std::fs::read(&pool.path).unwrap())
        .unwrap()
        .add_scalar(1.0)
        .unwrap();
    std::fs::write(&pool.path, npy::encode(&t).unwrap()).unwrap();
    let report = inspect::compare(&eager_dir, &graph_dir, 1e-4).unwrap();
    let (a, b, diff) = report
        .first_difference
        .clone()
        .expect("the planted difference");
    assert!(
        a.contains("MaxPool") && b == pool.op_name && (diff - 1.0).abs() < 1e-3,
        "{report}"
    );
    assert!(
        inspect::compare(&eager_dir, &temp_dir("cmp-empty"), 1e-4)
            .unwrap_err()
            .to_string()
            .contains("no dumped .npy files")
    );
}
