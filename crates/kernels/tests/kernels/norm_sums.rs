//! BatchNorm's per-channel gradient sums (`norm::channel_grad_sums`), whose runs are
//! split into chunks in memory order and added per channel at the end, against naive
//! float64 sums: chunks that end inside a sample, runs of 1, 7, 49, 3136 and 30000
//! values, thread counts that do not divide the chunks; and the same bits on every
//! thread count.

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
fn channel_grad_sums_match_naive_f64_with_the_same_bits_on_any_thread_count() {
    let shapes = [
        (3, 5, 7),
        (8, 64, 49),
        (2, 3, 3136),
        (3, 5, 30_000),
        (5, 7, 1),
        (1, 1, 1),
        (4, 0, 9),
        (3, 4, 0),
    ];
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
        let want = naive(&dy, &x, &mean, (n, c, l));
        let mut one_thread: Option<Vec<u32>> = None;
        for threads in [1, 2, 3, 16] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let got = pool.install(|| channel_grad_sums(&dy, &x, &mean, n, c, l));
            assert_eq!(got.len(), want.len(), "[{n}, {c}, {l}]");
            for (k, (&g, &w)) in got.iter().zip(&want).enumerate() {
                // |dy| ≤ 1 and |x - mean| ≤ 7.4: float32 lanes over these runs stay
                // within this bound.
                let bound = 1e-5 * (n * l) as f64 * 8.0 + 1e-6;
                assert!(
                    (g as f64 - w).abs() <= bound,
                    "[{n}, {c}, {l}] on {threads} threads, sum {k}: {g} against {w}"
                );
            }
            let bits: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
            match &one_thread {
                None => one_thread = Some(bits),
                Some(first) => assert_eq!(&bits, first, "[{n}, {c}, {l}]: {threads} threads"),
            }
        }
    }
}

/// Runs whose sums cancel (`+v`, then small ones, then `-v`) make the grouping of the
/// float64 additions visible: a chunking that followed the thread count would lose a
/// different set of the small sums on each count. Chunks set by the shape keep the
/// image order of the naive sum, and its value.
#[test]
fn cancelling_runs_sum_as_the_naive_loop_on_every_thread_count() {
    let (n, c, l) = (64, 1, 16);
    let dy: Vec<f32> = (0..n * l)
        .map(|i| match i / l {
            0 => 1e30,
            16 => -1e30,
            _ => 1.0,
        })
        .collect();
    let x = vec![0.0f32; n * l];
    let want = naive(&dy, &x, &[0.0], (n, c, l));
    assert_eq!(
        want[0], 752.0,
        "the naive sum keeps the 47 runs after the cancellation"
    );
    for threads in [1, 2, 3, 16] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let got = pool.install(|| channel_grad_sums(&dy, &x, &[0.0], n, c, l));
        assert_eq!(got[0] as f64, want[0], "{threads} threads");
    }
}
