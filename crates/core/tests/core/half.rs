//! float16 and bfloat16 tensors: creation and casts, printing, `.npy` files that NumPy
//! and ml_dtypes read back, and gradients that reach float32 master weights through Cast.

use spore_core::debug::npy;
use spore_core::{DType, Tensor, bf16, f16, grad};

#[test]
fn half_tensors_are_created_cast_and_printed() {
    let x = Tensor::from_vec(vec![1.0f32, 65504.0, 70000.0, 1e-8, -0.0, f32::NAN], &[6]).unwrap();
    let h = x.cast(DType::F16).unwrap();
    assert_eq!(h.dtype(), DType::F16);
    let back = h.cast(DType::F32).unwrap().to_vec::<f32>().unwrap();
    // 65504 is float16's largest value; 70000 overflows; 1e-8 is below half its
    // smallest subnormal (2^-24 ≈ 6e-8) and rounds to zero.
    assert_eq!(&back[..5], &[1.0, 65504.0, f32::INFINITY, 0.0, -0.0]);
    assert!(back[5].is_nan());
    let b = x.cast(DType::BF16).unwrap();
    assert_eq!(b.to_vec::<bf16>().unwrap()[2], bf16::from_f32(70000.0));
    assert_eq!(
        b.cast(DType::F32).unwrap().to_vec::<f32>().unwrap()[2],
        70144.0
    );
    let shown = Tensor::from_vec(vec![f16::from_f32(1.5), f16::from_f32(0.1)], &[2]).unwrap();
    // As NumPy prints float16: the shortest digits that give the same value.
    assert_eq!(
        shown.to_string(),
        "Tensor(shape=[2], dtype=Float16, value=[ 1.5  0.1])"
    );
    assert_eq!(DType::BF16.to_string(), "BFloat16");
}

