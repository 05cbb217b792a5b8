//! `ImageFolderDataset`: one sub-folder per class (`root/cat/1.png`, `root/dog/7.jpg`);
//! classes are numbered in sorted folder-name order unless `class_indexing` says
//! otherwise. Rows are `image` (the file's bytes as a 1-D UInt8 tensor, or with
//! `decode(true)` an RGB `[H, W, 3]` UInt8 image) and `label: [] Int32`.
//!
//! ```no_run
//! use spore_data::ImageFolderDataset;
//! use spore_data::transforms::vision::{Decode, Resize};
//! let ds = ImageFolderDataset::new("photos").extensions([".jpg", ".png"]).build().unwrap();
//! let ds = ds.map(["image"], vec![Decode.into(), Resize::new(64, 64).into()], 2).unwrap();
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use spore_core::{Error, Result, Tensor};

use super::{RandomAccess, Sampling, SourceNode, shard_options};
use crate::Dataset;
use crate::node::Row;
use crate::transforms::vision::decode_bytes;

/// Builder for an image-folder source (MindSpore's `ImageFolderDataset`).
#[derive(Clone, Debug)]
pub struct ImageFolderDataset {
    dir: PathBuf,
    extensions: Option<Vec<String>>,
    class_indexing: Option<HashMap<String, i32>>,
    decode: bool,
    sampling: Sampling,
}

shard_options!(ImageFolderDataset);

impl ImageFolderDataset {
    pub fn new(dataset_dir: impl Into<PathBuf>) -> ImageFolderDataset {
        ImageFolderDataset {
            dir: dataset_dir.into(),
            extensions: None,
            class_indexing: None,
            decode: false,
            sampling: Sampling::default(),
        }
    }

    /// Only files with these extensions (`".png"`, case-insensitive); default: every
    /// file that does not start with a dot.
    pub fn extensions<I, S>(mut self, extensions: I) -> ImageFolderDataset
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.extensions = Some(
            extensions
                .into_iter()
                .map(|e| e.into().trim_start_matches('.').to_lowercase())
                .collect(),
        );
        self
    }

    /// Explicit class numbers by folder name; folders not listed are ignored.
    pub fn class_indexing<I, S>(mut self, classes: I) -> ImageFolderDataset
    where
        I: IntoIterator<Item = (S, i32)>,
        S: Into<String>,
    {
        self.class_indexing = Some(classes.into_iter().map(|(k, v)| (k.into(), v)).collect());
        self
    }

    /// Decode PNG/JPEG into `[H, W, 3]` RGB while reading (default: raw bytes).
    pub fn decode(mut self, decode: bool) -> ImageFolderDataset {
        self.decode = decode;
        self
    }

    pub fn num_samples(mut self, n: usize) -> ImageFolderDataset {
        self.sampling.num_samples = Some(n);
        self
    }

    pub fn shuffle(mut self, shuffle: bool) -> ImageFolderDataset {
        self.sampling.shuffle = shuffle;
        self
    }

    /// Lists the class folders and their files (files are read during iteration).
    pub fn build(self) -> Result<Dataset> {
        self.sampling
            .check(&format!("ImageFolderDataset({})", self.dir.display()))?;
        let dir = &self.dir;
        if !dir.is_dir() {
            return Err(Error::io(dir, "image folder does not exist"));
        }
        let mut classes: Vec<(String, PathBuf)> = list(dir)?
            .into_iter()
            .filter(|p| p.is_dir())
            .filter_map(|p| Some((p.file_name()?.to_str()?.to_string(), p)))
            .filter(|(n, _)| !n.starts_with('.'))
            .collect();
        classes.sort();
        let indexing: Vec<(PathBuf, i32)> = match &self.class_indexing {
            None => classes
                .into_iter()
                .zip(0..)
                .map(|((_, p), i)| (p, i))
                .collect(),
            Some(map) => {
                let mut chosen = Vec::new();
                let mut names: Vec<&String> = map.keys().collect();
                names.sort();
                for name in names {
                    let Some((_, p)) = classes.iter().find(|(n, _)| n == name) else {
                        return Err(Error::io(
                            dir,
                            format!(
                                "class_indexing names '{name}' but there is no such sub-folder"
                            ),
                        ));
                    };
                    chosen.push((p.clone(), map[name]));
                }
                chosen
            }
        };
        let mut items = Vec::new();
        for (class_dir, label) in indexing {
            let mut files: Vec<PathBuf> = list(&class_dir)?
                .into_iter()
                .filter(|p| p.is_file() && self.wanted(p))
                .collect();
            files.sort();
            items.extend(files.into_iter().map(|f| (f, label)));
        }
        if items.is_empty() {
            return Err(Error::io(
                dir,
                "no image files found in the class sub-folders (expected root/<class>/<image>)",
            ));
        }
        let name = format!("ImageFolderDataset({})", dir.display());
        let columns = vec!["image".to_string(), "label".to_string()];
        Ok(Dataset::from_node(SourceNode::new(
            name,
            FolderSource {
                items,
                decode: self.decode,
            },
            columns,
            self.sampling,
        )))
    }

    fn wanted(&self, p: &Path) -> bool {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') {
            return false;
        }
        match &self.extensions {
            None => true,
            Some(exts) => p
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| exts.contains(&e.to_lowercase())),
        }
    }
}

fn list(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::io(dir, format!("cannot list: {e}")))?;
    entries
        .map(|e| {
            e.map(|e| e.path())
                .map_err(|e| Error::io(dir, format!("cannot list: {e}")))
        })
        .collect()
}

struct FolderSource {
    items: Vec<(PathBuf, i32)>,
    decode: bool,
}

impl RandomAccess for FolderSource {
    fn len(&self) -> usize {
        self.items.len()
    }
    fn row(&self, i: usize) -> Result<Row> {
        let (path, label) = &self.items[i];
        let bytes =
            std::fs::read(path).map_err(|e| Error::io(path, format!("cannot read: {e}")))?;
        let image = if self.decode {
            decode_bytes(&bytes).map_err(|e| Error::io(path, e))?
        } else {
            let n = bytes.len();
            Tensor::from_vec(bytes, &[n])?
        };
        Ok(vec![image, Tensor::scalar(*label)])
    }
}
