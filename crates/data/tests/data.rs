//! The MNIST reader on the bundled digits and on corrupted fixtures.

use std::path::PathBuf;

use spore_data::idx::parse_idx;
use spore_data::mnist::{Mnist, Usage};
use spore_data::vision::resize_bilinear_u8;

fn bundled(split: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/mnist")
        .join(split)
}

#[test]
fn bundled_digits_load() {
    let train = Mnist::load(bundled("train"), Usage::Train).unwrap();
    let test = Mnist::load(bundled("test"), Usage::Test).unwrap();
    assert_eq!((train.len(), test.len()), (8000, 1000));
    assert_eq!(train.image_shape(), [28, 28]);
    // Every class appears, and images are not blank.
    for d in 0..10u8 {
        assert!(train.labels.contains(&d));
    }
    assert!(train.image(0).iter().any(|&p| p > 200));
}

#[test]
fn corrupted_files_give_errors_naming_the_problem() {
    let err = parse_idx(&[0, 0, 9, 1, 0, 0, 0, 1, 5], "x.idx")
        .unwrap_err()
        .to_string();
    assert!(err.contains("x.idx") && err.contains("magic"), "{err}");
    let err = parse_idx(&[0, 0, 8, 1, 0, 0, 0, 3, 5], "y.idx")
        .unwrap_err()
        .to_string();
    assert!(err.contains("y.idx") && err.contains("truncated"), "{err}");
    let err = parse_idx(&[0, 0, 8, 3, 0, 0], "z.idx")
        .unwrap_err()
        .to_string();
    assert!(err.contains("truncated IDX header"), "{err}");

    let dir = std::env::temp_dir().join(format!("spore-mnist-mismatch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("t10k-images-idx3-ubyte"),
        [0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 1, 9, 9],
    )
    .unwrap();
    std::fs::write(
        dir.join("t10k-labels-idx1-ubyte"),
        [0, 0, 8, 1, 0, 0, 0, 3, 1, 2, 3],
    )
    .unwrap();
    let err = Mnist::load(&dir, Usage::Test).unwrap_err().to_string();
    assert!(err.contains("2 images but 3 labels"), "{err}");
    std::fs::write(dir.join("t10k-images-idx3-ubyte"), [0x1f, 0x8b, 1, 2, 3]).unwrap();
    assert!(
        Mnist::load(&dir, Usage::Test)
            .unwrap_err()
            .to_string()
            .contains("gzip")
    );
    std::fs::remove_dir_all(&dir).ok();
    let err = Mnist::load("/nonexistent/mnist", Usage::Train)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("/nonexistent/mnist") && err.contains("does not exist"),
        "{err}"
    );
}

#[test]
fn bilinear_resize_uses_half_pixel_centres() {
    // 2x2 -> 4x4: output pixel 1 maps to input 0.25 -> 0 * 0.75 + 100 * 0.25 = 25.
    let out = resize_bilinear_u8(&[0, 100, 0, 100], 2, 2, 4, 4);
    assert_eq!(&out[..4], &[0, 25, 75, 100]);
}