#[test]
fn npy_files_of_half_tensors_read_back_in_numpy_and_ml_dtypes() {
    let dir = std::env::temp_dir().join(format!("spore_half_npy_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let values = [1.5f32, -2.25, 65504.0, 3.0e-5];
    let x = Tensor::from_vec(values.to_vec(), &[2, 2]).unwrap();
    for (dtype, name) in [(DType::F16, "float16"), (DType::BF16, "bfloat16")] {
        let t = x.cast(dtype).unwrap();
        let path = dir.join(format!("{name}.npy"));
        std::fs::write(&path, npy::encode(&t).unwrap()).unwrap();
        // Spore reads its own file back bit for bit.
        let again = npy::decode(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(again.dtype(), dtype);
        assert_eq!(again.to_f64_vec().unwrap(), t.to_f64_vec().unwrap());
        // NumPy reads float16 natively; bfloat16 as two raw bytes viewed by ml_dtypes.
        let script = "import sys, numpy, ml_dtypes\n\
                      a = numpy.load(sys.argv[1])\n\
                      if sys.argv[2] == 'bfloat16': a = a.view(ml_dtypes.bfloat16)\n\
                      print(a.dtype, a.shape, ' '.join(repr(float(v)) for v in a.ravel()))";
        let out = std::process::Command::new("python3")
            .args(["-c", script])
            .arg(&path)
            .arg(name)
            .output()
            .unwrap_or_else(|e| panic!("this check needs python3 with numpy and ml_dtypes (scripts/test.sh installs them): {e}"));
        assert!(
            out.status.success(),
            "numpy/ml_dtypes could not read {} (scripts/test.sh installs them): {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut words = stdout.split_whitespace();
        assert_eq!(words.next(), Some(name), "{stdout}");
        let read: Vec<f64> = stdout
            .split(')')
            .nth(1)
            .unwrap()
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect();
        assert_eq!(read, t.to_f64_vec().unwrap(), "{name}: {stdout}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A float32 weight cast to 16 bits for the product gets a float32 gradient: the
/// 16-bit gradient widened by Cast's rule (what mixed precision's master weights need).
#[test]
fn gradients_reach_float32_weights_through_casts() {
    let w = Tensor::from_vec(vec![0.5f32, -1.0, 2.0, 0.25], &[2, 2]).unwrap();
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    for dtype in [DType::F16, DType::BF16] {
        let xs = x.cast(dtype).unwrap();
        let loss = move |a: &[Tensor]| {
            xs.matmul(&a[0].cast(dtype)?)?
                .cast(DType::F32)?
                .sum(&[], false)
        };
        let g = grad(loss, &[0])(std::slice::from_ref(&w)).unwrap();
        assert_eq!(g[0].dtype(), DType::F32);
        // d/dW sum(X W) = Xᵀ 1: column sums of X, every one exact in both formats.
        assert_eq!(g[0].to_vec::<f32>().unwrap(), vec![4.0, 4.0, 6.0, 6.0]);
    }
}

/// A mean of 16-bit values is computed in float32: the sum of 70,000 threes (210,000)
/// overflows float16 and rounds to 209,920 in bfloat16, and the count rounds to 70,144
/// in bfloat16; the mean, 3, fits both. Under a 16-bit compute dtype a float32 tensor's
/// mean is computed the same way.
#[test]
fn means_of_many_16_bit_values_do_not_overflow() {
    let threes = Tensor::full(&[70_000], 3.0, DType::F32).unwrap();
    for dtype in [DType::F16, DType::BF16] {
        let x = threes.cast(dtype).unwrap();
        let m = x.mean(&[], false).unwrap();
        assert_eq!(m.dtype(), dtype);
        assert_eq!(m.cast(DType::F32).unwrap().item().unwrap(), 3.0, "{dtype}");
        let v = x.var(&[], false, 1).unwrap();
        assert_eq!(v.cast(DType::F32).unwrap().item().unwrap(), 0.0, "{dtype}");
        let m = spore_core::autocast::with_compute_dtype(Some(dtype), || threes.mean(&[], false));
        assert_eq!(
            m.unwrap().item().unwrap(),
            3.0,
            "float32 mean under {dtype}"
        );
    }
}

/// Under a float32 compute dtype (a cell that mixed precision keeps in float32, such as
/// O2's BatchNorm) a 16-bit tensor's mean and variance are float32, as the cell's other
/// ops cast the tensor to float32: not rounded to 16 bits (1/3 is not a bfloat16 value).
#[test]
fn means_of_16_bit_values_under_a_float32_compute_dtype_stay_float32() {
    let x = Tensor::from_vec(vec![0.0f32, 0.0, 1.0], &[3]).unwrap();
    for dtype in [DType::F16, DType::BF16] {
        let x = x.cast(dtype).unwrap();
        let f32_stats = spore_core::autocast::with_compute_dtype(Some(DType::F32), || {
            Ok::<_, spore_core::Error>((x.mean(&[], false)?, x.var(&[], false, 0)?))
        });
        let (m, v) = f32_stats.unwrap();
        assert_eq!((m.dtype(), v.dtype()), (DType::F32, DType::F32), "{dtype}");
        assert_eq!(m.item().unwrap(), f64::from(1.0f32 / 3.0), "{dtype}");
        let v = v.item().unwrap();
        assert!((v - 2.0 / 9.0).abs() < 1e-6, "{dtype}: variance {v}");
        assert_eq!(
            x.mean(&[], false).unwrap().dtype(),
            dtype,
            "no compute dtype"
        );
    }
}

/// Products of transposed and sliced 16-bit views (widened as whole buffers, or the
/// bfloat16 GEMM reading their strides) equal products of contiguous copies, and the
/// float64 product of the same values rounded once.
#[test]
fn products_of_16_bit_views_equal_products_of_copies() {
    for float in [DType::F16, DType::BF16] {
        let a = Tensor::randn(&[5, 7], DType::F32, Some(1))
            .unwrap()
            .cast(float)
            .unwrap();
        let w = Tensor::randn(&[6, 7], DType::F32, Some(2))
            .unwrap()
            .cast(float)
            .unwrap();
        let wt = w.transpose().unwrap(); // a strided view of w's buffer
        let copy = match float {
            DType::F16 => Tensor::from_vec(wt.to_vec::<f16>().unwrap(), &[7, 6]),
            _ => Tensor::from_vec(wt.to_vec::<bf16>().unwrap(), &[7, 6]),
        }
        .unwrap();
        let viewed = a.matmul(&wt).unwrap();
        let copied = a.matmul(&copy).unwrap();
        assert_eq!(viewed.dtype(), float);
        let bits = |t: &Tensor| t.to_f64_vec().unwrap();
        assert_eq!(bits(&viewed), bits(&copied), "{float}");
        let (av, wv) = (bits(&a), bits(&w));
        for i in 0..5 {
            for j in 0..6 {
                let exact: f64 = (0..7).map(|p| av[i * 7 + p] * wv[j * 7 + p]).sum();
                let want = Tensor::scalar(exact)
                    .cast(float)
                    .unwrap()
                    .to_f64_vec()
                    .unwrap()[0];
                let got = bits(&viewed)[i * 6 + j];
                // Summed in float32, then rounded once: within one 16-bit step of it.
                let step = if float == DType::F16 {
                    2f64.powi(-10)
                } else {
                    2f64.powi(-7)
                };
                assert!(
                    (got - want).abs() <= step * want.abs().max(1e-3),
                    "{float} ({i}, {j}): {got} vs {want}"
                );
            }
        }
    }
}

/// bfloat16 convolutions (AVX512_BF16 dot products where this CPU has them, widened to
/// float32 where not or where the float32 path is Winograd) and their gradients equal
/// the float32 ones on the same values within one bfloat16 rounding: a strided layer
/// (the native path) and a ResNet-like 3x3 layer (Winograd, widened).
#[test]
fn bf16_convolutions_and_their_gradients_match_float32_on_the_same_values() {
    use spore_core::prims::conv::{Conv2dOptions, PadMode};
    let cases = [
        ([2, 4, 9, 9], [6, 4, 3, 3], 2),
        ([4, 16, 8, 8], [16, 16, 3, 3], 1),
    ];
    for (k, (xs, ws, stride)) in cases.into_iter().enumerate() {
        let opts = Conv2dOptions::default()
            .stride(stride)
            .pad_mode(PadMode::Same);
        let half = |shape: &[usize], seed| {
            let t = Tensor::randn(shape, DType::F32, Some(seed)).unwrap();
            t.cast(DType::BF16).unwrap()
        };
        let (x, w) = (half(&xs, 10 + k as u64), half(&ws, 20 + k as u64));
        let wide = |t: &Tensor| t.cast(DType::F32).unwrap();
        let y32 = wide(&x).conv2d(&wide(&w), &opts).unwrap();
        let r = half(y32.shape(), 30 + k as u64);
        let (r16, r32) = (r.clone(), wide(&r));
        let loss16 = move |a: &[Tensor]| {
            a[0].conv2d(&a[1], &opts)?
                .mul(&r16)?
                .cast(DType::F32)?
                .sum(&[], false)
        };
        let loss32 = move |a: &[Tensor]| a[0].conv2d(&a[1], &opts)?.mul(&r32)?.sum(&[], false);
        let g16 = grad(loss16, &[0, 1])(&[x.clone(), w.clone()]).unwrap();
        let g32 = grad(loss32, &[0, 1])(&[wide(&x), wide(&w)]).unwrap();
        let y16 = x.conv2d(&w, &opts).unwrap();
        let pairs = [
            ("y", &y16, &y32),
            ("dx", &g16[0], &g32[0]),
            ("dw", &g16[1], &g32[1]),
        ];
        for (what, got, want) in pairs {
            assert_eq!(got.dtype(), DType::BF16, "case {k} {what}");
            let (got, want) = (
                wide(got).to_vec::<f32>().unwrap(),
                want.to_vec::<f32>().unwrap(),
            );
            assert_eq!(got.len(), want.len());
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= b.abs() / 256.0 + 1e-4,
                    "case {k} {what}[{i}]: {a} against {b}"
                );
            }
        }
    }
}

/// 16-bit max pooling and its gradient (each plane widened in the kernel) give what
/// float32 gives on the same values, rounded once: LeNet's 2x2 pool and ResNet's padded,
/// overlapping 3x3 one, whose gradients sum where windows share cells.
#[test]
fn max_pooling_of_16_bit_values_equals_float32_rounded_once() {
    use spore_core::prims::{conv::PadMode, pool::Pool2dOptions};
    let lenet = Pool2dOptions::new(2, 2);
    let resnet = Pool2dOptions {
        pad_mode: PadMode::Pad([1, 1, 1, 1]),
        ..Pool2dOptions::new(3, 2)
    };
    let x = Tensor::randn(&[2, 3, 12, 20], DType::F32, Some(7)).unwrap();
    for dtype in [DType::F16, DType::BF16] {
        for opts in [lenet, resnet] {
            let x16 = x.cast(dtype).unwrap();
            let x32 = x16.cast(DType::F32).unwrap();
            let pooled = |t: &Tensor| t.max_pool2d(&opts).unwrap();
            let y16 = pooled(&x16);
            assert_eq!(y16.dtype(), dtype);
            let want = pooled(&x32).cast(dtype).unwrap();
            assert_eq!(bits(&y16), bits(&want), "{dtype:?} {opts:?}");
            // The gradient of sum(y * w): w routed to each window's maximum.
            let w = Tensor::randn(y16.shape(), DType::F32, Some(8))
                .unwrap()
                .cast(dtype)
                .unwrap();
            let weighted = |w: Tensor| {
                move |a: &[Tensor]| {
                    a[0].max_pool2d(&opts)?
                        .mul(&w)?
                        .cast(DType::F32)?
                        .sum(&[], false)
                }
            };
            let g16 = grad(weighted(w.clone()), &[0])(std::slice::from_ref(&x16)).unwrap();
            let w32 = w.cast(DType::F32).unwrap();
            let g32 = grad(weighted(w32), &[0])(std::slice::from_ref(&x32)).unwrap();
            assert_eq!(g16[0].dtype(), dtype);
            let want = g32[0].cast(dtype).unwrap();
            assert_eq!(bits(&g16[0]), bits(&want), "{dtype:?} {opts:?} gradient");
        }
    }
}

/// A 16-bit tensor's values as float32 bit patterns.
fn bits(t: &Tensor) -> Vec<u32> {
    let v = t.cast(DType::F32).unwrap().to_vec::<f32>().unwrap();
    v.iter().map(|x| x.to_bits()).collect()
}
