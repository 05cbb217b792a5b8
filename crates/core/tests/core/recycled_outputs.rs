//! Movement ops that build a new output (a slice's gradient, padding, concatenation) take
//! it from the installed buffer pool, as a compiled graph's kernels do, and write every
//! value of it even when the recycled buffer held NaN.

use spore_core::{Tensor, grad};
use spore_kernels::Buffer;
use spore_kernels::arena::{self, BufferPool};

/// A pool holding one float32 buffer of `len` NaNs.
fn poisoned_pool(len: usize) -> BufferPool {
    let mut pool = BufferPool::default();
    pool.give(Buffer::F32(vec![f32::NAN; len]));
    pool
}

fn counting(n: usize) -> Tensor {
    Tensor::from_vec((0..n).map(|v| v as f32).collect(), &[3, n / 3]).unwrap()
}

#[test]
fn padding_fills_a_recycled_buffer() {
    let x = counting(12);
    let pads = [(1, 1), (2, 0)];
    let fresh = x.pad(&pads, -2.0).unwrap().to_vec::<f32>().unwrap();
    let mut pool = poisoned_pool(5 * 6);
    let reused = arena::with_pool(&mut pool, || x.pad(&pads, -2.0)).unwrap();
    assert_eq!(pool.stats().hits, 1, "the padded output came from the pool");
    assert_eq!(reused.to_vec::<f32>().unwrap(), fresh);
    assert_eq!(&fresh[..8], &[-2.0; 8]);
}

#[test]
fn a_slice_gradient_fills_a_recycled_buffer() {
    let x = counting(12);
    let d = grad(|v: &[Tensor]| v[0].narrow(1, 1, 2)?.sum(&[], false), &[0]);
    let mut pool = poisoned_pool(12);
    let dx = arena::with_pool(&mut pool, || d(std::slice::from_ref(&x))).unwrap();
    assert_eq!(pool.stats().hits, 1, "the gradient came from the pool");
    let row = [0.0f32, 1.0, 1.0, 0.0];
    assert_eq!(dx[0].to_vec::<f32>().unwrap(), row.repeat(3));
}

#[test]
fn concatenation_fills_a_recycled_buffer() {
    let a = counting(6);
    let b = counting(6).neg().unwrap();
    let fresh = Tensor::concat(&[&a, &b], 1)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let mut pool = poisoned_pool(12);
    let reused = arena::with_pool(&mut pool, || Tensor::concat(&[&a, &b], 1)).unwrap();
    assert_eq!(pool.stats().hits, 1, "the concatenation came from the pool");
    assert_eq!(reused.to_vec::<f32>().unwrap(), fresh);
    assert!(fresh.iter().all(|v| v.is_finite()));
}

#[test]
fn integer_padding_fills_a_recycled_buffer() {
    let x = Tensor::from_vec(vec![1i32, 2, 3, 4], &[2, 2]).unwrap();
    let mut pool = BufferPool::default();
    pool.give(Buffer::I32(vec![i32::MIN; 4 * 3]));
    let padded = arena::with_pool(&mut pool, || x.pad(&[(1, 1), (0, 1)], 9.0)).unwrap();
    assert_eq!(pool.stats().hits, 1, "the padded output came from the pool");
    let want = [9, 9, 9, 1, 2, 9, 3, 4, 9, 9, 9, 9];
    assert_eq!(padded.to_vec::<i32>().unwrap(), want);
}
