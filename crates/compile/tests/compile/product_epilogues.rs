//! Matrix products' epilogues: what joins a product (a scaled addend, a running sum of
//! products, a bias and ReLU, ReLU's gradient), each checked bit for bit against the
//! unfused graph in the interpreter and the executor.

use spore_core::trace::trace;
use spore_core::{DType, Tensor, TensorType};

use super::fusion_bits::{fuse_keeping_bits, fused_ir, random_inputs};

/// A Momentum update of a weight gradient, `m * 0.9 + dyᵀ · x`, and a product plus a
/// tensor of its shape become `MatMulAdd`; results equal the unfused graph's bit for bit,
/// in the interpreter and in the executor over two runs. A product also returned, one
/// plus a broadcast bias, and one plus a tensor scaled by a non-constant keep their ops.
#[test]
fn scaled_addends_of_products_join_them() {
    let types = [
        TensorType::new(&[64, 30], DType::F32),
        TensorType::new(&[64, 20], DType::F32),
        TensorType::new(&[30, 20], DType::F32),
        TensorType::new(&[30, 20], DType::F32),
        TensorType::new(&[20, 20], DType::F32),
    ];
    let g = trace("momentum", &types, |x| {
        let dw = x[0].transpose()?.matmul(&x[1])?;
        let m_new = x[2].mul_scalar(0.9)?.add(&dw)?;
        let w_new = x[3].sub(&m_new.mul_scalar(0.01)?)?;
        let gram = x[1].transpose()?.matmul(&x[1])?.add(&x[4])?;
        Ok(vec![m_new, w_new, gram])
    })
    .unwrap();
    let ir = fuse_keeping_bits(g, &random_inputs(&types, 30));
    assert_eq!(ir.matches("= MatMulAdd(").count(), 2, "{ir}");
    assert!(!ir.contains("= MatMul("), "{ir}");

    let kept_types = [
        TensorType::new(&[8, 16], DType::F32),
        TensorType::new(&[16, 8], DType::F32),
        TensorType::new(&[8], DType::F32),
        TensorType::new(&[], DType::F32),
        TensorType::new(&[8, 8], DType::F32),
    ];
    let kept = trace("kept", &kept_types, |x| {
        let product = x[0].matmul(&x[1])?;
        let returned = product.mul_scalar(0.5)?.add(&product)?;
        let biased = x[0].matmul(&x[1])?.add(&x[2])?;
        let scaled = x[4].mul(&x[3])?.add(&x[0].matmul(&x[1])?)?;
        Ok(vec![returned, product, biased, scaled])
    })
    .unwrap();
    let ir = fused_ir(kept);
    assert!(!ir.contains("MatMulAdd"), "{ir}");
}

/// A weight gradient summed over four micro-batches, `Σ dyᵢᵀ · xᵢ`, then a Momentum
/// update: three products accumulate in their epilogues (`MatMulAdd` with the running
/// sum), the update stays one loop; results equal the unfused graph's bit for bit.
/// Products both also read elsewhere are not folded away.
#[test]
fn sums_of_products_accumulate_in_their_epilogues() {
    let mut types = vec![];
    for _ in 0..4 {
        types.push(TensorType::new(&[16, 30], DType::F32));
        types.push(TensorType::new(&[16, 20], DType::F32));
    }
    types.push(TensorType::new(&[30, 20], DType::F32));
    let g = trace("micro_grads", &types, |x| {
        let dw = |i: usize| x[2 * i].transpose()?.matmul(&x[2 * i + 1]);
        let sum = dw(0)?.add(&dw(1)?)?.add(&dw(2)?)?.add(&dw(3)?)?;
        Ok(vec![x[8].mul_scalar(0.9)?.add(&sum)?])
    })
    .unwrap();
    let ir = fuse_keeping_bits(g, &random_inputs(&types, 41));
    assert_eq!(ir.matches("= MatMulAdd(").count(), 3, "{ir}");
    assert_eq!(ir.matches("= MatMul(").count(), 1, "{ir}");

    let shared_types = [
        TensorType::new(&[8, 16], DType::F32),
        TensorType::new(&[16, 8], DType::F32),
    ];
    let shared = trace("shared", &shared_types, |x| {
        let p = x[0].matmul(&x[1])?;
        let q = x[1]
            .transpose()?
            .matmul(&x[0].transpose()?)?
            .transpose()?
            .transpose()?;
        Ok(vec![p.add(&q)?, p, q])
    })
    .unwrap();
    assert!(!fused_ir(shared).contains("MatMulAdd"));
}

