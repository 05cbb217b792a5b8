//! Convolutions' epilogues: an inference BatchNorm, a bias, a residual sum and ReLU join
//! the convolution that they finish (`Conv2DEpilogue`), each checked bit for bit against
//! the unfused graph in the interpreter and the executor; what does not have that form
//! keeps its ops.

use spore_core::prims::conv::{Conv2dOptions, PadMode};
use spore_core::trace::trace;
use spore_core::{DType, Tensor, TensorType};

use super::fusion_bits::{fuse_keeping_bits, fused_ir, random_inputs};

/// A traced function of the test's inputs.
type Traced = fn(&[Tensor]) -> spore_core::Result<Vec<Tensor>>;

fn same() -> Conv2dOptions {
    Conv2dOptions::default().pad_mode(PadMode::Same)
}

/// ResNet's basic block in evaluation mode: `relu(bn1(conv1(x)))`, then
/// `relu(bn2(conv2(.)) + x)`, each BatchNorm a per-channel scale and shift; at batch 1
/// (one product per image, the tiles apply the epilogue) and batch 3 (images side by
/// side in one product, the epilogue after it).
#[test]
fn batchnorm_residual_and_relu_join_the_convolution() {
    for batch in [1, 3] {
        let types = [
            TensorType::new(&[batch, 16, 8, 8], DType::F32),
            TensorType::new(&[16, 16, 3, 3], DType::F32),
            TensorType::new(&[16, 16, 3, 3], DType::F32),
            TensorType::new(&[1, 16, 1, 1], DType::F32),
            TensorType::new(&[1, 16, 1, 1], DType::F32),
            TensorType::new(&[1, 16, 1, 1], DType::F32),
            TensorType::new(&[1, 16, 1, 1], DType::F32),
        ];
        let g = trace("block", &types, |x| {
            let y = x[0]
                .conv2d(&x[1], &same())?
                .mul(&x[3])?
                .add(&x[4])?
                .relu()?;
            let z = y.conv2d(&x[2], &same())?.mul(&x[5])?.add(&x[6])?;
            Ok(vec![z.add(&x[0])?.relu()?])
        })
        .unwrap();
        let ir = fuse_keeping_bits(g, &random_inputs(&types, 40 + batch as u64));
        assert_eq!(ir.matches("= Conv2DEpilogue(").count(), 2, "{ir}");
        assert!(ir.contains("addend: true, relu: true"), "{ir}");
        assert!(!ir.contains("= Conv2D("), "{ir}");
        assert!(!ir.contains("FusedElementwise"), "{ir}");
    }
}

/// ResNet's downsampling block, `relu(bn2(conv2(y)) + bn3(conv3(x)))` with the shortcut a
/// strided 1x1 convolution: the loop summing the two finished convolutions becomes two
/// epilogues, the shortcut's value the main convolution's addend. Two blocks in one
/// graph (several matches), the second summing its branches in the other order, its
/// value returned and also read after the loop.
#[test]
fn a_downsampling_block_gives_each_convolution_an_epilogue() {
    for batch in [1, 2] {
        let channel = || TensorType::new(&[1, 16, 1, 1], DType::F32);
        let types = [
            TensorType::new(&[batch, 8, 8, 8], DType::F32),
            TensorType::new(&[16, 8, 3, 3], DType::F32),
            TensorType::new(&[16, 16, 3, 3], DType::F32),
            TensorType::new(&[16, 8, 1, 1], DType::F32),
            channel(),
            channel(),
            channel(),
            channel(),
            channel(),
            channel(),
            TensorType::new(&[16, 16, 3, 3], DType::F32),
            TensorType::new(&[16, 16, 1, 1], DType::F32),
        ];
        let g = trace("downsample", &types, |x| {
            let halve = same().stride(2);
            let y = x[0].conv2d(&x[1], &halve)?.mul(&x[4])?.add(&x[5])?.relu()?;
            let main = y.conv2d(&x[2], &same())?.mul(&x[6])?.add(&x[7])?;
            let shortcut = x[0]
                .conv2d(&x[3], &Conv2dOptions::default().stride(2))?
                .mul(&x[8])?
                .add(&x[9])?;
            let first = main.add(&shortcut)?.relu()?;
            // A second block on the first's output (16 channels, 4x4), without ReLU.
            let main = first.conv2d(&x[10], &same())?.mul(&x[6])?.add(&x[7])?;
            let shortcut = first.conv2d(&x[11], &Conv2dOptions::default())?;
            let shortcut = shortcut.mul(&x[8])?.add(&x[9])?;
            let second = shortcut.add(&main)?;
            Ok(vec![first, second.clone(), second.tanh()?])
        })
        .unwrap();
        let ir = fuse_keeping_bits(g, &random_inputs(&types, 60 + batch as u64));
        assert_eq!(ir.matches("= Conv2DEpilogue(").count(), 5, "{ir}");
        assert!(!ir.contains("= Conv2D("), "{ir}");
        assert!(!ir.contains("FusedElementwise"), "{ir}");
    }
}

/// A convolution's bias (one value per channel, `[C, 1, 1]`) alone, with strides and
/// groups, and a scale alone.
#[test]
fn a_bias_or_a_scale_alone_joins_the_convolution() {
    let types = [
        TensorType::new(&[2, 4, 9, 7], DType::F32),
        TensorType::new(&[6, 2, 3, 3], DType::F32),
        TensorType::new(&[6, 1, 1], DType::F32),
    ];
    let strided = Conv2dOptions::default().stride(2).groups(2);
    let g = trace("bias", &types, |x| {
        Ok(vec![x[0].conv2d(&x[1], &strided)?.add(&x[2])?])
    })
    .unwrap();
    let ir = fuse_keeping_bits(g, &random_inputs(&types, 50));
    assert!(
        ir.contains("scale: false, shift: true, addend: false, relu: false"),
        "{ir}"
    );

    let g = trace("scale", &types, |x| {
        Ok(vec![x[0].conv2d(&x[1], &strided)?.mul(&x[2])?.relu()?])
    })
    .unwrap();
    let ir = fuse_keeping_bits(g, &random_inputs(&types, 51));
    assert!(
        ir.contains("scale: true, shift: false, addend: false, relu: true"),
        "{ir}"
    );
}

/// What keeps its ops: a convolution whose value is also returned, a "bias" of shape `[C]`
/// (which broadcasts along the width, not the channels), and a shift minus the scaled
/// convolution.
#[test]
fn loops_of_another_form_keep_their_ops() {
    let types = [
        TensorType::new(&[1, 4, 6, 6], DType::F32),
        TensorType::new(&[6, 4, 3, 3], DType::F32),
        TensorType::new(&[1, 6, 1, 1], DType::F32),
        TensorType::new(&[6], DType::F32),
    ];
    let cases: [(&str, Traced); 3] = [
        ("returned", |x| {
            let c = x[0].conv2d(&x[1], &same())?;
            Ok(vec![c.add(&x[2])?.relu()?, c])
        }),
        ("along the width", |x| {
            Ok(vec![x[0].conv2d(&x[1], &same())?.add(&x[3])?])
        }),
        ("subtracted", |x| {
            let c = x[0].conv2d(&x[1], &same())?;
            Ok(vec![x[2].sub(&c.mul(&x[2])?)?])
        }),
    ];
    for (what, f) in cases {
        let ir = fused_ir(trace(what, &types, f).unwrap());
        assert!(!ir.contains("Conv2DEpilogue"), "{what}:\n{ir}");
        assert!(ir.contains("= Conv2D("), "{what}:\n{ir}");
    }
}
