//! Shared timing harness + synthetic data (identical for every library).
#![allow(dead_code)]
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use std::time::Instant;

pub const SEED: u64 = 42;

/// Random normal f32 values, fixed seed.
pub fn randn(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| StandardNormal.sample(&mut rng)).collect()
}

/// Random integer labels in [0, classes), fixed seed.
pub fn labels(n: usize, classes: u32, seed: u64) -> Vec<u32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(0..classes)).collect()
}

/// (busy jiffies of the whole machine, total jiffies, this process's utime+stime jiffies)
fn cpu_sample() -> (u64, u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let g = |i: usize| f.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal
    let busy = g(0) + g(1) + g(2) + g(5) + g(6) + g(7);
    let total = busy + g(3) + g(4);
    let me = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = me.rsplit(')').next().unwrap_or("");
    let v: Vec<&str> = after.split_whitespace().collect();
    // after ')' : state(0) ppid(1) ... utime is field 14 overall -> index 11 here, stime 12
    let own = v.get(11).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0)
        + v.get(12).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    (busy, total, own)
}

/// Peak resident set size of this process so far (VmHWM in /proc/self/status), in MiB; 0 if unknown.
fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

pub struct Cfg {
    /// total timed seconds (over all repeats) to aim for
    pub min_total_s: f64,
    pub repeats: usize,
    /// warm-up: run steps until this many seconds have passed (at least 1 step)
    pub warmup_s: f64,
}

impl Cfg {
    pub fn default_for(bench: &str) -> Self {
        let quick = std::env::var("BENCH_QUICK").is_ok();
        let mut c = Cfg { min_total_s: 5.0, repeats: 5, warmup_s: 1.0 };
        if bench.starts_with("resnet18") {
            c = Cfg { min_total_s: 5.0, repeats: 3, warmup_s: 0.0 };
        }
        if quick {
            c = Cfg { min_total_s: 0.3, repeats: 2, warmup_s: 0.0 };
        }
        c
    }
}

/// Run `step` (which must fully complete its work before returning, e.g. by
/// reading back a scalar) and print one JSON line with the result.
/// `step` returns a scalar (loss, or a checksum) used as a sanity value.
pub fn bench<F: FnMut() -> f32>(lib: &str, bench: &str, flops_per_step: f64, mut step: F) {
    let cfg = Cfg::default_for(bench);
    // first step, timed separately (includes lazy init / allocation / autotune)
    let t = Instant::now();
    let first_val = step();
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    eprintln!("[{lib}] {bench}: first step {first_ms:.1} ms (val {first_val:.4})");

    // warm-up
    let t = Instant::now();
    let mut warm_steps = 0usize;
    let mut est_s = first_ms / 1e3;
    while t.elapsed().as_secs_f64() < cfg.warmup_s || (warm_steps == 0 && cfg.warmup_s > 0.0) {
        let ts = Instant::now();
        step();
        est_s = ts.elapsed().as_secs_f64();
        warm_steps += 1;
    }
    if warm_steps > 0 {
        est_s = t.elapsed().as_secs_f64() / warm_steps as f64;
    }
    let per_repeat_s = cfg.min_total_s / cfg.repeats as f64;
    let steps_per_repeat = ((per_repeat_s / est_s).ceil() as usize).max(1);

    let mut rep_ms = Vec::new();
    let mut last_val = first_val;
    let c0 = cpu_sample();
    let total = Instant::now();
    for _ in 0..cfg.repeats {
        let t = Instant::now();
        for _ in 0..steps_per_repeat {
            last_val = step();
        }
        rep_ms.push(t.elapsed().as_secs_f64() * 1e3 / steps_per_repeat as f64);
    }
    let total_s = total.elapsed().as_secs_f64();
    let c1 = cpu_sample();
    // share of the machine's CPU time used by OTHER processes while we were timing
    let dt = (c1.1 - c0.1).max(1) as f64;
    let foreign = ((c1.0 - c0.0) as f64 - (c1.2 - c0.2) as f64).max(0.0) / dt * 100.0;
    let mut sorted = rep_ms.clone();
    sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let median = sorted[sorted.len() / 2];
    let gflops = if flops_per_step > 0.0 { flops_per_step / (median / 1e3) / 1e9 } else { 0.0 };
    let threads = std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "unset".into());
    let peak_mb = peak_rss_mb();
    println!(
        "{{\"lib\":\"{lib}\",\"bench\":\"{bench}\",\"first_ms\":{first_ms:.3},\"median_ms\":{median:.3},\"steps_per_s\":{:.3},\"gflops\":{gflops:.2},\"repeats_ms\":{:?},\"steps_per_repeat\":{steps_per_repeat},\"warmup_steps\":{warm_steps},\"timed_total_s\":{total_s:.2},\"first_val\":{first_val:.5},\"last_val\":{last_val:.5},\"rayon_threads\":\"{threads}\",\"foreign_cpu_pct\":{foreign:.1},\"peak_rss_mb\":{peak_mb:.1}}}",
        1e3 / median,
        rep_ms.iter().map(|x| (x * 1000.0).round() / 1000.0).collect::<Vec<_>>()
    );
    eprintln!(
        "[{lib}] {bench}: median {median:.2} ms/step ({:.2} steps/s) over {} x {} steps; val {first_val:.4} -> {last_val:.4}; foreign cpu {foreign:.1}%",
        1e3 / median,
        cfg.repeats,
        steps_per_repeat
    );
}

pub fn selected(name: &str) -> bool {
    // BENCHES=lenet,mlp_train,... (default: all)
    match std::env::var("BENCHES") {
        Ok(s) if !s.is_empty() => s.split(',').any(|b| b == name),
        _ => true,
    }
}
