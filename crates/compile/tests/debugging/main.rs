//! Dump, overflow detection, Print and the profiler. These observe every op in the
//! process, so they live in their own test binary and run one at a time (`serial`).

mod dump_async;
mod dump_config;
mod dump_lenet;
mod dump_selection;
mod overflow;
mod print_op;
mod profiler;

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use spore_core::ops::{Conv2dOptions, Pool2dOptions};
use spore_core::{DType, Parameter, Result, Tensor, value_and_grad};

static SERIAL: Mutex<()> = Mutex::new(());

/// Holds the lock that keeps observer tests from running at the same time.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A fresh, empty temporary folder.
pub fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("spore-debug-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A dump configuration JSON with the given common settings merged over defaults.
pub fn dump_json(path: &std::path::Path, extra: &str) -> String {
    format!(
        r#"{{"common_dump_settings": {{"dump_mode": 0, "path": "{}", "net_name": "LeNet", "iteration": "all",
           "input_output": 0, "kernels": [], "support_device": [0]{extra}}}, "e2e_dump_settings": {{"enable": true, "trans_flag": true}}}}"#,
        path.display()
    )
}

/// LeNet5 (seed 001) on 1x32x32 inputs, written with core ops over Parameters.
pub struct LeNet {
    pub params: Vec<Parameter>,
    pub velocity: Vec<Parameter>,
}

impl Default for LeNet {
    fn default() -> Self {
        Self::new()
    }
}

impl LeNet {
    pub fn new() -> LeNet {
        let shapes: [&[usize]; 8] = [
            &[6, 1, 5, 5],
            &[16, 6, 5, 5],
            &[120, 400],
            &[120],
            &[84, 120],
            &[84],
            &[10, 84],
            &[10],
        ];
        let params: Vec<Parameter> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                Parameter::new(
                    Tensor::truncated_normal(s, 0.1, DType::F32, Some(i as u64)).unwrap(),
                    &format!("p{i}"),
                )
            })
            .collect();
        let velocity = params
            .iter()
            .map(|p| {
                Parameter::with_requires_grad(
                    p.stored().zeros_like(),
                    &format!("moments.{}", p.name()),
                    false,
                )
            })
            .collect();
        LeNet { params, velocity }
    }

    pub fn forward(p: &[Tensor], x: &Tensor) -> Result<Tensor> {
        let (conv, pool) = (Conv2dOptions::default(), Pool2dOptions::new(2, 2));
        let x = x.conv2d(&p[0], &conv)?.relu()?.max_pool2d(&pool)?;
        let x = x
            .conv2d(&p[1], &conv)?
            .relu()?
            .max_pool2d(&pool)?
            .flatten(1)?;
        let x = x.matmul(&p[2].transpose()?)?.add(&p[3])?.relu()?;
        let x = x.matmul(&p[4].transpose()?)?.add(&p[5])?.relu()?;
        x.matmul(&p[6].transpose()?)?.add(&p[7])
    }

    /// One training step (forward, backward, Momentum update); returns the loss.
    pub fn step(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        let w: Vec<Tensor> = self.params.iter().map(|p| p.value()).collect();
        let loss = |a: &[Tensor]| -> Result<Tensor> {
            let logits = LeNet::forward(&a[2..], &a[0])?;
            logits
                .log_softmax(-1)?
                .mul(&a[1].one_hot(10, DType::F32)?)?
                .sum(&[-1], false)?
                .mean(&[], false)?
                .neg()
        };
        let out = value_and_grad(loss, None, &w, false)(
            &[vec![x.clone(), y.clone()], w.clone()].concat(),
        )?;
        spore_core::trace::with_scope("optimizer", || -> Result<()> {
            for ((p, v), g) in self
                .params
                .iter()
                .zip(&self.velocity)
                .zip(&out.weight_grads)
            {
                let nv = v.value().mul_scalar(0.9)?.add(g)?;
                v.assign(&nv)?;
                p.assign(&p.value().sub(&nv.mul_scalar(0.01)?)?)?;
            }
            Ok(())
        })?;
        Ok(out.value)
    }
}

pub fn batch() -> (Tensor, Tensor) {
    let x = Tensor::randn(&[4, 1, 32, 32], DType::F32, Some(42)).unwrap();
    let y = Tensor::from_vec(vec![1i32, 7, 3, 0], &[4]).unwrap();
    (x, y)
}

/// All files below `dir`, recursively, as paths relative to it.
pub fn files_under(dir: &std::path::Path) -> Vec<String> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

/// Asserts two tensors hold the same shape and values within `tol`.
pub fn assert_close(a: &Tensor, b: &Tensor, tol: f64, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}: shapes");
    let (x, y) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
    for (i, (p, q)) in x.iter().zip(&y).enumerate() {
        assert!(
            (p - q).abs() <= tol * (1.0 + q.abs()),
            "{what}: element {i}: {p} vs {q}"
        );
    }
}
