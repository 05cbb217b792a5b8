//! The other sources: CIFAR-10 binary files, image folders (PNG and JPEG), generators,
//! in-memory arrays; each on small fixtures written by the test.

use std::io::Cursor;

use image::ImageEncoder;
use spore_core::{DType, Tensor};
use spore_data::prelude::*;

use crate::{f64s, rows, scalars, seeded, temp_dir};

pub fn encode_png(rgb: &[u8], w: u32, h: u32) -> Vec<u8> {
    let mut out = Vec::new();
    image::codecs::png::PngEncoder::new(&mut out)
        .write_image(rgb, w, h, image::ExtendedColorType::Rgb8)
        .unwrap();
    out
}

pub fn encode_jpeg(rgb: &[u8], w: u32, h: u32) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 95)
        .write_image(rgb, w, h, image::ExtendedColorType::Rgb8)
        .unwrap();
    out.into_inner()
}

/// A CIFAR-10 record: label, then the red, green and blue planes (value = plane * 10 + label).
fn cifar_record(label: u8) -> Vec<u8> {
    let mut r = vec![label];
    for plane in 0..3u8 {
        r.extend(std::iter::repeat_n(plane * 10 + label, 1024));
    }
    r
}

#[test]
fn cifar10_binary_files() {
    let dir = temp_dir("cifar");
    let train: Vec<u8> = [3u8, 7].iter().flat_map(|&l| cifar_record(l)).collect();
    std::fs::write(dir.join("data_batch_1.bin"), &train).unwrap();
    std::fs::write(dir.join("data_batch_2.bin"), cifar_record(1)).unwrap();
    std::fs::write(dir.join("test_batch.bin"), cifar_record(9)).unwrap();
    std::fs::write(dir.join("batches.meta.txt"), "airplane\n").unwrap();
    let ds = Cifar10Dataset::new(&dir)
        .usage(Usage::Train)
        .shuffle(false)
        .build()
        .unwrap();
    assert_eq!(ds.get_dataset_size().unwrap(), 3);
    assert_eq!(
        scalars(&ds.project(["label"]).unwrap()),
        vec![3.0, 7.0, 1.0]
    );
    let first = ds.create_tuple_iterator(1).next().unwrap().unwrap();
    assert_eq!(
        (first[0].shape(), first[0].dtype()),
        (&[32, 32, 3][..], DType::U8)
    );
    // HWC: each pixel is (R, G, B) = (label, 10 + label, 20 + label).
    assert_eq!(
        first[0].to_vec::<u8>().unwrap()[..6],
        [3, 13, 23, 3, 13, 23]
    );
    assert_eq!(first[1].dtype(), DType::I32);
    let all = Cifar10Dataset::new(&dir).build().unwrap();
    assert_eq!(all.get_dataset_size().unwrap(), 4);
    let test = Cifar10Dataset::new(&dir)
        .usage(Usage::Test)
        .build()
        .unwrap();
    assert_eq!(test.get_dataset_size().unwrap(), 1);
    // A truncated file names itself and the record size.
    std::fs::write(dir.join("test_batch.bin"), &cifar_record(9)[..3000]).unwrap();
    let err = Cifar10Dataset::new(&dir)
        .usage(Usage::Test)
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("test_batch.bin") && err.contains("3073"),
        "{err}"
    );
    let err = Cifar10Dataset::new(dir.join("missing"))
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("missing") && err.contains("does not exist"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn image_folder_labels_by_sorted_folder_name() {
    let dir = temp_dir("folder");
    for (class, color) in [("cat", 10u8), ("dog", 200)] {
        std::fs::create_dir_all(dir.join(class)).unwrap();
        std::fs::write(
            dir.join(class).join("a.png"),
            encode_png(&[color; 2 * 3 * 3], 2, 3),
        )
        .unwrap();
        std::fs::write(
            dir.join(class).join("b.jpg"),
            encode_jpeg(&[color; 8 * 8 * 3], 8, 8),
        )
        .unwrap();
        std::fs::write(dir.join(class).join(".hidden"), b"x").unwrap();
    }
    std::fs::write(dir.join("dog").join("notes.txt"), b"not an image").unwrap();
    let ds = ImageFolderDataset::new(&dir)
        .extensions([".png", ".JPG"])
        .decode(true)
        .shuffle(false)
        .build()
        .unwrap();
    assert_eq!(ds.get_dataset_size().unwrap(), 4);
    let got = rows(&ds);
    assert_eq!(
        got.iter().map(|r| r[1][0]).collect::<Vec<_>>(),
        vec![0.0, 0.0, 1.0, 1.0]
    );
    assert_eq!(got[0][0], vec![10.0; 18], "cat/a.png decodes to its colour");
    assert!(
        got[3][0].iter().all(|&p| (p - 200.0).abs() <= 2.0),
        "dog/b.jpg"
    );
    // Undecoded: raw bytes, and Decode in a map does the same job in parallel.
    let raw = ImageFolderDataset::new(&dir)
        .extensions(["png"])
        .shuffle(false)
        .build()
        .unwrap();
    let first = raw.create_tuple_iterator(1).next().unwrap().unwrap();
    assert_eq!(first[0].rank(), 1);
    let decoded = raw.map(["image"], vec![Decode.into()], 2).unwrap();
    assert_eq!(
        decoded.output_shapes().unwrap(),
        vec![vec![3, 2, 3], vec![]]
    );
    // class_indexing picks folders and numbers; files other than images fail to decode
    // with the file's name in the error.
    let dogs = ImageFolderDataset::new(&dir)
        .class_indexing([("dog", 5)])
        .decode(true)
        .shuffle(false)
        .build()
        .unwrap();
    assert_eq!(dogs.get_dataset_size().unwrap(), 3);
    let err = dogs
        .create_tuple_iterator(1)
        .find_map(|r| r.err())
        .unwrap()
        .to_string();
    assert!(err.contains("notes.txt") && err.contains("Decode"), "{err}");
    let err = ImageFolderDataset::new(&dir)
        .class_indexing([("bird", 0)])
        .build()
        .unwrap_err()
        .to_string();
    assert!(err.contains("'bird'"), "{err}");
    let err = ImageFolderDataset::new(dir.join("nope"))
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
fn generators_and_in_memory_arrays() {
    seeded();
    // An iterator factory is called once per epoch.
    let g = GeneratorDataset::from_iter(["x", "y"], || {
        (0..4).map(|i| vec![Tensor::scalar(i as f32), Tensor::scalar(-i)])
    })
    .build()
    .unwrap();
    let mut it = g.create_tuple_iterator(2);
    assert_eq!((&mut it).count(), 4);
    assert_eq!((&mut it).count(), 4);
    assert!(
        GeneratorDataset::from_iter(["x"], || std::iter::once(Tensor::scalar(1)))
            .shuffle(true)
            .build()
            .is_err()
    );
    // Random access: shuffled per epoch from the seed, num_samples honoured.
    let r = GeneratorDataset::from_fn(["i"], 50, |i| Tensor::scalar(i as i64))
        .num_samples(20)
        .build()
        .unwrap();
    let a = scalars(&r);
    assert_eq!(a.len(), 20);
    assert_eq!(
        a,
        scalars(
            &GeneratorDataset::from_fn(["i"], 50, |i| Tensor::scalar(i as i64))
                .num_samples(20)
                .build()
                .unwrap()
        )
    );
    assert_ne!(a, (0..20).map(f64::from).collect::<Vec<_>>());
    // Wrong row widths, errors and panics in user code surface as errors naming the row.
    let bad = GeneratorDataset::from_fn(["a", "b"], 3, |_| Tensor::scalar(1))
        .shuffle(false)
        .build()
        .unwrap();
    let err = bad
        .create_tuple_iterator(1)
        .next()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("row 0 has 1 tensors but there are 2 columns"),
        "{err}"
    );
    let failing = GeneratorDataset::from_iter(["a"], || {
        (0..3).map(|i| {
            if i == 2 {
                Err(spore_core::Error::invalid("sensor offline"))
            } else {
                Ok(Tensor::scalar(i))
            }
        })
    })
    .build()
    .unwrap();
    let results: Vec<_> = failing.create_tuple_iterator(1).collect();
    assert_eq!(results.len(), 3);
    let err = results[2].as_ref().unwrap_err().to_string();
    assert!(
        err.contains("row 2") && err.contains("sensor offline"),
        "{err}"
    );
    let panicky = GeneratorDataset::from_fn(["a"], 2, |i| -> Tensor {
        assert!(i == 0, "no row {i}");
        Tensor::scalar(0)
    })
    .shuffle(false)
    .build()
    .unwrap();
    let err = panicky
        .create_tuple_iterator(1)
        .nth(1)
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("panicked") && err.contains("no row 1"),
        "{err}"
    );
}

