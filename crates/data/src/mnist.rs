//! MNIST from a folder of IDX files (`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`,
//! `t10k-...`), raw or with a `.gz` suffix, as MindSpore's `MnistDataset(path)` reads them.
//!
//! ```no_run
//! use spore_data::mnist::{Mnist, Usage};
//! let train = Mnist::load("data/mnist/train", Usage::Train).unwrap();
//! assert_eq!(train.image_shape(), [28, 28]);
//! ```

use std::path::{Path, PathBuf};

use spore_core::{Error, Result};

use crate::idx::read_idx;

/// Which split's files to look for: `train-*`, `t10k-*`, or (`All`, MindSpore's default)
/// every split present in the folder, test files first (MindSpore sorts the file names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    Train,
    Test,
    All,
}

/// Images (`[N, rows, cols]` u8, row-major) and labels (`[N]` u8).
#[derive(Clone, Debug)]
pub struct Mnist {
    pub images: Vec<u8>,
    pub labels: Vec<u8>,
    rows: usize,
    cols: usize,
}

/// The file `stem` or `stem.gz` in `dir`.
fn find(dir: &Path, stem: &str) -> Result<PathBuf> {
    for name in [stem.to_string(), format!("{stem}.gz")] {
        let p = dir.join(&name);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(Error::io(
        dir,
        format!("no {stem} (or {stem}.gz) in this folder"),
    ))
}

impl Mnist {
    pub fn load(dir: impl AsRef<Path>, usage: Usage) -> Result<Mnist> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(Error::io(dir, "MNIST folder does not exist"));
        }
        match usage {
            Usage::Train => Mnist::load_split(dir, "train"),
            Usage::Test => Mnist::load_split(dir, "t10k"),
            Usage::All => {
                let present: Vec<&str> = ["t10k", "train"]
                    .into_iter()
                    .filter(|p| find(dir, &format!("{p}-images-idx3-ubyte")).is_ok())
                    .collect();
                if present.is_empty() {
                    return Err(Error::io(
                        dir,
                        "no MNIST files in this folder (expected train-images-idx3-ubyte or t10k-images-idx3-ubyte, optionally .gz)",
                    ));
                }
                let mut all: Option<Mnist> = None;
                for p in present {
                    let part = Mnist::load_split(dir, p)?;
                    all = Some(match all {
                        None => part,
                        Some(mut a) => {
                            if a.image_shape() != part.image_shape() {
                                return Err(Error::io(
                                    dir,
                                    format!(
                                        "the splits have different image sizes: {:?} and {:?}",
                                        a.image_shape(),
                                        part.image_shape()
                                    ),
                                ));
                            }
                            a.images.extend(part.images);
                            a.labels.extend(part.labels);
                            a
                        }
                    });
                }
                all.ok_or_else(|| Error::io(dir, "no MNIST files in this folder"))
            }
        }
    }

    fn load_split(dir: &Path, prefix: &str) -> Result<Mnist> {
        let ipath = find(dir, &format!("{prefix}-images-idx3-ubyte"))?;
        let lpath = find(dir, &format!("{prefix}-labels-idx1-ubyte"))?;
        let images = read_idx(&ipath)?;
        let labels = read_idx(&lpath)?;
        if images.dims.len() != 3 {
            return Err(Error::io(
                &ipath,
                format!(
                    "expected 3 dimensions (N, rows, cols), found {:?}",
                    images.dims
                ),
            ));
        }
        if labels.dims.len() != 1 {
            return Err(Error::io(
                &lpath,
                format!("expected 1 dimension (N), found {:?}", labels.dims),
            ));
        }
        if images.dims[0] != labels.dims[0] {
            return Err(Error::io(
                &ipath,
                format!(
                    "{} images but {} labels in {}",
                    images.dims[0],
                    labels.dims[0],
                    lpath.display()
                ),
            ));
        }
        if let Some(&bad) = labels.data.iter().find(|&&l| l > 9) {
            return Err(Error::io(&lpath, format!("label {bad} is outside 0..=9")));
        }
        Ok(Mnist {
            rows: images.dims[1],
            cols: images.dims[2],
            images: images.data,
            labels: labels.data,
        })
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    pub fn image_shape(&self) -> [usize; 2] {
        [self.rows, self.cols]
    }

    /// The pixels of image `i`.
    pub fn image(&self, i: usize) -> &[u8] {
        &self.images[i * self.rows * self.cols..(i + 1) * self.rows * self.cols]
    }
}
