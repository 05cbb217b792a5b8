//! `spore codegen`: a zoo model and its checkpoint as a self-contained C99 project
//! (float32, or int8 calibrated on training data), for x86 hosts or Cortex-M.

use std::path::PathBuf;

use spore_codegen::{Options, Target, generate};
use spore_core::{DType, Error, Result, Tensor, TensorType};
use spore_data::mnist::Usage;

use super::ZooModel;
use super::data::dataset;
use super::run::load_network;

/// Options of `spore codegen`.
#[derive(Clone, Debug)]
pub struct CodegenArgs {
    pub model: ZooModel,
    pub checkpoint: PathBuf,
    /// `x86` or `cortex-m`.
    pub target: String,
    pub int8: bool,
    /// Training data to calibrate int8 activations on (required with `int8`).
    pub calibration: Option<PathBuf>,
    pub calibration_samples: usize,
    pub out: PathBuf,
}

/// The shape of one sample of `model`'s input.
pub fn sample_shape(model: ZooModel) -> [usize; 4] {
    match model {
        ZooModel::LeNet => [1, 1, 32, 32],
        ZooModel::Mlp => [1, 1, 28, 28],
        ZooModel::ResNet18 => [1, 3, 32, 32],
    }
}

/// The first `n` training samples of `dir`, prepared as `model` trains on them.
fn calibration_samples(
    model: ZooModel,
    dir: &std::path::Path,
    n: usize,
) -> Result<Vec<Vec<Tensor>>> {
    // A fixed shuffle: the same calibration samples, so the same code, on every run.
    spore_data::config::set_seed(0);
    let ds = dataset(model, dir, Usage::Train, 1, None)?;
    let mut samples = vec![];
    for row in ds.create_tuple_iterator(1).take(n) {
        let row = row?;
        let image = row.first().ok_or_else(|| {
            Error::invalid(format!(
                "calibration data in {}: a row without an image",
                dir.display()
            ))
        })?;
        samples.push(vec![image.clone()]);
    }
    if samples.is_empty() {
        return Err(Error::io(dir, "no calibration samples"));
    }
    Ok(samples)
}

/// Generates the project; returns the report to print.
pub fn codegen(args: &CodegenArgs) -> Result<String> {
    let net = load_network(args.model, &args.checkpoint)?;
    let target = Target::parse(&args.target)?;
    let mut options = Options::new(args.model.name(), target);
    if args.int8 {
        let dir = args
            .calibration
            .as_ref()
            .ok_or_else(|| Error::invalid("spore codegen: --int8 needs --calibration DIR"))?;
        options = options.int8(calibration_samples(
            args.model,
            dir,
            args.calibration_samples,
        )?);
    }
    let input = TensorType::new(&sample_shape(args.model), DType::F32);
    let project = generate(&*net, &[input], &options)?;
    project.write_to(&args.out)?;
    let r = &project.report;
    Ok(format!(
        "wrote {} files to {}: {} kernels, workspace {} bytes, weights {} bytes ({})\nbuild it with: make -C {}\n",
        project.files.len(),
        args.out.display(),
        r.kernels.len(),
        r.workspace_bytes,
        r.weight_bytes,
        if args.int8 { "int8" } else { "float32" },
        args.out.display()
    ))
}
