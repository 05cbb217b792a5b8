//! Concurrent use: two networks trained on two threads at once give bit-identical results
//! to training each alone, in Graph and in PyNative mode, and context changes made by a
//! third thread while they train do not disturb a step in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use spore_core::context::{ContextUpdate, Mode, set_context};
use spore_core::{Parameter, Tensor, rng};
use spore_nn::prelude::*;

use super::{batch, serial, set_mode, values};

/// A network with its optimizer, built from `seed` (the global generator, so built one at a
/// time, before any thread starts).
fn trainer(lenet: bool, seed: u64) -> Arc<TrainOneStepCell> {
    rng::set_seed(seed);
    let net: Arc<dyn Cell> = if lenet {
        LeNet5::new(10).unwrap()
    } else {
        Mlp::new().unwrap()
    };
    let loss = SoftmaxCrossEntropyWithLogits::new(true, Reduction::Mean);
    let opt = Momentum::new(net.trainable_params(), 0.01, 0.9).unwrap();
    TrainOneStepCell::new(WithLossCell::new_dyn(net, loss), opt)
}

fn train(t: &Arc<TrainOneStepCell>, lenet: bool, steps: u64) -> Vec<Vec<u32>> {
    let shape: &[usize] = if lenet {
        &[16, 1, 32, 32]
    } else {
        &[16, 1, 28, 28]
    };
    for s in 0..steps {
        let (x, y) = batch(shape, 10, 500 + s);
        t.step(&x, &y).unwrap();
    }
    bits(t)
}

/// Every parameter (weights and optimizer state) as raw bits.
fn bits(t: &Arc<TrainOneStepCell>) -> Vec<Vec<u32>> {
    let params: Vec<Parameter> = t
        .parameters_and_names()
        .into_iter()
        .map(|(_, p)| p)
        .collect();
    values(&params)
        .iter()
        .map(|v: &Tensor| {
            v.to_f64_vec()
                .unwrap()
                .iter()
                .map(|x| (*x as f32).to_bits())
                .collect()
        })
        .collect()
}

const STEPS: u64 = 6;

fn alone_then_together(mode: Mode) {
    set_mode(mode);
    let alone_lenet = train(&trainer(true, 11), true, STEPS);
    let alone_mlp = train(&trainer(false, 12), false, STEPS);
    let (a, b) = (trainer(true, 11), trainer(false, 12));
    let (together_lenet, together_mlp) = std::thread::scope(|s| {
        let ha = s.spawn(|| train(&a, true, STEPS));
        let hb = s.spawn(|| train(&b, false, STEPS));
        (ha.join().unwrap(), hb.join().unwrap())
    });
    assert!(
        together_lenet == alone_lenet,
        "{mode:?}: LeNet trained beside the MLP differs from LeNet alone"
    );
    assert!(
        together_mlp == alone_mlp,
        "{mode:?}: the MLP trained beside LeNet differs from the MLP alone"
    );
    // Two copies of the same network on two threads.
    let (c, d) = (trainer(true, 11), trainer(true, 11));
    let (tc, td) = std::thread::scope(|s| {
        let hc = s.spawn(|| train(&c, true, STEPS));
        let hd = s.spawn(|| train(&d, true, STEPS));
        (hc.join().unwrap(), hd.join().unwrap())
    });
    assert!(
        tc == alone_lenet && td == alone_lenet,
        "{mode:?}: two LeNets at once differ"
    );
    set_mode(Mode::PyNative);
}

#[test]
fn two_networks_on_two_threads_train_as_each_alone_in_graph_mode() {
    let _s = serial();
    alone_then_together(Mode::Graph);
}

#[test]
fn two_networks_on_two_threads_train_as_each_alone_in_pynative_mode() {
    let _s = serial();
    alone_then_together(Mode::PyNative);
}

/// While LeNet trains in Graph mode, another thread keeps changing the context: graph
/// saving on and off (into a folder), the print file, the memory cap, the seed, the
/// thread count (to the same value). The training thread's results stay bit-identical.
#[test]
fn context_changes_on_another_thread_do_not_disturb_a_running_step() {
    let _s = serial();
    set_mode(Mode::Graph);
    let alone = train(&trainer(true, 21), true, STEPS);
    let t = trainer(true, 21);
    let dir = std::env::temp_dir().join(format!("spore-concurrency-{}", std::process::id()));
    let done = AtomicBool::new(false);
    // The training starts once the changer is running, so that changes overlap it
    // however the host schedules the two threads.
    let started = AtomicBool::new(false);
    let threads = spore_core::context::get_context().num_threads;
    let (trained, changes) = std::thread::scope(|s| {
        let trainer_thread = s.spawn(|| {
            while !started.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            let r = train(&t, true, STEPS);
            done.store(true, Ordering::Release);
            r
        });
        let changer = s.spawn(|| {
            let (mut n, mut during) = (0u64, 0u64);
            while !done.load(Ordering::Acquire) || n <= 3 {
                if n == 3 {
                    started.store(true, Ordering::Release);
                }
                if n > 3 && !done.load(Ordering::Acquire) {
                    during += 1;
                }
                let on = n.is_multiple_of(2);
                let mut update = ContextUpdate::new()
                    .save_graphs(if on { 1 } else { 0 })
                    .save_graphs_path(dir.join(format!("ir{}", n % 3)))
                    .print_file_path(on.then(|| dir.join("print.pb")))
                    .max_device_memory(if on { "64GB" } else { "128GB" })
                    .seed(n);
                if let Some(k) = threads {
                    update = update.num_threads(k);
                }
                set_context(update).unwrap();
                n += 1;
                std::thread::yield_now();
            }
            during
        });
        (trainer_thread.join().unwrap(), changer.join().unwrap())
    });
    set_context(
        ContextUpdate::new()
            .save_graphs(0)
            .print_file_path(None)
            .max_device_memory("1048576GB")
            .mode(Mode::PyNative),
    )
    .unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        changes > 0,
        "no context change happened while the step trained"
    );
    assert!(
        trained == alone,
        "a context change on another thread changed the training results"
    );
}
