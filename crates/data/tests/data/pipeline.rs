//! Pipeline operations: seed 001's LeNet pipeline against a reference computation,
//! parallel map against one worker, seeded shuffles, counts, columns, iterators, prefetch.

use std::collections::HashMap;
use std::time::Duration;

use spore_core::{DType, Tensor};
use spore_data::mnist::{Mnist, Usage};
use spore_data::prelude::*;
use spore_data::vision::resize_bilinear_u8;

use crate::{bundled, f64s, fnv, range_ds, rows, scalars, seeded};

/// Seed 001's `create_dataset`: cast labels, resize to 32x32, rescale twice, HWC2CHW,
/// shuffle(10000), batch(32, drop_remainder), repeat(1).
fn lenet_pipeline(split: &str, workers: usize, shuffle: bool) -> Dataset {
    let ds = MnistDataset::new(bundled(split))
        .shuffle(shuffle)
        .build()
        .unwrap();
    let ds = ds
        .map(["label"], vec![TypeCast::new(DType::I32).into()], workers)
        .unwrap()
        .map(
            ["image"],
            vec![Resize::new(32, 32).interpolation(Inter::Linear).into()],
            workers,
        )
        .unwrap()
        .map(
            ["image"],
            vec![Rescale::new(1.0 / 255.0, 0.0).into()],
            workers,
        )
        .unwrap()
        .map(
            ["image"],
            vec![Rescale::new(1.0 / 0.3081, -0.1307 / 0.3081).into()],
            workers,
        )
        .unwrap()
        .map(["image"], vec![HWC2CHW.into()], workers)
        .unwrap();
    let ds = if shuffle {
        ds.shuffle(10_000).unwrap()
    } else {
        ds
    };
    ds.batch(32, true).unwrap().repeat(1).unwrap()
}

/// The bundled training digits resized to 32x32 by the kernel, checked against values
/// recorded from OpenCV 4.5.5's `cv2.resize(img, (32, 32), interpolation=INTER_LINEAR)`
/// with IPP off (as MindSpore builds it).
fn resized_train() -> (Vec<Vec<u8>>, Vec<u8>) {
    let mnist = Mnist::load(bundled("train"), Usage::Train).unwrap();
    let resized: Vec<Vec<u8>> = (0..mnist.len())
        .map(|i| resize_bilinear_u8(mnist.image(i), 28, 28, 32, 32))
        .collect();
    let expect = [
        (32659u64, 0x752b_fe8b_3b46_766e_u64),
        (36568, 0xb68e_c117_36db_337b),
        (55654, 0x7b8e_5936_b16f_dc67),
    ];
    for (i, &(sum, hash)) in expect.iter().enumerate() {
        let img = &resized[i];
        assert_eq!(img.iter().map(|&p| p as u64).sum::<u64>(), sum, "image {i}");
        assert_eq!(fnv(img.iter().copied()), hash, "image {i}");
    }
    let all: Vec<u8> = resized.iter().flatten().copied().collect();
    assert_eq!(all.iter().map(|&p| p as u64).sum::<u64>(), 273_599_688);
    assert_eq!(fnv(all[..200_000].iter().copied()), 0xa861_45ba_b058_821b);
    (resized, mnist.labels)
}

/// The u8 image a normalised output came from (inverts the two rescales).
fn fingerprint(pixels: &[f32]) -> u64 {
    fnv(pixels
        .iter()
        .map(|&x| ((x as f64 * 0.3081 + 0.1307) * 255.0).round() as u8))
}

