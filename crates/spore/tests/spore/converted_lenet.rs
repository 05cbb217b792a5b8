//! `LeNetOnnx`: converted by `spore convert` from an ONNX model (opset 17).
//! Its parameters start at zero: load the converted checkpoint with
//! `load_param_into_net(&*net, &load_checkpoint("model.ckpt")?)`.

use std::sync::Arc;

use spore::core::{DType, Error, Parameter, Result, Tensor};
use spore::nn::cell::{Cell, CellBase};
use spore::onnx::api;

pub struct LeNetOnnx {
    base: CellBase,
    /// ONNX initializer `conv1.weight`.
    pub p_conv1_weight: Parameter,
    /// ONNX initializer `conv2.weight`.
    pub p_conv2_weight: Parameter,
    /// ONNX initializer `fc1.weight`.
    pub p_fc1_weight: Parameter,
    /// ONNX initializer `fc1.bias`.
    pub p_fc1_bias: Parameter,
    /// ONNX initializer `fc2.weight`.
    pub p_fc2_weight: Parameter,
    /// ONNX initializer `fc2.bias`.
    pub p_fc2_bias: Parameter,
    /// ONNX initializer `fc3.weight`.
    pub p_fc3_weight: Parameter,
    /// ONNX initializer `fc3.bias`.
    pub p_fc3_bias: Parameter,
}

impl LeNetOnnx {
    pub fn new() -> Result<Arc<LeNetOnnx>> {
        Ok(Arc::new(LeNetOnnx {
            base: CellBase::new(),
            p_conv1_weight: Parameter::with_requires_grad(Tensor::zeros(&[6, 1, 5, 5], DType::F32)?, "conv1.weight", true),
            p_conv2_weight: Parameter::with_requires_grad(Tensor::zeros(&[16, 6, 5, 5], DType::F32)?, "conv2.weight", true),
            p_fc1_weight: Parameter::with_requires_grad(Tensor::zeros(&[120, 400], DType::F32)?, "fc1.weight", true),
            p_fc1_bias: Parameter::with_requires_grad(Tensor::zeros(&[120], DType::F32)?, "fc1.bias", true),
            p_fc2_weight: Parameter::with_requires_grad(Tensor::zeros(&[84, 120], DType::F32)?, "fc2.weight", true),
            p_fc2_bias: Parameter::with_requires_grad(Tensor::zeros(&[84], DType::F32)?, "fc2.bias", true),
            p_fc3_weight: Parameter::with_requires_grad(Tensor::zeros(&[10, 84], DType::F32)?, "fc3.weight", true),
            p_fc3_bias: Parameter::with_requires_grad(Tensor::zeros(&[10], DType::F32)?, "fc3.bias", true),
        }))
    }
}

impl Cell for LeNetOnnx {
    #[allow(unreachable_code, unused_variables, clippy::diverging_sub_expression)]
    fn construct(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        if inputs.len() != 1 {
            return Err(Error::invalid(format!("LeNetOnnx: expected 1 inputs, got {}", inputs.len())));
        }
        let v_x0 = inputs[0].clone();
        let p_conv1_weight = self.p_conv1_weight.value();
        let p_conv2_weight = self.p_conv2_weight.value();
        let p_fc1_weight = self.p_fc1_weight.value();
        let p_fc1_bias = self.p_fc1_bias.value();
        let p_fc2_weight = self.p_fc2_weight.value();
        let p_fc2_bias = self.p_fc2_bias.value();
        let p_fc3_weight = self.p_fc3_weight.value();
        let p_fc3_bias = self.p_fc3_bias.value();
        let v_default_reshape_op6_shape = Tensor::from_vec(vec![0i64, 400i64], &[2])?;
        let v_default_conv1_conv2d_op0: Tensor = api::conv2d(&v_x0, &p_conv1_weight, None, [1, 1], [0, 0, 0, 0], [1, 1], 1)?;
        let v_default_relu_relu_op1: Tensor = v_default_conv1_conv2d_op0.relu()?;
        let v_default_max_pool2d_maxpool_op2: Tensor = api::pool2d(&v_default_relu_relu_op1, true, [2, 2], [2, 2], [0, 0, 0, 0], false, false)?;
        let v_default_conv2_conv2d_op3: Tensor = api::conv2d(&v_default_max_pool2d_maxpool_op2, &p_conv2_weight, None, [1, 1], [0, 0, 0, 0], [1, 1], 1)?;
        let v_default_relu_relu_op4: Tensor = v_default_conv2_conv2d_op3.relu()?;
        let v_default_max_pool2d_maxpool_op5: Tensor = api::pool2d(&v_default_relu_relu_op4, true, [2, 2], [2, 2], [0, 0, 0, 0], false, false)?;
        let v_default_reshape_op6: Tensor = api::reshape(&v_default_max_pool2d_maxpool_op5, &[0, 400])?;
        let v_default_fc1_transpose_op7: Tensor = p_fc1_weight.permute(&[1, 0])?;
        let v_default_fc1_matmul_op8: Tensor = v_default_reshape_op6.matmul(&v_default_fc1_transpose_op7)?;
        let v_default_fc1_add_op9: Tensor = v_default_fc1_matmul_op8.add(&p_fc1_bias)?;
        let v_default_relu_relu_op10: Tensor = v_default_fc1_add_op9.relu()?;
        let v_default_fc2_transpose_op11: Tensor = p_fc2_weight.permute(&[1, 0])?;
        let v_default_fc2_matmul_op12: Tensor = v_default_relu_relu_op10.matmul(&v_default_fc2_transpose_op11)?;
        let v_default_fc2_add_op13: Tensor = v_default_fc2_matmul_op12.add(&p_fc2_bias)?;
        let v_default_relu_relu_op14: Tensor = v_default_fc2_add_op13.relu()?;
        let v_default_fc3_transpose_op15: Tensor = p_fc3_weight.permute(&[1, 0])?;
        let v_default_fc3_matmul_op16: Tensor = v_default_relu_relu_op14.matmul(&v_default_fc3_transpose_op15)?;
        let v_default_fc3_add_op17: Tensor = v_default_fc3_matmul_op16.add(&p_fc3_bias)?;
        let v_output0: Tensor = v_default_fc3_add_op17.clone();
        Ok(vec![v_output0])
    }

    fn params(&self) -> Vec<(String, Parameter)> {
        vec![
            ("conv1.weight".to_string(), self.p_conv1_weight.clone()),
            ("conv2.weight".to_string(), self.p_conv2_weight.clone()),
            ("fc1.weight".to_string(), self.p_fc1_weight.clone()),
            ("fc1.bias".to_string(), self.p_fc1_bias.clone()),
            ("fc2.weight".to_string(), self.p_fc2_weight.clone()),
            ("fc2.bias".to_string(), self.p_fc2_bias.clone()),
            ("fc3.weight".to_string(), self.p_fc3_weight.clone()),
            ("fc3.bias".to_string(), self.p_fc3_bias.clone()),
        ]
    }

    fn base(&self) -> &CellBase {
        &self.base
    }

    fn class_name(&self) -> &'static str {
        "LeNetOnnx"
    }
}
