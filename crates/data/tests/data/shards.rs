//! Sharding (`num_shards`/`shard_id`, `DistributedSampler`): the shards of an epoch are
//! disjoint and together are the dataset, for every shard count, shuffled or not, in
//! every epoch, with or without a pipeline seed.

use spore_core::Tensor;
use spore_data::{Dataset, DistributedSampler, MnistDataset, NumpySlicesDataset};

use crate::bundled;

fn numbered(n: i32) -> NumpySlicesDataset {
    let x = Tensor::from_vec((0..n).collect(), &[n as usize]).unwrap();
    NumpySlicesDataset::new(vec![("x", x)]).unwrap()
}

/// Each epoch's first-column values (`epochs` epochs through one iterator; an epoch
/// ends with one `None`).
fn epochs(ds: &Dataset, epochs: usize) -> Vec<Vec<i64>> {
    let mut it = ds.create_tuple_iterator(epochs);
    (0..epochs)
        .map(|_| {
            (&mut it)
                .map(|r| r.unwrap()[0].item().unwrap() as i64)
                .collect()
        })
        .collect()
}

#[test]
fn shards_partition_every_epoch() {
    for k in [1, 2, 3, 4, 6] {
        for shuffle in [false, true] {
            let shards: Vec<Vec<Vec<i64>>> = (0..k)
                .map(|i| {
                    let ds = numbered(24)
                        .shuffle(shuffle)
                        .num_shards(k)
                        .shard_id(i)
                        .build()
                        .unwrap();
                    assert_eq!(ds.get_dataset_size().unwrap(), 24 / k);
                    epochs(&ds, 2)
                })
                .collect();
            for e in 0..2 {
                let mut all: Vec<i64> = shards.iter().flat_map(|s| s[e].clone()).collect();
                all.sort();
                assert_eq!(
                    all,
                    (0..24).collect::<Vec<_>>(),
                    "k={k} shuffle={shuffle} epoch {e}"
                );
            }
            if shuffle && k < 24 {
                assert_ne!(
                    shards[0][0], shards[0][1],
                    "k={k}: each epoch has a new order"
                );
            }
        }
    }
}

#[test]
fn unseeded_shards_agree_across_builds() {
    // Without a pipeline seed each rank (here: each build) must still draw the same
    // permutation, or the ranks' shards would overlap.
    let a = epochs(&numbered(20).num_shards(2).shard_id(0).build().unwrap(), 1);
    let b = epochs(&numbered(20).num_shards(2).shard_id(0).build().unwrap(), 1);
    assert_eq!(a, b);
    let c = epochs(
        &numbered(20)
            .sampler(DistributedSampler::new(2, 1).seed(5))
            .build()
            .unwrap(),
        1,
    );
    let mut all: Vec<i64> = a[0].iter().chain(&c[0]).copied().collect();
    all.sort();
    assert_ne!(
        all,
        (0..20).collect::<Vec<_>>(),
        "different seeds give different permutations"
    );
}

#[test]
fn uneven_shards_are_padded_to_equal_length() {
    let sizes: Vec<usize> = (0..4)
        .map(|i| {
            numbered(10)
                .num_shards(4)
                .shard_id(i)
                .build()
                .unwrap()
                .get_dataset_size()
                .unwrap()
        })
        .collect();
    assert_eq!(sizes, vec![3; 4]);
    let sampler = DistributedSampler::new(4, 3).shuffle(false).num_samples(2);
    let ds = numbered(10).sampler(sampler).build().unwrap();
    assert_eq!(epochs(&ds, 1), vec![vec![3, 7]]);
}

#[test]
fn mnist_shards_cover_the_digits_once() {
    let labels = |i| {
        let ds = MnistDataset::new(bundled("test"))
            .num_shards(2)
            .shard_id(i)
            .build()
            .unwrap();
        ds.create_tuple_iterator(1).count()
    };
    let total = MnistDataset::new(bundled("test"))
        .build()
        .unwrap()
        .get_dataset_size()
        .unwrap();
    assert_eq!(labels(0) + labels(1), total);
}

#[test]
fn a_pipeline_knows_whether_it_reads_a_shard() {
    let plain = numbered(8).build().unwrap().batch(2, false).unwrap();
    assert!(!plain.is_sharded());
    let shard = numbered(8).num_shards(2).shard_id(1).build().unwrap();
    let piped = shard
        .shuffle(4)
        .unwrap()
        .batch(2, false)
        .unwrap()
        .repeat(2)
        .unwrap();
    assert!(piped.is_sharded());
}

#[test]
fn bad_shard_options_name_the_dataset() {
    let e = numbered(4).num_shards(2).build().unwrap_err().to_string();
    assert!(
        e.contains("NumpySlicesDataset") && e.contains("requires shard_id"),
        "{e}"
    );
    let e = MnistDataset::new(bundled("test"))
        .num_shards(2)
        .shard_id(5)
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("MnistDataset") && e.contains("shard_id 5 is out of range"),
        "{e}"
    );
}