#[test]
fn seed_pipeline_yields_lenet_batches_with_reference_values() {
    seeded();
    let (resized, labels) = resized_train();

    // In order (no shuffles): every value is the transforms' formula applied to the
    // OpenCV-exact resize, in f64.
    let ds = lenet_pipeline("train", 2, false);
    assert_eq!(ds.get_dataset_size().unwrap(), 8000 / 32);
    assert_eq!(ds.get_col_names(), vec!["image", "label"]);
    let mut n = 0;
    for (b, row) in ds.create_dict_iterator(1).enumerate() {
        let row = row.unwrap();
        let (image, label) = (&row["image"], &row["label"]);
        assert_eq!(
            (image.shape(), image.dtype()),
            (&[32, 1, 32, 32][..], DType::F32)
        );
        assert_eq!((label.shape(), label.dtype()), (&[32][..], DType::I32));
        let got = image.to_vec::<f32>().unwrap();
        let got_labels = label.to_vec::<i32>().unwrap();
        for k in 0..32 {
            let i = b * 32 + k;
            assert_eq!(got_labels[k], labels[i] as i32);
            for (p, &x) in resized[i].iter().zip(&got[k * 1024..(k + 1) * 1024]) {
                let want = (*p as f64 / 255.0 - 0.1307) / 0.3081;
                assert!(
                    (x as f64 - want).abs() < 1e-5,
                    "batch {b} row {k}: {x} vs {want}"
                );
            }
        }
        n += 1;
    }
    assert_eq!(n, 250);
    // Bit for bit what MindSpore 2.10 gives for the first 16 images of this pipeline
    // without shuffles (FNV-1a of the little-endian f32 bytes, recorded from
    // `create_tuple_iterator(output_numpy=True)`).
    let first = ds.create_tuple_iterator(1).next().unwrap().unwrap();
    let bits = first[0].to_vec::<f32>().unwrap()[..16 * 1024]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect::<Vec<u8>>();
    assert_eq!(
        fnv(bits),
        0x59eb_c54b_a062_a2a4,
        "differs from MindSpore's output"
    );

    // Shuffled (source shuffle + shuffle(10000)): a permutation of the same rows, each
    // image still with its own label.
    let mut expected: HashMap<u64, Vec<u8>> = HashMap::new();
    for (img, &l) in resized.iter().zip(&labels) {
        expected
            .entry(fnv(img.iter().copied()))
            .or_default()
            .push(l);
    }
    let mut seen: HashMap<u64, Vec<u8>> = HashMap::new();
    let ds = lenet_pipeline("train", 2, true);
    let mut batches = 0;
    for row in ds.create_tuple_iterator(1) {
        let row = row.unwrap();
        let img = row[0].to_vec::<f32>().unwrap();
        let lab = row[1].to_vec::<i32>().unwrap();
        for k in 0..32 {
            let key = fingerprint(&img[k * 1024..(k + 1) * 1024]);
            seen.entry(key).or_default().push(lab[k] as u8);
        }
        batches += 1;
    }
    assert_eq!(batches, 250);
    for v in expected.values_mut().chain(seen.values_mut()) {
        v.sort();
    }
    assert_eq!(seen, expected);
}

#[test]
fn seed_pipeline_is_reproducible_and_worker_count_does_not_change_it() {
    seeded();
    let one = rows(&lenet_pipeline("test", 1, true));
    let two = rows(&lenet_pipeline("test", 2, true));
    let again = rows(&lenet_pipeline("test", 2, true));
    assert_eq!(one.len(), 1000 / 32);
    assert!(one == two, "1 and 2 workers differ");
    assert!(two == again, "two runs with one seed differ");
    // ... and the shuffle did something: labels are not in file order.
    let in_order = rows(&lenet_pipeline("test", 1, false));
    assert!(one != in_order);
}

#[test]
fn parallel_map_with_random_ops_matches_one_worker() {
    seeded();
    // Work that takes longer for some rows, so that workers finish out of order.
    let uneven = Transform::from_fn("Uneven", |x: Vec<Tensor>| {
        let sum: f64 = f64s(&x[0]).iter().sum();
        std::thread::sleep(Duration::from_micros((sum as u64 % 7) * 40));
        Ok(x)
    });
    let build = |workers: usize| {
        MnistDataset::new(bundled("test"))
            .num_samples(300)
            .build()
            .unwrap()
            .map(
                ["image"],
                vec![
                    RandomCrop::new(28, 28).padding(4).into(),
                    uneven.clone(),
                    RandomHorizontalFlip::new(0.5).into(),
                ],
                workers,
            )
            .unwrap()
    };
    let single = rows(&build(1));
    let parallel = rows(&build(3));
    assert_eq!(single.len(), 300);
    assert!(single == parallel, "3 workers changed the output");
    // The random ops really act: most crops are shifted or flipped.
    let plain = rows(
        &MnistDataset::new(bundled("test"))
            .num_samples(300)
            .build()
            .unwrap(),
    );
    let changed = single
        .iter()
        .zip(&plain)
        .filter(|(a, b)| a[0] != b[0])
        .count();
    assert!(changed > 200, "only {changed} of 300 images changed");
    // Two random maps in a row: fused (same worker count) or not, the rows are the same.
    let chain = |w1: usize, w2: usize| {
        MnistDataset::new(bundled("test"))
            .num_samples(100)
            .build()
            .unwrap()
            .map(["image"], vec![RandomCrop::new(24, 24).into()], w1)
            .unwrap()
            .map(["image"], vec![RandomHorizontalFlip::new(0.5).into()], w2)
            .unwrap()
    };
    let fused = rows(&chain(2, 2));
    assert!(fused == rows(&chain(1, 2)) && fused == rows(&chain(2, 1)));
    assert!(fused == rows(&chain(1, 1)));
    // A new epoch draws new crops.
    let ds = build(2);
    let mut it = ds.create_tuple_iterator(2);
    let e0: Vec<Vec<f64>> = (&mut it).map(|r| f64s(&r.unwrap()[0])).collect();
    let e1: Vec<Vec<f64>> = (&mut it).map(|r| f64s(&r.unwrap()[0])).collect();
    assert_eq!((e0.len(), e1.len()), (300, 300));
    assert!(e0 != e1);
}

