//! A compiled training step allocates nothing in steady state: no buffers, no tensor
//! headers, no shape vectors, no scratch. A counting global allocator sees every heap
//! allocation of the process, which is why this is a binary of its own without libtest
//! (`harness = false`): libtest runs tests on parallel threads, which would be counted
//! too, and never on the main thread, which is the thread a training loop runs on.
//!
//! On CPUs without Spore's own f32 GEMM (no AVX2/FMA, or `SPORE_GEMM=crate`) products go
//! through the `gemm` crate, which allocates packing buffers in every call: there the
//! allocations made while such a product runs are counted apart, and the rest are held to
//! what rayon's work queues reallocate after the crate's parallel jobs (see below). The
//! binary checks both paths on machines that have both: it runs itself again with
//! `SPORE_GEMM=crate`.

#[path = "../common/train_steps.rs"]
mod train_steps;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use spore_compile::executor::Executable;
use spore_compile::pass::{default_passes, run_passes};
use spore_core::{Tensor, trace};

use train_steps::{
    Forward, LENET_INPUT, LENET_SHAPES, MLP_INPUT, MLP_SHAPES, batch, lenet, mlp, params,
    train_step, velocities,
};

/// The system allocator, counting allocation calls and bytes.
struct Counting;

static CALLS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
/// Allocation calls made while a product ran in the `gemm` crate (not in CALLS).
static CRATE_GEMM_CALLS: AtomicU64 = AtomicU64::new(0);