#[test]
fn numpy_slices_datasets() {
    seeded();
    // NumpySlicesDataset slices along the first axis.
    let x = Tensor::from_vec((0..12).map(|v| v as f32).collect(), &[3, 2, 2]).unwrap();
    let y = Tensor::from_vec(vec![7i64, 8, 9], &[3]).unwrap();
    let ds = NumpySlicesDataset::new(vec![("x", x), ("y", y)])
        .unwrap()
        .shuffle(false)
        .build()
        .unwrap();
    let r = rows(&ds);
    assert_eq!(r[1], vec![vec![4.0, 5.0, 6.0, 7.0], vec![8.0]]);
    // A strided view (here transposed rows) is sliced by its logical layout.
    let xt = Tensor::from_vec((0..12).map(|v| v as f32).collect(), &[3, 2, 2])
        .unwrap()
        .permute(&[0, 2, 1])
        .unwrap();
    let ds = NumpySlicesDataset::new(vec![("x", xt)])
        .unwrap()
        .shuffle(false)
        .build()
        .unwrap();
    assert_eq!(rows(&ds)[1], vec![vec![4.0, 6.0, 5.0, 7.0]]);
    let bad = NumpySlicesDataset::new(vec![
        ("x", Tensor::zeros(&[3], DType::F32).unwrap()),
        ("y", Tensor::zeros(&[4], DType::F32).unwrap()),
    ]);
    let err = bad.err().unwrap().to_string();
    assert!(err.contains("'y' has 4 rows but 'x' has 3"), "{err}");
    assert!(NumpySlicesDataset::new(vec![("s", Tensor::scalar(1.0f32))]).is_err());
    // Shuffled by default, like MindSpore.
    let xs = Tensor::from_vec((0..30).collect::<Vec<i32>>(), &[30]).unwrap();
    let shuffled = NumpySlicesDataset::new(vec![("x", xs)])
        .unwrap()
        .build()
        .unwrap();
    let v = scalars(&shuffled);
    assert_ne!(v, (0..30).map(f64::from).collect::<Vec<_>>());
    assert_eq!(
        f64s(&Tensor::from_vec(v, &[30]).unwrap())
            .iter()
            .sum::<f64>(),
        435.0
    );
}
