//! A LeNet run with `SummaryCollector`: TensorBoard's reader finds the losses the run
//! reported at the collected steps, the learning rate, a histogram per parameter and per
//! gradient, the sample images and the graph.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use spore::datasets::{bundled_mnist, create_dataset};
use spore::prelude::*;
use spore::summary::SummaryCollector;
use spore_core::TensorType;
use spore_train::callback::{Callback, RunContext};

/// Records each step's loss.
struct Losses(Arc<Mutex<Vec<(usize, f64)>>>);

impl Callback for Losses {
    fn on_step_end(&mut self, ctx: &mut RunContext) -> spore::Result<()> {
        if let Some(l) = ctx.loss {
            self.0.lock().unwrap().push((ctx.cur_step_num, l));
        }
        Ok(())
    }
}

#[test]
fn lenet_summaries_read_back_with_tensorboard() {
    set_context(ContextUpdate::new().mode(Mode::Graph).seed(1)).unwrap();
    spore_data::config::set_seed(1);
    let dir = std::env::temp_dir().join(format!("spore_summary_lenet_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let train = create_dataset(bundled_mnist().join("train"), 32, 1, 2, true).unwrap();
    let probe = train.create_tuple_iterator(1).next().unwrap().unwrap();
    let net = LeNet5::new(10).unwrap();
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let with_loss = WithLossCell::new(net.clone(), loss.clone());
    let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
    let mut model = Model::new(net.clone(), loss, opt);
    let images = probe[0]
        .strided_slice(&[0, 0, 0, 0], &[4, 1, 32, 32], &[1, 1, 1, 1])
        .unwrap();
    let mut summary = SummaryCollector::new(&dir)
        .collect_freq(50)
        .graph(
            net.clone(),
            vec![TensorType::new(&[1, 1, 32, 32], DType::F32)],
        )
        .images("input_data", images)
        .gradients_on(with_loss, probe.clone());
    let seen = Arc::new(Mutex::new(vec![]));
    let mut losses = Losses(seen.clone());
    model
        .train(
            1,
            &train,
            &mut [&mut summary, &mut losses],
            TrainConfig::default(),
        )
        .unwrap();
    set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../summary/tests/read_events.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "TensorBoard's reader failed (scripts/test.sh installs tensorboard): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.len(),
        250,
        "one epoch of 8,000 digits in batches of 32"
    );
    let recorded = read["scalars"]["loss"].as_array().unwrap();
    let steps: Vec<i64> = recorded.iter().map(|e| e[0].as_i64().unwrap()).collect();
    assert_eq!(steps, [1, 51, 101, 151, 201]);
    for e in recorded {
        let (step, value) = (e[0].as_u64().unwrap() as usize, e[1].as_f64().unwrap());
        let reported = seen.iter().find(|(s, _)| *s == step).unwrap().1;
        assert!(
            (value - reported).abs() <= 1e-6 * reported.abs().max(1.0),
            "step {step}: {value} vs {reported}"
        );
    }
    let lr = read["scalars"]["learning_rate"].as_array().unwrap();
    assert!((lr[0][1].as_f64().unwrap() - 0.01).abs() < 1e-9, "{lr:?}");
    for name in [
        "conv1.weight",
        "conv2.weight",
        "fc1.weight",
        "fc1.bias",
        "fc3.bias",
    ] {
        let h = read["histograms"][name]
            .as_array()
            .unwrap_or_else(|| panic!("no histogram {name}: {read}"));
        assert_eq!(h.len(), 5, "{name}");
        let g = read["histograms"][format!("gradient/{name}")]
            .as_array()
            .unwrap();
        assert_eq!(g.len(), 5, "gradient/{name}");
    }
    let conv1 = &read["histograms"]["conv1.weight"][0];
    assert_eq!(conv1[1].as_f64().unwrap(), 150.0, "6 x 1 x 5 x 5 values");
    assert_eq!(read["images"]["input_data/3"][0][1], 32);
    assert!(
        read["graph_nodes"].as_u64().unwrap() >= 20,
        "{}",
        read["graph_nodes"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
