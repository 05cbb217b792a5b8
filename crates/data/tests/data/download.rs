//! The download helper against a tiny HTTP server on 127.0.0.1 (this machine has no
//! internet): mirror fallback, checksum verification, temporary-file-then-rename.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use spore_data::download::{
    MNIST_FILES, MNIST_MIRRORS, download_file, download_mnist_from, file_md5,
};

use crate::temp_dir;

/// Serves `routes` (path, body; anything else is a 404) until `requests` requests have
/// been answered or 20 s have passed; returns the base URL.
fn serve(routes: Vec<(String, Vec<u8>)>, requests: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let base = format!("http://{}/", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut served = 0;
        while served < requests && Instant::now() < deadline {
            let Ok((mut stream, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            stream.set_nonblocking(false).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let text = String::from_utf8_lossy(&req);
            let path = text.split_whitespace().nth(1).unwrap_or("").to_string();
            let (status, body) = match routes.iter().find(|(p, _)| *p == path) {
                Some((_, b)) => ("200 OK", b.clone()),
                None => ("404 Not Found", b"missing".to_vec()),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
            served += 1;
        }
    });
    base
}

fn md5_of(bytes: &[u8], dir: &Path) -> String {
    let p = dir.join("md5-probe");
    std::fs::write(&p, bytes).unwrap();
    let h = file_md5(&p).unwrap();
    std::fs::remove_file(p).unwrap();
    h
}

#[test]
fn md5_known_answers_and_the_real_mnist_checksums() {
    let dir = temp_dir("md5");
    assert_eq!(md5_of(b"", &dir), "d41d8cd98f00b204e9800998ecf8427e");
    assert_eq!(md5_of(b"abc", &dir), "900150983cd24fb0d6963f7d28e17f72");
    // The published checksums of the four original files (torchvision's list).
    assert_eq!(
        MNIST_FILES[0],
        (
            "train-images-idx3-ubyte.gz",
            "f68b3c2dcbeaaa9fbdd348bbdeb94873"
        )
    );
    assert_eq!(
        MNIST_FILES[3],
        (
            "t10k-labels-idx1-ubyte.gz",
            "ec29112dd5afa0611ce80d1b7f02629c"
        )
    );
    assert!(MNIST_MIRRORS.iter().all(|m| m.ends_with('/')));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn download_falls_back_to_the_next_mirror_and_verifies_the_checksum() {
    let dir = temp_dir("download");
    let body: Vec<u8> = (0..200_000u32).map(|i| (i * 31 % 251) as u8).collect();
    let md5 = md5_of(&body, &dir);
    let good = serve(vec![("/files/data.bin".into(), body.clone())], 1);
    let empty = serve(vec![], 1);
    let dest = dir.join("sub").join("data.bin");
    // A stale partial file from an interrupted run is replaced.
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub").join("data.bin.part"), b"half a file").unwrap();
    let urls = vec![
        format!("{empty}files/data.bin"),
        format!("{good}files/data.bin"),
    ];
    let got = download_file(&urls, &dest, &md5).unwrap();
    assert_eq!(got, dest);
    assert_eq!(std::fs::read(&dest).unwrap(), body);
    assert!(!dir.join("sub").join("data.bin.part").exists());
    // Present with the right checksum: no network at all (the servers are gone).
    let dead = vec!["http://127.0.0.1:9/never".to_string()];
    assert_eq!(download_file(&dead, &dest, &md5).unwrap(), dest);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn download_rejects_bytes_with_the_wrong_checksum() {
    let dir = temp_dir("download-bad");
    let base = serve(vec![("/f.gz".into(), b"corrupted".to_vec())], 1);
    let dest = dir.join("f.gz");
    let want = "f68b3c2dcbeaaa9fbdd348bbdeb94873";
    let err = download_file(&[format!("{base}f.gz")], &dest, want)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("checksum mismatch") && err.contains(want) && err.contains("f.gz"),
        "{err}"
    );
    assert!(
        !dest.exists() && !dir.join("f.gz.part").exists(),
        "nothing half-done is left"
    );
    // A corrupted existing file is fetched again rather than trusted.
    std::fs::write(&dest, b"old junk").unwrap();
    let good = serve(vec![("/f.gz".into(), b"fresh".to_vec())], 1);
    let fresh_md5 = md5_of(b"fresh", &dir);
    download_file(&[format!("{good}f.gz")], &dest, &fresh_md5).unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), b"fresh");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn download_mnist_lays_files_out_for_the_dataset() {
    // Real names, but the server's bytes do not have the real checksums: every file must
    // be refused, and the error must say which file and why.
    let routes = MNIST_FILES
        .iter()
        .map(|(n, _)| (format!("/mnist/{n}"), b"not mnist".to_vec()))
        .collect();
    let base = serve(routes, 4);
    let dir = temp_dir("download-mnist");
    let mirror = format!("{base}mnist/");
    let err = download_mnist_from(&dir, &[mirror.as_str()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("train/train-images-idx3-ubyte.gz") && err.contains("checksum mismatch"),
        "{err}"
    );
    assert!(
        !dir.join("train")
            .join("train-images-idx3-ubyte.gz")
            .exists()
    );
    std::fs::remove_dir_all(&dir).ok();
}