#[test]
fn map_errors_name_the_columns_the_op_and_the_row() {
    let ds = range_ds(5);
    let bad = ds
        .map(["label"], vec![HWC2CHW.into()], 1)
        .unwrap_err()
        .to_string();
    assert!(
        bad.contains("no column named 'label'") && bad.contains("[\"x\"]"),
        "{bad}"
    );
    assert!(ds.map(["x"], vec![], 1).is_err());
    assert!(ds.map(["x"], vec![HWC2CHW.into()], 0).is_err());
    // A 1-D value is not an image: the error comes at iteration, naming map, op and row.
    for workers in [1, 2] {
        let ds = range_ds(5)
            .batch(5, false)
            .unwrap()
            .map(
                ["x"],
                vec![Rescale::new(2.0, 0.0).into(), Resize::new(2, 2).into()],
                workers,
            )
            .unwrap();
        let mut it = ds.create_tuple_iterator(1);
        let err = it.next().unwrap().unwrap_err().to_string();
        assert!(
            err.contains("map(input_columns=[\"x\"]")
                && err.contains("Resize")
                && err.contains("row 0")
                && err.contains("[H, W]"),
            "{err}"
        );
        assert!(it.next().is_none() && it.is_finished());
    }
    // A panicking user op becomes an error too.
    let boom = Transform::from_fn("Boom", |_| panic!("kaboom"));
    let ds = range_ds(3).map(["x"], vec![boom], 2).unwrap();
    let err = ds
        .create_tuple_iterator(1)
        .next()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(err.contains("kaboom"), "{err}");
}

#[test]
fn map_output_columns_follow_mindspore_rules() {
    let split = Transform::from_fn("Split", |x: Vec<Tensor>| {
        let v = f64s(&x[0])[0];
        Ok(vec![
            Tensor::scalar(v as i32),
            Tensor::scalar((v * 10.0) as i32),
        ])
    });
    let ds = range_ds(3)
        .zip(&[range_ds(3).rename(["x"], ["z"]).unwrap()])
        .unwrap();
    // Two outputs from one input: the input column goes, the outputs are appended.
    let m = ds
        .map_with(
            Map::new(["x"], vec![split])
                .output_columns(["a", "b"])
                .num_parallel_workers(2),
        )
        .unwrap();
    assert_eq!(m.get_col_names(), vec!["z", "a", "b"]);
    assert_eq!(rows(&m)[2], vec![vec![2.0], vec![2.0], vec![20.0]]);
    // Same count: renamed in place.
    let r = ds
        .map_with(Map::new(["x"], vec![TypeCast::new(DType::F32).into()]).output_columns(["y"]))
        .unwrap();
    assert_eq!(r.get_col_names(), vec!["y", "z"]);
    // Outputs clashing with a kept column are refused.
    let clash = ds.map_with(Map::new(["x"], vec![HWC2CHW.into()]).output_columns(["z"]));
    assert!(clash.unwrap_err().to_string().contains("appears twice"));
}

