//! BatchNorm's per-channel gradient sums (`norm::channel_grad_sums`), whose runs are
//! split among threads in memory order and added per channel at the end, against naive
//! float64 sums: chunks that end inside a sample, runs of 1, 7, 49 and 3136 values, and
//! thread counts that do not divide the runs.

use spore_kernels::norm::channel_grad_sums;

fn naive(dy: &[f32], x: &[f32], mean: &[f32], (n, c, l): (usize, usize, usize)) -> Vec<f64> {
    let mut out = vec![0.0f64; 2 * c];
    for i in 0..n {
        for ch in 0..c {
            for k in 0..l {
                let at = (i * c + ch) * l + k;
                out[ch] += dy[at] as f64;
                out[c + ch] += dy[at] as f64 * (x[at] as f64 - mean[ch] as f64);
            }
        }
    }
    out
}

#[test]
fn channel_grad_sums_match_naive_f64_on_any_split() {
    let shapes = [
        (3, 5, 7),
        (8, 64, 49),
        (2, 3, 3136),
        (5, 7, 1),
        (1, 1, 1),
        (4, 0, 9),
        (3, 4, 0),
    ];
    for threads in [1, 2, 3, 16] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        for (n, c, l) in shapes {
            let len = n * c * l;
            let dy: Vec<f32> = super::values(len, 7)
                .into_iter()
                .map(|v| v as f32)
                .collect();
            let x: Vec<f32> = super::values(len, 8)
                .into_iter()
                .map(|v| v as f32)
                .collect();
            let mean: Vec<f32> = (0..c).map(|ch| ch as f32 * 0.1 - 0.2).collect();
            let got = pool.install(|| channel_grad_sums(&dy, &x, &mean, n, c, l));
            let want = naive(&dy, &x, &mean, (n, c, l));
            assert_eq!(got.len(), want.len(), "[{n}, {c}, {l}]");
            for (k, (&g, &w)) in got.iter().zip(&want).enumerate() {
                // The sums' terms are at most about 4 in magnitude: float32 lanes over
                // runs of up to 3136 values stay within this bound.
                let bound = 1e-5 * (n * l) as f64 * 4.0 + 1e-6;
                assert!(
                    (g as f64 - w).abs() <= bound,
                    "[{n}, {c}, {l}] on {threads} threads, sum {k}: {g} against {w}"
                );
            }
        }
    }
}
