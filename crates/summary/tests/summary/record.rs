//! SummaryRecord's scalars, histograms, images and graph as TensorBoard reads them.

use spore_core::trace::trace;
use spore_core::{DType, Tensor, TensorType};
use spore_summary::{Plugin, SummaryRecord};

use crate::{temp_dir, tensorboard_read};

#[test]
fn tensorboard_reads_every_kind_of_value() {
    let dir = temp_dir("kinds");
    let mut r = SummaryRecord::new(&dir).unwrap();
    let g = trace("f", &[TensorType::new(&[2], DType::F32)], |x| {
        Ok(vec![x[0].exp()?.neg()?])
    })
    .unwrap();
    r.set_graph(&g).unwrap();
    for step in [1usize, 5, 9] {
        r.add_value(
            Plugin::Scalar,
            "loss",
            &Tensor::scalar(1.0f32 / step as f32),
        )
        .unwrap();
        let w: Vec<f32> = (0..100)
            .map(|i| (i as f32 - 50.0) * step as f32 * 0.01)
            .collect();
        r.add_value(
            Plugin::Histogram,
            "fc.weight",
            &Tensor::from_vec(w, &[10, 10]).unwrap(),
        )
        .unwrap();
        r.record(step).unwrap();
    }
    let images = Tensor::rand(&[2, 3, 8, 6], DType::F32, Some(1)).unwrap();
    r.add_value(Plugin::Image, "inputs", &images).unwrap();
    r.record(9).unwrap();
    r.close().unwrap();
    assert!(r.record(10).is_err(), "a closed record refuses new steps");

    let read = tensorboard_read(&dir);
    let loss = read["scalars"]["loss"].as_array().unwrap();
    let got: Vec<(i64, f64)> = loss
        .iter()
        .map(|e| (e[0].as_i64().unwrap(), e[1].as_f64().unwrap()))
        .collect();
    assert_eq!(got.len(), 3);
    for ((step, v), s) in got.iter().zip([1, 5, 9]) {
        assert_eq!(*step, s);
        assert!((v - 1.0 / s as f64).abs() < 1e-7, "{v}");
    }
    let h = read["histograms"]["fc.weight"].as_array().unwrap();
    assert_eq!(h.len(), 3);
    // step, num, min, max, total count
    assert_eq!(h[2][0], 9);
    assert_eq!(h[2][1].as_f64().unwrap(), 100.0);
    assert!((h[2][2].as_f64().unwrap() + 4.5).abs() < 1e-9);
    assert!((h[2][3].as_f64().unwrap() - 4.41).abs() < 1e-6);
    assert_eq!(h[2][4].as_f64().unwrap(), 100.0);
    for tag in ["inputs/0", "inputs/1"] {
        let im = &read["images"][tag][0];
        assert_eq!(
            (im[0].as_i64(), im[1].as_i64(), im[2].as_i64()),
            (Some(9), Some(6), Some(8)),
            "{tag}: {im}"
        );
    }
    assert_eq!(read["graph_nodes"], 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_values_are_errors_that_name_them() {
    let dir = temp_dir("bad");
    let mut r = SummaryRecord::new(&dir).unwrap();
    let e = r
        .add_value(
            Plugin::Scalar,
            "loss",
            &Tensor::ones(&[2], DType::F32).unwrap(),
        )
        .unwrap_err();
    assert!(
        e.to_string().contains("\"loss\"") && e.to_string().contains("one value"),
        "{e}"
    );
    let e = r
        .add_value(
            Plugin::Image,
            "img",
            &Tensor::ones(&[2, 2], DType::F32).unwrap(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("[C, H, W]"), "{e}");
    let e = r
        .add_value(
            Plugin::Image,
            "img",
            &Tensor::ones(&[1, 2, 4, 4], DType::F32).unwrap(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("1 or 3 channels"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_collector_can_serve_two_training_runs() {
    use spore_summary::SummaryCollector;
    use spore_train::callback::{Callback, RunContext};
    let dir = temp_dir("reuse");
    let mut c = SummaryCollector::new(&dir)
        .collect_freq(1)
        .histograms(false);
    for run in 0..2 {
        let mut ctx = RunContext::new(1, 3, false);
        c.on_train_begin(&mut ctx).unwrap();
        for step in 1..=3 {
            ctx.cur_step_num = step;
            ctx.loss = Some(run as f64 + step as f64);
            c.on_step_end(&mut ctx).unwrap();
        }
        c.on_train_end(&mut ctx).unwrap();
    }
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(files.len(), 2, "one event file per run");
    let read = tensorboard_read(&dir);
    // Both runs' steps 1..3 (TensorBoard merges the files of a folder).
    assert_eq!(
        read["scalars"]["loss"].as_array().unwrap().len(),
        6,
        "{read}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
