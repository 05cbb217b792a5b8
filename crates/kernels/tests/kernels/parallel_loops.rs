//! The loops that split one long row, a leading-axis fold, a scatter's copy and a batch
//! of products among threads give what one thread gives: checked on a 16-thread pool against plain loops,
//! on sizes past the parallel threshold that no thread count divides evenly.

use spore_kernels::layout::Layout;
use spore_kernels::reduce::{ReduceFn, reduce};
use spore_kernels::{BinaryFn, Buffer};

fn on_16_threads<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(16)
        .build()
        .expect("a 16-thread pool")
        .install(f)
}

fn f32s(n: usize, seed: u64) -> Vec<f32> {
    super::values(n, seed)
        .into_iter()
        .map(|v| v as f32)
        .collect()
}

fn as_f32(b: Buffer) -> Vec<f32> {
    match b {
        Buffer::F32(v) => v,
        other => panic!("expected F32, got {:?}", other.dtype()),
    }
}

#[test]
fn one_long_row_split_among_threads_equals_the_plain_loop() {
    let n = 100_003;
    let (a, b) = (f32s(n + 7, 1), f32s(n, 2));
    // `a` read from offset 7: each stretch must start its operands at its own position.
    let mut la = Layout::contiguous(&[n]);
    la.offset = 7;
    let lb = Layout::contiguous(&[n]);
    let got = on_16_threads(|| {
        spore_kernels::elementwise::binary(
            BinaryFn::Sub,
            &Buffer::F32(a.clone()),
            &la,
            &Buffer::F32(b.clone()),
            &lb,
            &[n],
        )
    })
    .expect("Sub of two f32 views");
    let got = as_f32(got);
    assert_eq!(got.len(), n);
    for i in 0..n {
        assert_eq!(got[i], a[i + 7] - b[i], "element {i}");
    }
    // A scalar broadcast along the row (step 0).
    let scalar = Layout::contiguous(&[1]).broadcast_to(&[n]);
    let got = on_16_threads(|| {
        spore_kernels::elementwise::binary(
            BinaryFn::Mul,
            &Buffer::F32(b.clone()),
            &lb,
            &Buffer::F32(vec![3.0]),
            &scalar,
            &[n],
        )
    })
    .expect("Mul by a broadcast scalar");
    for (i, (g, x)) in as_f32(got).iter().zip(&b).enumerate() {
        assert_eq!(*g, x * 3.0, "element {i}");
    }
}

/// A bias gradient's fold over the leading axis: blocks of rows on the threads, the
/// same bits on one thread and on sixteen, and the float64 sum.
#[test]
fn leading_axis_sum_is_the_same_on_1_and_16_threads_and_matches_f64() {
    let (rows, cols) = (2001, 256);
    let x = f32s(rows * cols, 3);
    let sum = || {
        let layout = Layout::contiguous(&[rows, cols]);
        reduce(ReduceFn::Sum, &Buffer::F32(x.clone()), &layout, &[0]).map(as_f32)
    };
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("a 1-thread pool")
        .install(sum)
        .expect("ReduceSum over axis 0 on one thread");
    let sixteen = on_16_threads(sum).expect("ReduceSum over axis 0 on 16 threads");
    for c in 0..cols {
        assert_eq!(one[c].to_bits(), sixteen[c].to_bits(), "column {c}");
        let want: f64 = (0..rows).map(|r| x[r * cols + c] as f64).sum();
        let got = sixteen[c] as f64;
        assert!(
            (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
            "column {c}: {got} against {want}"
        );
    }
}

#[test]
fn scatter_add_into_a_large_base_on_16_threads() {
    let (rows, inner) = (4001, 16);
    let base = f32s(rows * inner, 4);
    let indices = [3i64, 4000, 3, 0];
    let updates = f32s(indices.len() * inner, 5);
    let got = on_16_threads(|| {
        spore_kernels::index::scatter_add(&base, 1, rows, inner, &indices, &updates)
    })
    .expect("ScatterAdd");
    let mut want = base.clone();
    for (p, &i) in indices.iter().enumerate() {
        for k in 0..inner {
            want[i as usize * inner + k] += updates[p * inner + k];
        }
    }
    assert_eq!(got, want);
}

#[test]
fn batched_large_products_one_per_thread_match_naive_f64() {
    // 16 products of 70 x 50 x 90 (315,000 multiply-adds each, past the size at which a
    // single product is split): on 16 threads each runs whole on one thread.
    let (nb, m, k, n) = (16, 70, 90, 50);
    let (a, b) = (f32s(nb * m * k, 6), f32s(nb * k * n, 7));
    let (la, lb) = (
        Layout::contiguous(&[nb, m, k]),
        Layout::contiguous(&[nb, k, n]),
    );
    let got = on_16_threads(|| {
        assert!(spore_kernels::matmul::batch_fills_threads(nb));
        spore_kernels::matmul::matmul(
            &Buffer::F32(a.clone()),
            &la,
            &Buffer::F32(b.clone()),
            &lb,
            &[nb],
        )
    })
    .expect("batched MatMul");
    let got = as_f32(got);
    for p in 0..nb {
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k)
                    .map(|t| a[(p * m + i) * k + t] as f64 * b[(p * k + t) * n + j] as f64)
                    .sum();
                let g = got[(p * m + i) * n + j] as f64;
                assert!(
                    (g - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "product {p} [{i}, {j}]: {g} against {want}"
                );
            }
        }
    }
}