#[test]
fn shuffle_is_seeded_reshuffles_each_epoch_and_respects_the_buffer() {
    seeded();
    let a = scalars(&range_ds(100).shuffle(100).unwrap());
    let b = scalars(&range_ds(100).shuffle(100).unwrap());
    assert_eq!(a, b, "same seed, same order");
    let mut sorted = a.clone();
    sorted.sort_by(f64::total_cmp);
    assert_eq!(sorted, (0..100).map(f64::from).collect::<Vec<_>>());
    assert_ne!(a, sorted);
    // Each epoch (and each repetition) is shuffled anew.
    let ds = range_ds(100).shuffle(100).unwrap();
    let mut it = ds.create_tuple_iterator(2);
    let e0: Vec<f64> = (&mut it).map(|r| r.unwrap()[0].item().unwrap()).collect();
    let e1: Vec<f64> = (&mut it).map(|r| r.unwrap()[0].item().unwrap()).collect();
    assert_eq!(e0, a);
    assert_ne!(e0, e1);
    let rep = scalars(&range_ds(50).shuffle(50).unwrap().repeat(2).unwrap());
    assert_ne!(rep[..50], rep[50..]);
    // A small buffer only mixes nearby rows: a row cannot come out before it has been
    // read, so the value at position j is at most j + 3 with a buffer of 4.
    let local = scalars(&range_ds(200).shuffle(4).unwrap());
    assert!(local.iter().enumerate().all(|(j, &v)| v <= j as f64 + 3.0));
    assert_ne!(local, (0..200).map(f64::from).collect::<Vec<_>>());
    assert!(range_ds(3).shuffle(1).is_err());
}

#[test]
fn repeat_batch_take_skip_counts_are_exact() {
    let sizes = |ds: &Dataset| -> Vec<usize> {
        ds.create_tuple_iterator(1)
            .map(|r| r.unwrap()[0].shape()[0])
            .collect()
    };
    let ds = range_ds(10);
    let keep = ds.batch(3, false).unwrap();
    assert_eq!(sizes(&keep), vec![3, 3, 3, 1]);
    assert_eq!(keep.get_dataset_size().unwrap(), 4);
    let drop = ds.batch(3, true).unwrap();
    assert_eq!(sizes(&drop), vec![3, 3, 3]);
    assert_eq!(drop.get_dataset_size().unwrap(), 3);
    // repeat after batch repeats batches; batch after repeat batches across the seam.
    let rb = drop.repeat(2).unwrap();
    assert_eq!((sizes(&rb).len(), rb.get_dataset_size().unwrap()), (6, 6));
    let br = ds.repeat(2).unwrap().batch(3, false).unwrap();
    assert_eq!(sizes(&br), vec![3, 3, 3, 3, 3, 3, 2]);
    assert_eq!(br.get_dataset_size().unwrap(), 7);
    assert_eq!(
        rows(&br)[3][0],
        vec![9.0, 0.0, 1.0],
        "the batch that spans two repetitions"
    );
    // take / skip, sizes known without running.
    let ts = ds.skip(7).unwrap().take(5).unwrap();
    assert_eq!(scalars(&ts), vec![7.0, 8.0, 9.0]);
    assert_eq!(ts.get_dataset_size().unwrap(), 3);
    assert_eq!(ds.skip(20).unwrap().get_dataset_size().unwrap(), 0);
    // An endless repeat has no size, but take bounds it.
    let forever = ds.repeat_forever();
    assert!(
        forever
            .get_dataset_size()
            .unwrap_err()
            .to_string()
            .contains("forever")
    );
    let t = forever.take(25).unwrap();
    assert_eq!((scalars(&t).len(), t.get_dataset_size().unwrap()), (25, 25));
    assert!(ds.batch(0, false).is_err() && ds.repeat(0).is_err() && ds.take(0).is_err());
}

#[test]
fn iterators_deliver_epochs_one_after_another() {
    let ds = range_ds(4).batch(2, false).unwrap();
    let mut it = ds.create_dict_iterator(3);
    assert_eq!(it.columns(), &["x".to_string()]);
    for epoch in 0..3 {
        assert_eq!(it.epoch(), epoch);
        let rows: Vec<_> = (&mut it).map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(f64s(&rows[1]["x"]), vec![2.0, 3.0]);
    }
    assert!(it.is_finished() && it.next().is_none());
    assert!(ds.create_tuple_iterator(0).next().is_none());
}

