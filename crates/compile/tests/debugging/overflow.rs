//! Overflow detection (op_debug_mode) names the op that first produced a NaN.

use spore_compile::jit;
use spore_core::debug::dump::{self, config::DumpConfig};
use spore_core::{DType, Tensor};

use super::{dump_json, files_under, serial, temp_dir};

#[test]
fn overflow_detection_names_the_first_nan_producer() {
    let _guard = serial();
    let dir = temp_dir("overflow");
    let f = jit("nan_net", |x: &[Tensor]| {
        let h = x[0].matmul(&x[0].transpose()?)?.sub_scalar(100.0)?; // negative entries
        let bad = spore_core::trace::with_scope("layer2", || h.log())?; // NaN appears here
        let out = bad.exp()?.sum(&[], false)?; // propagates NaN
        Ok(vec![out])
    });
    dump::enable(DumpConfig::parse(&dump_json(&dir, r#", "op_debug_mode": 3"#)).unwrap()).unwrap();
    let result = f.call(&[Tensor::ones(&[3, 4], DType::F32).unwrap()]);
    dump::disable().unwrap();
    assert!(result.unwrap()[0].item().unwrap().is_nan());
    let first = dump::last_overflow().expect("an overflow was detected");
    assert!(first.starts_with("Default/layer2/Log-op"), "{first}");
    let files = files_under(&dir.join("rank_0"));
    let npy: Vec<&String> = files.iter().filter(|f| f.ends_with(".npy")).collect();
    assert!(npy.iter().any(|f| f.contains("/Log.")), "{npy:?}");
    assert!(
        npy.iter()
            .all(|f| !f.contains("/MatMul.") && !f.contains("/Parameter.")),
        "only overflowing ops are kept: {npy:?}"
    );
}
