//! `set_context(max_device_memory=...)` caps the size of one tensor: larger outputs are
//! errors naming the cap. In a process of its own, since the cap is process-wide.

use spore_core::context::{ContextUpdate, set_context};
use spore_core::{DType, Tensor};

#[test]
fn max_device_memory_caps_one_tensor() {
    set_context(ContextUpdate::new().max_device_memory("1MB")).unwrap();
    let x = Tensor::ones(&[1], DType::F32).unwrap();
    assert!(x.broadcast_to(&[200_000]).is_ok(), "800 KB is under 1 MB");
    let err = x.broadcast_to(&[300_000]).unwrap_err().to_string();
    assert!(
        err.contains("needs 1200000 bytes (1.1 MiB)")
            && err.contains("max_device_memory (1.0 MiB)"),
        "{err}"
    );
    assert!(Tensor::zeros(&[300_000], DType::F32).is_err());
    for bad in ["", "-1GB", "3.5XB", "NaNGB", "0"] {
        let err = set_context(ContextUpdate::new().max_device_memory(bad)).unwrap_err();
        assert!(
            err.to_string()
                .contains("max_device_memory must be a positive size"),
            "{bad}: {err}"
        );
    }
    set_context(ContextUpdate::new().max_device_memory("3.5GB")).unwrap();
    assert_eq!(
        spore_core::context::get_context().max_device_memory,
        Some(3_758_096_384)
    );
    assert!(x.broadcast_to(&[300_000]).is_ok());
}

/// glibc tuning is off unless asked for, and the context turns it on.
#[test]
fn malloc_tuning_is_an_explicit_option() {
    if std::env::var_os("SPORE_MALLOC_TUNING").is_none() {
        assert!(
            !spore_kernels::arena::malloc_tuning(),
            "on without being asked for"
        );
    }
    set_context(ContextUpdate::new().malloc_tuning(true)).unwrap();
    assert!(spore_kernels::arena::malloc_tuning());
    assert!(spore_core::context::get_context().malloc_tuning);
    let err = ContextUpdate::new()
        .set("malloc_tuning", "maybe")
        .unwrap_err();
    assert!(err.to_string().contains("must be true or false"), "{err}");
}
