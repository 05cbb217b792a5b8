//! `OpsOnnx`: converted by `spore convert` from an ONNX model (opset 17).
//! Its parameters start at zero: load the converted checkpoint with
//! `load_param_into_net(&*net, &load_checkpoint("model.ckpt")?)`.

use std::sync::Arc;

use spore::core::{DType, Error, Parameter, Result, Tensor};
use spore::nn::cell::{Cell, CellBase};
use spore::onnx::api;

pub struct OpsOnnx {
    base: CellBase,
    /// ONNX initializer `up`.
    pub p_up: Parameter,
    /// ONNX initializer `up_bias`.
    pub p_up_bias: Parameter,
    /// ONNX initializer `vals`.
    pub p_vals: Parameter,
    /// ONNX initializer `lo`.
    pub p_lo: Parameter,
    /// ONNX initializer `hi`.
    pub p_hi: Parameter,
}

impl OpsOnnx {
    pub fn new() -> Result<Arc<OpsOnnx>> {
        Ok(Arc::new(OpsOnnx {
            base: CellBase::new(),
            p_up: Parameter::with_requires_grad(Tensor::zeros(&[3, 2, 3, 3], DType::F32)?, "up", true),
            p_up_bias: Parameter::with_requires_grad(Tensor::zeros(&[2], DType::F32)?, "up_bias", true),
            p_vals: Parameter::with_requires_grad(Tensor::zeros(&[2], DType::F32)?, "vals", true),
            p_lo: Parameter::with_requires_grad(Tensor::zeros(&[], DType::F32)?, "lo", true),
            p_hi: Parameter::with_requires_grad(Tensor::zeros(&[], DType::F32)?, "hi", true),
        }))
    }
}

impl Cell for OpsOnnx {
    #[allow(unreachable_code, unused_variables, clippy::diverging_sub_expression)]
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        if inputs.len() != 1 {
            return Err(Error::invalid(format!("OpsOnnx: expected 1 inputs, got {}", inputs.len())));
        }
        let v_x = inputs[0].clone();
        let p_up = self.p_up.value();
        let p_up_bias = self.p_up_bias.value();
        let p_vals = self.p_vals.value();
        let p_lo = self.p_lo.value();
        let p_hi = self.p_hi.value();
        let v_pads = Tensor::from_vec(vec![0i64, 0i64, 1i64, 2i64, 0i64, 0i64, 2i64, 1i64], &[8])?;
        let v_sizes = Tensor::from_vec(vec![1i64, 1i64], &[2])?;
        let v_starts = Tensor::from_vec(vec![1i64], &[1])?;
        let v_ends = Tensor::from_vec(vec![-1i64], &[1])?;
        let v_axes = Tensor::from_vec(vec![2i64], &[1])?;
        let v_idx = Tensor::from_vec(vec![1i64, -1i64], &[2])?;
        let v_depth = Tensor::from_vec(vec![3i64], &[1])?;
        let v_gidx = Tensor::from_vec(vec![1i64, 0i64], &[2])?;
        let v_uaxes = Tensor::from_vec(vec![0i64], &[1])?;
        let v_eshape = Tensor::from_vec(vec![2i64, 3i64, 2i64], &[3])?;
        let v_p: Tensor = api::pad(&v_x, &[0, 0, 1, 2, 0, 0, 2, 1], None, "reflect", 0.0f64)?;
        let v_ct: Tensor = api::conv_transpose2d(&v_p, &p_up, Some(&p_up_bias), [2, 2], [1, 1, 1, 1], [1, 1], [1, 1], 1)?;
        let [v_a, v_b]: [Tensor; 2] = api::split(&v_ct, 1, &[1, 1], 2)?.try_into().map_err(|_| Error::invalid("OpsOnnx: node Split_a returned the wrong number of outputs"))?;
        let v_a_cut: Tensor = api::slice(&v_a, &[1], &[-1], Some(&[2]), None)?;
        let v_b_cut: Tensor = api::slice(&v_b, &[1], &[-1], Some(&[2]), None)?;
        let v_y: Tensor = v_a_cut.mul(&v_b_cut)?;
        let v_hot: Tensor = api::one_hot(&v_idx, 3, &p_vals, 0)?;
        let v_lr: Tensor = api::leaky_relu(&v_y, 0.2f32)?;
        let v_cl: Tensor = api::clip(&v_lr, Some(&p_lo), Some(&p_hi))?;
        let v_gt: Tensor = v_cl.greater(&v_lr)?;
        let v_w: Tensor = Tensor::select(&v_gt, &v_cl, &v_lr)?;
        let v_rm: Tensor = v_w.max(&[2, 3], false)?;
        let v_g: Tensor = v_rm.gather(&v_gidx.cast(DType::I64)?, 0)?;
        let v_gc: Tensor = v_g.cast(DType::F32)?;
        let v_hot3: Tensor = api::unsqueeze(&v_hot, &[0])?;
        let v_hot_big: Tensor = api::expand(&v_hot3, &[2, 3, 2])?;
        Ok(vec![v_y, v_hot, v_w, v_gc, v_hot_big])
    }

    fn params(&self) -> Vec<(String, Parameter)> {
        vec![
            ("up".to_string(), self.p_up.clone()),
            ("up_bias".to_string(), self.p_up_bias.clone()),
            ("vals".to_string(), self.p_vals.clone()),
            ("lo".to_string(), self.p_lo.clone()),
            ("hi".to_string(), self.p_hi.clone()),
        ]
    }

    fn base(&self) -> &CellBase {
        &self.base
    }

    fn class_name(&self) -> &'static str {
        "OpsOnnx"
    }
}
