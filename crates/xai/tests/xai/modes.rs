//! The same maps in PyNative and Graph mode: gradient methods run their backward pass op
//! by op in either; perturbation methods run the network compiled in Graph mode.

use std::sync::Arc;

use spore_core::context::{ContextUpdate, Mode, set_context};
use spore_core::{DType, Tensor};
use spore_nn::cell::Cell;
use spore_nn::prelude::*;
use spore_xai::{Explainer, GradCam, Gradient, Occlusion, Rise};

#[test]
fn maps_agree_between_pynative_and_graph_mode() {
    spore_core::rng::set_seed(12);
    let net: Arc<dyn Cell> = LeNet5::new(10).unwrap();
    let x = Tensor::randn(&[2, 1, 32, 32], DType::F32, Some(13)).unwrap();
    let methods: Vec<Box<dyn Explainer>> = vec![
        Box::new(Gradient::new(net.clone())),
        Box::new(GradCam::new(net.clone(), "conv2").unwrap()),
        Box::new(Occlusion::new(net.clone()).window(8, 4)),
        Box::new(Rise::new(net.clone()).masks(100)),
    ];
    let run = |mode: Mode| -> Vec<Vec<f32>> {
        set_context(ContextUpdate::new().mode(mode)).unwrap();
        let maps = methods
            .iter()
            .map(|m| m.explain(&x, &[1, 5]).unwrap().to_vec::<f32>().unwrap())
            .collect();
        set_context(ContextUpdate::new().mode(Mode::PyNative)).unwrap();
        maps
    };
    let (eager, graph) = (run(Mode::PyNative), run(Mode::Graph));
    for ((m, a), b) in methods.iter().zip(&eager).zip(&graph) {
        let worst = a
            .iter()
            .zip(b)
            .map(|(p, q)| (p - q).abs())
            .fold(0.0f32, f32::max);
        let scale = a.iter().fold(0.0f32, |s, v| s.max(v.abs())).max(1e-6);
        assert!(
            worst <= 1e-5 * scale.max(1.0),
            "{}: PyNative and Graph maps differ by {worst}",
            m.name()
        );
    }
}
