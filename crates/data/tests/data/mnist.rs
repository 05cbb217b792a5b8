//! The MNIST reader and MnistDataset on the bundled digits and on corrupted fixtures.

use std::path::Path;

use spore_data::MnistDataset;
use spore_data::idx::parse_idx;
use spore_data::mnist::{Mnist, Usage};
use spore_data::vision::resize_bilinear_u8;

use crate::{bundled, temp_dir};

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
    // Usage::All takes whatever splits the folder holds (here only the training files).
    assert_eq!(
        Mnist::load(bundled("train"), Usage::All).unwrap().len(),
        8000
    );
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

    let dir = temp_dir("mnist-mismatch");
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

/// IDX bytes: magic for `rank` dimensions, the sizes, the data.
fn idx(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 0, 8, dims.len() as u8];
    for d in dims {
        v.extend_from_slice(&d.to_be_bytes());
    }
    v.extend_from_slice(data);
    v
}

fn gz(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn build_err(dir: &Path) -> String {
    MnistDataset::new(dir)
        .usage(Usage::Train)
        .build()
        .unwrap_err()
        .to_string()
}

#[test]
fn mnist_dataset_reports_corrupted_files_by_name() {
    let dir = temp_dir("mnist-dataset-errors");
    let images = dir.join("train-images-idx3-ubyte");
    let labels = dir.join("train-labels-idx1-ubyte.gz");
    // A good pair (gzipped labels, raw images) builds and yields [2, 2, 1] images.
    std::fs::write(&images, idx(&[3, 2, 2], &[0; 12])).unwrap();
    std::fs::write(&labels, gz(&idx(&[3], &[1, 2, 3]))).unwrap();
    let ds = MnistDataset::new(&dir).shuffle(false).build().unwrap();
    assert_eq!(ds.get_dataset_size().unwrap(), 3);
    assert_eq!(ds.output_shapes().unwrap(), vec![vec![2, 2, 1], vec![]]);

    // Wrong magic number.
    let mut bad = idx(&[3, 2, 2], &[0; 12]);
    bad[2] = 0x0b;
    std::fs::write(&images, &bad).unwrap();
    let err = build_err(&dir);
    assert!(
        err.contains("train-images-idx3-ubyte") && err.contains("wrong magic number"),
        "{err}"
    );
    // Truncated data.
    std::fs::write(&images, idx(&[3, 2, 2], &[0; 10])).unwrap();
    let err = build_err(&dir);
    assert!(
        err.contains("train-images-idx3-ubyte")
            && err.contains("truncated")
            && err.contains("12 bytes"),
        "{err}"
    );
    // Image/label count mismatch: both files named.
    std::fs::write(&images, idx(&[4, 2, 2], &[0; 16])).unwrap();
    let err = build_err(&dir);
    assert!(
        err.contains("4 images but 3 labels") && err.contains("train-labels-idx1-ubyte.gz"),
        "{err}"
    );
    // Wrong rank for the images.
    std::fs::write(&images, idx(&[3, 4], &[0; 12])).unwrap();
    let err = build_err(&dir);
    assert!(err.contains("expected 3 dimensions"), "{err}");
    // A label file missing altogether names what it looked for.
    std::fs::remove_file(&labels).unwrap();
    let err = build_err(&dir);
    assert!(err.contains("train-labels-idx1-ubyte"), "{err}");
    // A missing folder says which.
    let err = MnistDataset::new(dir.join("nope"))
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("nope") && err.contains("does not exist"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bilinear_resize_uses_half_pixel_centres() {
    // 2x2 -> 4x4: output pixel 1 maps to input 0.25 -> 0 * 0.75 + 100 * 0.25 = 25.
    let out = resize_bilinear_u8(&[0, 100, 0, 100], 2, 2, 4, 4);
    assert_eq!(&out[..4], &[0, 25, 75, 100]);
    // Bad sizes give an empty result rather than a panic.
    assert!(resize_bilinear_u8(&[1, 2, 3], 2, 2, 4, 4).is_empty());
}

/// A gzipped IDX file whose header promises 2^40 bytes: refused before the data is
/// allocated, since 40 compressed bytes cannot hold it (deflate expands at most ~1032x).
#[test]
fn a_gzipped_idx_header_promising_more_than_the_file_holds_is_refused_early() {
    use std::io::Write;
    let mut header = vec![0u8, 0, 8, 2];
    header.extend_from_slice(&(1u32 << 20).to_be_bytes());
    header.extend_from_slice(&(1u32 << 20).to_be_bytes());
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&header).unwrap();
    gz.write_all(&[0u8; 64]).unwrap();
    let bytes = gz.finish().unwrap();
    let err = spore_data::idx::decode_idx(&bytes, "bomb.gz")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bomb.gz") && err.contains("promises 1099511627776 bytes"),
        "{err}"
    );
    // A gzipped file of 300 zero bytes that honestly says so decodes.
    let mut header = vec![0u8, 0, 8, 1];
    header.extend_from_slice(&300u32.to_be_bytes());
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&header).unwrap();
    gz.write_all(&[0u8; 300]).unwrap();
    let a = spore_data::idx::decode_idx(&gz.finish().unwrap(), "ok.gz").unwrap();
    assert_eq!((a.dims, a.data.len()), (vec![300], 300));
}