#[test]
fn column_operations_project_rename_zip_concat() {
    let xy = range_ds(4)
        .zip(&[range_ds(3).rename(["x"], ["y"]).unwrap()])
        .unwrap();
    assert_eq!(xy.get_col_names(), vec!["x", "y"]);
    assert_eq!(xy.get_dataset_size().unwrap(), 3);
    assert_eq!(rows(&xy).len(), 3);
    let yx = xy.project(["y", "x"]).unwrap();
    assert_eq!(yx.get_col_names(), vec!["y", "x"]);
    assert_eq!(rows(&yx)[2], vec![vec![2.0], vec![2.0]]);
    let both = range_ds(2).concat(&[range_ds(3)]).unwrap();
    assert_eq!(scalars(&both), vec![0.0, 1.0, 0.0, 1.0, 2.0]);
    assert_eq!(both.get_dataset_size().unwrap(), 5);
    // Errors say what is wrong.
    let e = range_ds(2).zip(&[range_ds(2)]).unwrap_err().to_string();
    assert!(e.contains("'x' appears twice"), "{e}");
    let e = range_ds(2)
        .concat(std::slice::from_ref(&xy))
        .unwrap_err()
        .to_string();
    assert!(e.contains("same columns"), "{e}");
    let e = xy.project(["w"]).unwrap_err().to_string();
    assert!(
        e.contains("no column named 'w'") && e.contains("[\"x\", \"y\"]"),
        "{e}"
    );
    assert!(xy.rename(["x"], ["y"]).is_err());
    assert!(xy.rename(["x", "y"], ["a"]).is_err());
}

#[test]
fn batch_refuses_ragged_rows_naming_the_column() {
    let g = GeneratorDataset::from_fn(["img", "n"], 3, |i| {
        vec![
            Tensor::zeros(&[i + 1], DType::F32).unwrap(),
            Tensor::scalar(i as i32),
        ]
    })
    .shuffle(false)
    .build()
    .unwrap();
    let err = g
        .batch(2, false)
        .unwrap()
        .create_tuple_iterator(1)
        .next()
        .unwrap();
    let err = err.unwrap_err().to_string();
    assert!(
        err.contains("column 'img'") && err.contains("[2]") && err.contains("[1]"),
        "{err}"
    );
}

#[test]
fn prefetch_queue_feeds_another_thread_in_order() {
    seeded();
    let ds = range_ds(40).shuffle(40).unwrap().batch(4, false).unwrap();
    let direct: Vec<Vec<f64>> = {
        let mut it = ds.create_tuple_iterator(2);
        let mut v: Vec<Vec<f64>> = (&mut it).map(|r| f64s(&r.unwrap()[0])).collect();
        v.extend((&mut it).map(|r| f64s(&r.unwrap()[0])));
        v
    };
    let mut queue = ds.prefetch(2, Some(3)).unwrap();
    assert_eq!(queue.columns(), &["x".to_string()]);
    std::thread::sleep(Duration::from_millis(50));
    assert!(queue.ready() <= 3, "the queue is bounded");
    let consumer = std::thread::spawn(move || {
        let mut got: Vec<Vec<f64>> = Vec::new();
        let mut per_epoch = Vec::new();
        for _ in 0..2 {
            let before = got.len();
            got.extend((&mut queue).map(|r| f64s(&r.unwrap()[0])));
            per_epoch.push(got.len() - before);
        }
        assert!(queue.next().is_none());
        (got, per_epoch)
    });
    let (got, per_epoch) = consumer.join().unwrap();
    assert_eq!(per_epoch, vec![10, 10]);
    assert_eq!(got, direct);
    // Dropping a queue mid-way stops its thread without hanging.
    let mut q = range_ds(1000)
        .repeat_forever()
        .prefetch(1, Some(2))
        .unwrap();
    assert!(q.next().is_some());
    drop(q);
}

#[test]
fn dataset_size_of_a_generator_is_counted_by_running_it() {
    let g = GeneratorDataset::from_iter(["x"], || (0..7).map(|i| Tensor::scalar(i as f32)))
        .build()
        .unwrap();
    assert_eq!(g.get_dataset_size().unwrap(), 7);
    assert_eq!(g.batch(2, true).unwrap().get_dataset_size().unwrap(), 3);
    assert_eq!(
        g.zip(&[range_ds(3).rename(["x"], ["y"]).unwrap()])
            .unwrap()
            .get_dataset_size()
            .unwrap(),
        3
    );
    assert_eq!(
        g.concat(std::slice::from_ref(&g))
            .unwrap()
            .get_dataset_size()
            .unwrap(),
        14
    );
}