/// A Dense layer's `relu(x · Wᵀ + b)` becomes `MatMulBiasAddReLU` and `x · Wᵀ + b`
/// `MatMulBiasAdd` (dot-product path, one of them on two threads), with results equal to
/// the unfused graph's bit for bit in the interpreter and the executor. A bias per row
/// (`[m, 1]`) and a product read twice keep their ops.
#[test]
fn dense_bias_and_relu_join_the_product() {
    let types = [
        TensorType::new(&[64, 300], DType::F32),
        TensorType::new(&[200, 300], DType::F32),
        TensorType::new(&[200], DType::F32),
        TensorType::new(&[10, 200], DType::F32),
        TensorType::new(&[10], DType::F32),
    ];
    let g = trace("mlp", &types, |x| {
        let h = x[0].matmul(&x[1].transpose()?)?.add(&x[2])?.relu()?;
        let logits = h.matmul(&x[3].transpose()?)?.add(&x[4])?;
        Ok(vec![logits, h])
    })
    .unwrap();
    let ir = fuse_keeping_bits(g, &random_inputs(&types, 50));
    assert_eq!(ir.matches("= MatMulBiasAddReLU(").count(), 1, "{ir}");
    assert_eq!(ir.matches("= MatMulBiasAdd(").count(), 1, "{ir}");
    assert!(!ir.contains("= MatMul("), "{ir}");

    let kept_types = [
        TensorType::new(&[8, 16], DType::F32),
        TensorType::new(&[16, 8], DType::F32),
        TensorType::new(&[8, 1], DType::F32),
        TensorType::new(&[8], DType::F32),
    ];
    let kept = trace("kept", &kept_types, |x| {
        let per_row = x[0].matmul(&x[1])?.add(&x[2])?.relu()?;
        let product = x[0].matmul(&x[1])?;
        let twice = product.add(&x[3])?.relu()?;
        Ok(vec![per_row, twice, product])
    })
    .unwrap();
    let ir = fused_ir(kept);
    assert!(!ir.contains("MatMulBias"), "{ir}");
}

/// ReLU's gradient of a product, `Select(y > 0, dy · W, 0)` as the ReLU rule builds it,
/// becomes `MatMulReluGrad` on the packed path (`dy · W`, two threads) and on the
/// dot-product path (`dy · Wᵀ`), with results equal to the unfused graph's bit for bit in
/// the interpreter and the executor. A `-0` as the other branch, a mask compared with `>=`, and a product read twice
/// keep their ops.
#[test]
fn relu_gradients_of_products_join_them() {
    let types = [
        TensorType::new(&[64, 200], DType::F32),
        TensorType::new(&[200, 300], DType::F32),
        TensorType::new(&[64, 300], DType::F32),
        TensorType::new(&[300, 200], DType::F32),
    ];
    let relu_grad = |y: &Tensor, g: &Tensor, zero: f64| {
        let zero = Tensor::scalar_of(zero, DType::F32);
        Tensor::select(&y.greater(&Tensor::scalar_of(0.0, DType::F32))?, g, &zero)
    };
    let g = trace("relu_grad", &types, |x| {
        let packed = relu_grad(&x[2], &x[0].matmul(&x[1])?, 0.0)?;
        let dot = relu_grad(&x[2], &x[0].matmul(&x[3].transpose()?)?, 0.0)?;
        Ok(vec![packed, dot])
    })
    .unwrap();
    let ir = fuse_keeping_bits(g, &random_inputs(&types, 70));
    assert_eq!(ir.matches("= MatMulReluGrad(").count(), 2, "{ir}");
    assert!(!ir.contains("= MatMul("), "{ir}");

    let kept_types = [
        TensorType::new(&[8, 16], DType::F32),
        TensorType::new(&[16, 8], DType::F32),
        TensorType::new(&[8, 8], DType::F32),
    ];
    let kept = trace("kept", &kept_types, |x| {
        let negative_zero = relu_grad(&x[2], &x[0].matmul(&x[1])?, -0.0)?;
        let zero = Tensor::scalar_of(0.0, DType::F32);
        let at_least = Tensor::select(&x[2].greater_equal(&zero)?, &x[0].matmul(&x[1])?, &zero)?;
        let product = x[0].matmul(&x[1])?;
        let twice = relu_grad(&x[2], &product, 0.0)?;
        Ok(vec![negative_zero, at_least, twice, product])
    })
    .unwrap();
    let ir = fused_ir(kept);
    assert!(!ir.contains("MatMulReluGrad"), "{ir}");
}
