//! The profiler's trace is valid trace-event JSON whose op events match the execution
//! order; its CSVs have MindSpore's headers; the iteration trace splits the step.

use spore_compile::jit;
use spore_core::Tensor;
use spore_core::debug::profiler::Profiler;

use super::{LeNet, batch, serial, temp_dir};

#[test]
fn profiler_writes_trace_and_tables() {
    let _guard = serial();
    let dir = temp_dir("profiler");
    let (x, y) = batch();
    let net = std::sync::Arc::new(LeNet::new());
    let n2 = net.clone();
    let step = jit("profiled_step", move |a: &[Tensor]| {
        Ok(vec![n2.step(&a[0], &a[1])?])
    });
    step.call(&[x.clone(), y.clone()]).unwrap(); // compile outside the profile
    let p = Profiler::new(&dir);
    p.start();
    for _ in 0..3 {
        step.call(&[x.clone(), y.clone()]).unwrap();
        p.step_end(std::time::Duration::from_micros(50));
    }
    p.stop();
    let summary = p.analyse().unwrap();
    // The compiled step's convolutions run fused with their ReLUs.
    assert!(summary.iter().any(|s| s.op_type == "Conv2DReLU"));

    let out = dir.join("profiler");
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("trace_view.json")).unwrap())
            .unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let op_events: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["pid"] == 1 && e["ph"] == "X")
        .collect();
    for e in &op_events {
        assert!(
            e["name"].is_string()
                && e["ts"].is_number()
                && e["dur"].as_f64().unwrap() >= 0.0
                && e["tid"].is_number()
        );
    }
    // One run's op events, in order, are the graph's ops in execution order.
    let graph = step
        .graph_for(&[x.tensor_type().clone(), y.tensor_type().clone()])
        .unwrap();
    let order: Vec<&str> = graph
        .nodes
        .iter()
        .filter(|n| n.op().is_some())
        .map(|n| n.name.as_str())
        .collect();
    let first_run: Vec<&str> = op_events
        .iter()
        .take(order.len())
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(first_run, order);
    assert_eq!(op_events.len(), 3 * order.len());

    let detail = std::fs::read_to_string(out.join("cpu_op_detail_info_0.csv")).unwrap();
    assert_eq!(
        detail.lines().next().unwrap(),
        "op_side,op_type,op_name,full_op_name,op_occurrences,op_total_time(ms),op_avg_time(ms),total_proportion,subgraph,pid"
    );
    let types = std::fs::read_to_string(out.join("cpu_op_type_info_0.csv")).unwrap();
    assert_eq!(
        types.lines().next().unwrap(),
        "op_type,type_occurrences,execution_frequency(per-step),total_compute_time,avg_time(ms),percent"
    );
    let steps = std::fs::read_to_string(out.join("step_trace_raw_0_detail_time.csv")).unwrap();
    assert_eq!(steps.lines().count(), 4, "{steps}");
    let row: Vec<f64> = steps
        .lines()
        .nth(2)
        .unwrap()
        .split(',')
        .map(|v| v.parse().unwrap())
        .collect();
    assert!(
        row[5] > 0.0 && row[6] > 0.0 && row[7] > 0.0,
        "forward, backward and update all take time: {row:?}"
    );
}
