//! Downloading MNIST from its usual mirrors, as the tutorials' `download_dataset` helper
//! does, but safely: each file is streamed into `NAME.part`, its MD5 is checked against
//! the published checksum, and only then is it renamed to `NAME` (so an interrupted or
//! corrupted download never looks complete, and a rerun starts clean). A file already
//! present with the right checksum is not fetched again; a mirror that fails or serves
//! wrong bytes is followed by the next one.
//!
//! ```no_run
//! // Writes data/mnist-full/train/train-*.gz and data/mnist-full/test/t10k-*.gz, the
//! // layout `MnistDataset::new("data/mnist-full/train")` and the LeNet example read.
//! let files = spore_data::download::download_mnist("data/mnist-full").unwrap();
//! assert_eq!(files.len(), 4);
//! ```

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use md5::{Digest, Md5};
use spore_core::{Error, Result};

/// Where MNIST is served (torchvision's list: the S3 copy first, the original site second).
pub const MNIST_MIRRORS: [&str; 2] = [
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
];

/// The four original MNIST files and the MD5 of each `.gz` (as published by torchvision).
pub const MNIST_FILES: [(&str, &str); 4] = [
    (
        "train-images-idx3-ubyte.gz",
        "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    ),
    (
        "train-labels-idx1-ubyte.gz",
        "d53e105ee54ea40749a09fcbcd1e9432",
    ),
    (
        "t10k-images-idx3-ubyte.gz",
        "9fb629c4189551a2d022fa330f9573f3",
    ),
    (
        "t10k-labels-idx1-ubyte.gz",
        "ec29112dd5afa0611ce80d1b7f02629c",
    ),
];

/// Downloads MNIST into `root/train` and `root/test` from [`MNIST_MIRRORS`].
pub fn download_mnist(root: impl AsRef<Path>) -> Result<Vec<PathBuf>> {
    download_mnist_from(root, &MNIST_MIRRORS)
}

/// Downloads MNIST into `root/train` and `root/test`, trying `mirrors` (URL prefixes
/// ending in `/`) in order for each file.
pub fn download_mnist_from(root: impl AsRef<Path>, mirrors: &[&str]) -> Result<Vec<PathBuf>> {
    let root = root.as_ref();
    MNIST_FILES
        .iter()
        .map(|(name, md5)| {
            let split = if name.starts_with("train") {
                "train"
            } else {
                "test"
            };
            let urls: Vec<String> = mirrors.iter().map(|m| format!("{m}{name}")).collect();
            download_file(&urls, &root.join(split).join(name), md5)
        })
        .collect()
}

/// The lowercase hex MD5 of a file.
pub fn file_md5(path: &Path) -> Result<String> {
    let mut f = File::open(path).map_err(|e| Error::io(path, format!("cannot open: {e}")))?;
    let mut h = Md5::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| Error::io(path, format!("cannot read: {e}")))?;
        if n == 0 {
            return Ok(hex(&h.finalize()));
        }
        h.update(&buf[..n]);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Fetches `dest` from the first of `urls` that serves bytes with MD5 `md5`; returns
/// `dest`. Skips the network when `dest` already has that checksum.
pub fn download_file(urls: &[String], dest: &Path, md5: &str) -> Result<PathBuf> {
    let md5 = md5.to_ascii_lowercase();
    if dest.is_file() && file_md5(dest)? == md5 {
        return Ok(dest.to_path_buf());
    }
    if let Some(dir) = dest.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(dir, format!("cannot create folder: {e}")))?;
    }
    let mut part = dest.as_os_str().to_owned();
    part.push(".part");
    let part = PathBuf::from(part);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(20)))
        // A stalled transfer should fail rather than hang a training script forever.
        .timeout_global(Some(Duration::from_secs(600)))
        .build()
        .into();
    let mut failures = Vec::new();
    for url in urls {
        if url.starts_with("https://") && !cfg!(feature = "https") {
            failures.push(format!(
                "{url}: this build has no TLS (enable spore-data's `https` feature, or `spore`'s)"
            ));
            continue;
        }
        match fetch(&agent, url, &part) {
            Ok(got) if got == md5 => {
                std::fs::rename(&part, dest).map_err(|e| {
                    Error::io(
                        dest,
                        format!("cannot move {} into place: {e}", part.display()),
                    )
                })?;
                return Ok(dest.to_path_buf());
            }
            Ok(got) => failures.push(format!(
                "{url}: checksum mismatch (expected MD5 {md5}, got {got})"
            )),
            Err(e) => failures.push(format!("{url}: {e}")),
        }
        let _ = std::fs::remove_file(&part);
    }
    if urls.is_empty() {
        failures.push("no URLs given".into());
    }
    Err(Error::io(
        dest,
        format!("download failed: {}", failures.join("; ")),
    ))
}

/// Streams `url` into `part` (replacing any earlier partial file) and returns its MD5.
fn fetch(agent: &ureq::Agent, url: &str, part: &Path) -> std::result::Result<String, String> {
    let response = agent.get(url).call().map_err(|e| e.to_string())?;
    let mut body = response.into_body().into_reader();
    let file = File::create(part).map_err(|e| format!("cannot create {}: {e}", part.display()))?;
    let mut out = BufWriter::new(file);
    let mut h = Md5::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = body
            .read(&mut buf)
            .map_err(|e| format!("transfer interrupted: {e}"))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        out.write_all(&buf[..n])
            .map_err(|e| format!("cannot write {}: {e}", part.display()))?;
    }
    let file = out
        .into_inner()
        .map_err(|e| format!("cannot write {}: {e}", part.display()))?;
    // On disk before the rename, so a crash cannot leave a complete-looking empty file.
    file.sync_all()
        .map_err(|e| format!("cannot flush {}: {e}", part.display()))?;
    Ok(hex(&h.finalize()))
}