fn count(size: usize) {
    if spore_kernels::matmul::crate_gemm_running() {
        CRATE_GEMM_CALLS.fetch_add(1, Relaxed);
    } else {
        CALLS.fetch_add(1, Relaxed);
        BYTES.fetch_add(size as u64, Relaxed);
    }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Compiles `forward`'s whole training step, runs it until warm, then returns the
/// (allocation calls, bytes) of `steps` more runs outside the `gemm` crate, the calls
/// inside it, and the losses the runs produced.
fn steady_allocations(
    forward: Forward,
    shapes: &[&[usize]],
    x_shape: &[usize],
    steps: usize,
) -> ((u64, u64), u64, Vec<f64>) {
    let ps = params(shapes, 7);
    let vs = velocities(&ps);
    let (x, y) = batch(x_shape, 0);
    let types = [x.tensor_type().clone(), y.tensor_type().clone()];
    let mut graph = trace::trace("train_step", &types, move |a| {
        Ok(vec![train_step(forward, &ps, &vs, &a[0], &a[1])?])
    })
    .unwrap();
    run_passes(&mut graph, &default_passes(), None).unwrap();
    let mut exe = Executable::new(graph).unwrap();
    let inputs = [x, y];
    let mut outputs: Vec<Tensor> = Vec::with_capacity(1);
    let mut losses = Vec::with_capacity(steps);
    // Called from the main thread, which has joined the kernel pool (see `main`): no
    // hand-off to the pool's injection queue, which would allocate a block of slots every
    // 63 runs; more steps than that are counted.
    for _ in 0..3 {
        exe.run_into(&inputs, &mut outputs).unwrap();
    }
    let (calls, bytes) = (CALLS.load(Relaxed), BYTES.load(Relaxed));
    let crate_calls = CRATE_GEMM_CALLS.load(Relaxed);
    for _ in 0..steps {
        exe.run_into(&inputs, &mut outputs).unwrap();
        // Read without allocating: the loss's storage is a one-element f32 buffer.
        let loss = outputs[0]
            .storage()
            .unwrap()
            .buffer
            .as_slice::<f32>()
            .unwrap()[0];
        losses.push(loss as f64);
    }
    let counted = (CALLS.load(Relaxed) - calls, BYTES.load(Relaxed) - bytes);
    (
        counted,
        CRATE_GEMM_CALLS.load(Relaxed) - crate_calls,
        losses,
    )
}

/// The MLP with dropout on its hidden layer: a random draw and a fresh key every step.
fn mlp_dropout(p: &[Tensor], x: &Tensor) -> spore_core::Result<Tensor> {
    let h = x
        .matmul(&p[0].transpose()?)?
        .add(&p[1])?
        .relu()?
        .dropout(0.5, true)?;
    h.matmul(&p[2].transpose()?)?.add(&p[3])
}

/// Steps counted per network: more than the 63 runs after which a hand-off through
/// rayon's injection queue would allocate.
const STEPS: usize = 70;

fn main() {
    // What a program's `set_context` does on its first call.
    let joined = spore_core::threads::join_kernel_pool(Some(2)).unwrap();
    assert!(joined, "the main thread did not join the kernel pool");
    assert_eq!(rayon::current_thread_index(), Some(0));
    set_context_checks_the_pool_size();
    compiled_training_steps_allocate_nothing_in_steady_state();
    let path = if spore_kernels::matmul::own_f32_gemm() {
        "Spore's f32 GEMM"
    } else {
        "the gemm crate"
    };
    println!("test compiled_training_steps_allocate_nothing_in_steady_state ({path}) ... ok");
    if spore_kernels::matmul::own_f32_gemm() {
        check_the_gemm_crate_path_in_a_child();
    }
}

/// Runs this binary again with `SPORE_GEMM=crate`, so that the path other CPUs take is
/// checked here too.
fn check_the_gemm_crate_path_in_a_child() {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .env("SPORE_GEMM", "crate")
        .output()
        .unwrap();
    print!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "with SPORE_GEMM=crate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Once the pool exists, `set_context` accepts its size and refuses any other.
fn set_context_checks_the_pool_size() {
    use spore_core::context::{ContextUpdate, set_context};
    set_context(ContextUpdate::new().num_threads(2)).unwrap();
    let err = set_context(ContextUpdate::new().num_threads(3)).unwrap_err();
    assert!(
        err.to_string().contains(
            "num_threads can only be set before the first parallel kernel runs (it is 2, asked 3)"
        ),
        "{err}"
    );
    let err = set_context(ContextUpdate::new().num_threads(0)).unwrap_err();
    assert!(err.to_string().contains("at least 1, got 0"), "{err}");
    assert_eq!(rayon::current_thread_index(), Some(0));
}

fn compiled_training_steps_allocate_nothing_in_steady_state() {
    for (name, forward, shapes, x_shape) in [
        ("MLP", mlp as Forward, MLP_SHAPES, MLP_INPUT),
        ("LeNet-sized", lenet as Forward, LENET_SHAPES, LENET_INPUT),
        (
            "MLP with dropout",
            mlp_dropout as Forward,
            MLP_SHAPES,
            MLP_INPUT,
        ),
    ] {
        let ((calls, bytes), crate_calls, losses) =
            steady_allocations(forward, shapes, x_shape, STEPS);
        if spore_kernels::matmul::own_f32_gemm() {
            assert_eq!(
                (calls, bytes),
                (0, 0),
                "{name}: {STEPS} steady-state steps made {calls} allocations ({bytes} bytes)"
            );
            assert_eq!(
                crate_calls, 0,
                "{name}: the gemm crate ran on Spore's GEMM path"
            );
        } else {
            // The `gemm` crate allocates its packing buffers in every call, and its parallel
            // jobs grow and shrink rayon's work queues, which reallocate now and then after
            // the product has returned (seen: 0 to 3 blocks of 0.6-2.3 KB in 70 steps, on
            // worker threads). Everything else must still allocate nothing: at most one
            // allocation per 7 steps is those queues'; a buffer, header or shape vector
            // allocated per step would be 70 or more.
            println!(
                "{name}: {crate_calls} allocations inside the gemm crate's products and {calls} \
                 ({bytes} bytes) outside them in {STEPS} steps"
            );
            assert!(
                calls <= STEPS as u64 / 7,
                "{name}: {STEPS} steady-state steps made {calls} allocations ({bytes} bytes) \
                 outside the gemm crate's products"
            );
        }
        // The steps really trained on recycled memory only: the same batch every step, so
        // without dropout the loss must fall; with it, fresh masks make every loss differ.
        assert!(
            losses.iter().all(|l| l.is_finite()),
            "{name}: losses {losses:?}"
        );
        if name.contains("dropout") {
            assert!(
                losses.windows(2).all(|w| w[0] != w[1]),
                "{name}: the same mask twice? {losses:?}"
            );
        } else {
            assert!(losses[STEPS - 1] < losses[0], "{name}: losses {losses:?}");
        }
    }
}
