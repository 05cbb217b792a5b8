use spore_codegen::{Options, Target, generate};
use spore_core::{DType, TensorType};
use spore_nn::prelude::*;
fn main() {
    let net = LeNet5::new(10).unwrap();
    let p = generate(
        &*net,
        &[TensorType::new(&[1, 1, 32, 32], DType::F32)],
        &Options::new("lenet", Target::X86),
    )
    .unwrap();
    p.write_to("/tmp/lenet_c".as_ref()).unwrap();
    println!("{}", p.report.to_text("lenet"));
    let net = ResNet::resnet18(10).unwrap();
    let p = generate(
        &*net,
        &[TensorType::new(&[1, 3, 32, 32], DType::F32)],
        &Options::new("resnet18", Target::X86),
    )
    .unwrap();
    p.write_to("/tmp/resnet_c".as_ref()).unwrap();
    println!("{}", p.report.to_text("resnet18"));
}
