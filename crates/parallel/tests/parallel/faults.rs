//! A rank that fails ends the job, with a message, in bounded time: never a hang.

use std::time::Duration;

use spore_core::{DType, Tensor};
use spore_parallel::{ReduceOp, ops};

use crate::launch::{mpirun, world};

/// The communication timeout these jobs run with, in seconds.
const TIMEOUT: &str = "3";

/// Far below the 600 s a hung job would take; well above 3 x TIMEOUT plus start-up.
const BOUND: Duration = Duration::from_secs(90);

#[test]
fn a_rank_that_stops_early_ends_the_job_with_a_message() {
    let job = mpirun(
        2,
        "faults::rank_one_stops_early",
        &[("SPORE_COMM_TIMEOUT", TIMEOUT)],
    );
    let text = &job.text;
    assert!(!job.status.success(), "the job should fail:\n{text}");
    assert!(job.elapsed < BOUND, "took {:?}:\n{text}", job.elapsed);
    // The rank left waiting says which collective, where, and why.
    assert!(
        text.contains("AllReduce on group 'world_group' (rank 0 of 2) did not complete within 3 s"),
        "{text}"
    );
    assert!(text.contains("ending the whole job"), "{text}");
}

#[test]
fn a_killed_rank_ends_the_job_with_a_message() {
    let job = mpirun(
        2,
        "faults::rank_one_is_killed",
        &[("SPORE_COMM_TIMEOUT", TIMEOUT)],
    );
    let text = &job.text;
    assert!(!job.status.success(), "the job should fail:\n{text}");
    assert!(job.elapsed < BOUND, "took {:?}:\n{text}", job.elapsed);
    assert!(
        text.contains("signal 9") || text.contains("Killed"),
        "{text}"
    );
}

fn reduce_a_few_times() {
    let x = Tensor::ones(&[1024], DType::F32).unwrap();
    for _ in 0..3 {
        ops::all_reduce(&x, ReduceOp::Sum, None).unwrap();
    }
}

#[test]
#[ignore = "run on every rank by the outer tests, under mpirun"]
fn rank_one_stops_early() {
    let (r, _) = world();
    reduce_a_few_times();
    if r == 1 {
        eprintln!("rank 1: failing on purpose");
        std::process::exit(3);
    }
    let x = Tensor::ones(&[1024], DType::F32).unwrap();
    let e = ops::all_reduce(&x, ReduceOp::Sum, None).unwrap_err();
    eprintln!("rank 0: {e}");
}

#[test]
#[ignore = "run on every rank by the outer tests, under mpirun"]
fn rank_one_is_killed() {
    let (r, _) = world();
    reduce_a_few_times();
    if r == 1 {
        // SAFETY: a plain signal to this very process.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
    let x = Tensor::ones(&[1024], DType::F32).unwrap();
    let e = ops::all_reduce(&x, ReduceOp::Sum, None).unwrap_err();
    eprintln!("rank 0: {e}");
}
