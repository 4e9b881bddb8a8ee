//! The FashionMNIST downloader against an HTTP server started on 127.0.0.1 by the test:
//! a good file, a bad checksum, a truncated body, a 404 then a good mirror, all mirrors
//! failing, and download = false.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};

use loaderlab::data::{
    DataError, FASHION_MNIST, FileSpec, IdxFamily, Mirrors, ensure_files, read_idx,
};
use md5::{Digest, Md5};

#[derive(Clone)]
enum Reply {
    Ok(Vec<u8>),
    /// Announce the full length, send only part, close.
    Truncated(Vec<u8>, usize),
    NotFound,
}

/// A tiny HTTP/1.1 server: one reply per path, each request logged.
struct Server {
    base: String,
    log: Arc<Mutex<Vec<String>>>,
}

fn serve(routes: HashMap<String, Reply>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&log);
    std::thread::spawn(move || {
        // Bounded: a test makes a handful of requests.
        for stream in listener.incoming().take(32) {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request = String::new();
            if reader.read_line(&mut request).is_err() {
                continue;
            }
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
            }
            let path = request.split_whitespace().nth(1).unwrap_or("").to_string();
            seen.lock().unwrap().push(path.clone());
            let reply = routes.get(&path).cloned().unwrap_or(Reply::NotFound);
            let _ = match reply {
                Reply::Ok(body) => stream
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .and_then(|_| stream.write_all(&body)),
                Reply::Truncated(body, sent) => stream
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .and_then(|_| stream.write_all(&body[..sent])),
                Reply::NotFound => stream.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                ),
            };
            let _ = stream.flush();
        }
    });
    Server { base, log }
}

fn gz_idx() -> Vec<u8> {
    let idx = loaderlab::data::write_idx(&loaderlab::data::IdxArray {
        dims: vec![2, 28, 28],
        data: (0..1568).map(|i| (i % 256) as u8).collect(),
    });
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&idx).unwrap();
    enc.finish().unwrap()
}

fn spec(body: &[u8]) -> FileSpec {
    let md5 = format!("{:x}", Md5::digest(body));
    FileSpec {
        name: "train-images-idx3-ubyte",
        md5: Box::leak(md5.into_boxed_str()),
    }
}

fn mirrors(bases: Vec<String>) -> Mirrors {
    Mirrors {
        bases,
        download: true,
        quiet: true,
    }
}

const FILE: &str = "/train-images-idx3-ubyte.gz";

/// FashionMNIST's files with no mirrors of its own, so nothing here reaches past 127.0.0.1.
const FAMILY: IdxFamily = IdxFamily {
    mirrors: &[],
    ..FASHION_MNIST
};

fn raw_dir(root: &Path) -> std::path::PathBuf {
    root.join("FashionMNIST").join("raw")
}

#[test]
fn good_file_is_downloaded_verified_and_readable() {
    let body = gz_idx();
    let server = serve(HashMap::from([(
        format!("/a{FILE}"),
        Reply::Ok(body.clone()),
    )]));
    let root = tempfile::tempdir().unwrap();
    let paths = ensure_files(
        root.path(),
        &FAMILY,
        &[spec(&body)],
        &mirrors(vec![format!("{}/a/", server.base)]),
    )
    .unwrap();
    assert_eq!(
        paths[0],
        raw_dir(root.path()).join("train-images-idx3-ubyte.gz")
    );
    assert_eq!(read_idx(&paths[0]).unwrap().dims, [2, 28, 28]);
    let leftovers: Vec<_> = std::fs::read_dir(raw_dir(root.path()))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "{leftovers:?}");
    // Present now: no second request.
    ensure_files(
        root.path(),
        &FAMILY,
        &[spec(&body)],
        &mirrors(vec![format!("{}/a/", server.base)]),
    )
    .unwrap();
    assert_eq!(server.log.lock().unwrap().len(), 1);
}

#[test]
fn bad_checksum_and_404_and_truncation_move_on_to_the_next_mirror() {
    let body = gz_idx();
    let mut corrupt = body.clone();
    corrupt[20] ^= 0xff;
    let server = serve(HashMap::from([
        (format!("/bad{FILE}"), Reply::Ok(corrupt)),
        (format!("/cut{FILE}"), Reply::Truncated(body.clone(), 10)),
        (format!("/good{FILE}"), Reply::Ok(body.clone())),
    ]));
    let root = tempfile::tempdir().unwrap();
    let bases = ["missing", "bad", "cut", "good"]
        .map(|m| format!("{}/{m}", server.base))
        .to_vec();
    let paths = ensure_files(root.path(), &FAMILY, &[spec(&body)], &mirrors(bases)).unwrap();
    assert_eq!(std::fs::read(&paths[0]).unwrap(), body);
    assert_eq!(server.log.lock().unwrap().len(), 4);
    assert!(
        !raw_dir(root.path())
            .join("train-images-idx3-ubyte.gz.part")
            .exists()
    );
}

#[test]
fn all_mirrors_failing_lists_what_was_tried() {
    let body = gz_idx();
    let mut corrupt = body.clone();
    corrupt[20] ^= 0xff;
    let server = serve(HashMap::from([
        (format!("/bad{FILE}"), Reply::Ok(corrupt)),
        (format!("/cut{FILE}"), Reply::Truncated(body.clone(), 10)),
    ]));
    let root = tempfile::tempdir().unwrap();
    let bases = ["missing", "bad", "cut"]
        .map(|m| format!("{}/{m}/", server.base))
        .to_vec();
    let err = ensure_files(root.path(), &FAMILY, &[spec(&body)], &mirrors(bases)).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, DataError::Download { .. }), "{message}");
    for needle in [
        "/missing/train-images-idx3-ubyte.gz: ",
        "404",
        "/bad/",
        "checksum mismatch",
        "/cut/",
        "truncated",
        "place",
        "MD5",
        "--set dataset.kind=synthetic",
    ] {
        assert!(
            message.contains(needle),
            "{needle:?} missing from:\n{message}"
        );
    }
    assert!(
        !raw_dir(root.path())
            .join("train-images-idx3-ubyte.gz")
            .exists(),
        "nothing half-written is left in place"
    );
    assert!(
        !raw_dir(root.path())
            .join("train-images-idx3-ubyte.gz.part")
            .exists()
    );
}

#[test]
fn download_false_never_downloads() {
    let body = gz_idx();
    let server = serve(HashMap::from([(
        format!("/a{FILE}"),
        Reply::Ok(body.clone()),
    )]));
    let root = tempfile::tempdir().unwrap();
    let m = Mirrors {
        bases: vec![format!("{}/a/", server.base)],
        download: false,
        quiet: true,
    };
    let err = ensure_files(root.path(), &FAMILY, &[spec(&body)], &m)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("missing and dataset.download = false"),
        "{err}"
    );
    assert!(server.log.lock().unwrap().is_empty());
}

#[test]
fn existing_file_with_bad_checksum_is_refused() {
    let body = gz_idx();
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(raw_dir(root.path())).unwrap();
    std::fs::write(
        raw_dir(root.path()).join("train-images-idx3-ubyte.gz"),
        &body[..body.len() - 3],
    )
    .unwrap();
    let err = ensure_files(root.path(), &FAMILY, &[spec(&body)], &mirrors(vec![]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("checksum mismatch") && err.contains("delete it"),
        "{err}"
    );
}

#[test]
fn uncompressed_torchvision_files_are_used_as_they_are() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(raw_dir(root.path())).unwrap();
    let idx = loaderlab::data::write_idx(&loaderlab::data::IdxArray {
        dims: vec![3],
        data: vec![1, 2, 3],
    });
    std::fs::write(raw_dir(root.path()).join("train-labels-idx1-ubyte"), idx).unwrap();
    let spec = FileSpec {
        name: "train-labels-idx1-ubyte",
        md5: "unused-for-raw-files",
    };
    let m = Mirrors {
        bases: vec![],
        download: false,
        quiet: true,
    };
    let paths = ensure_files(root.path(), &FAMILY, &[spec], &m).unwrap();
    assert_eq!(read_idx(&paths[0]).unwrap().data, [1, 2, 3]);
}

/// MNIST and CIFAR-10 go through the same downloader with their own names and checksums: a
/// mirror serving other bytes is rejected with the published MD5 in the message, and nothing
/// is left in place.
#[test]
fn mnist_and_cifar10_downloads_check_their_published_checksums() {
    use loaderlab::config::{DatasetKind, Settings};
    let body = gz_idx();
    let server = serve(HashMap::from([
        (format!("/m{FILE}"), Reply::Ok(body.clone())),
        ("/c/cifar-10-binary.tar.gz".to_string(), Reply::Ok(body)),
    ]));
    for (kind, mirror, md5, name) in [
        (
            DatasetKind::Mnist,
            "m",
            "f68b3c2dcbeaaa9fbdd348bbdeb94873",
            "train-images-idx3-ubyte.gz",
        ),
        (
            DatasetKind::Cifar10,
            "c",
            "c32a1d4ab5d03f1284b67883e8d87530",
            "cifar-10-binary.tar.gz",
        ),
    ] {
        let root = tempfile::tempdir().unwrap();
        let mut s = Settings::default();
        s.dataset.kind = kind;
        s.dataset.root = root.path().display().to_string();
        s.dataset.mirrors = vec![format!("{}/{mirror}/", server.base)];
        let err = loaderlab::data::open(&s.dataset, s.experiment.seed, true)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains(&format!("{}/{mirror}/{name}", server.base))
                && err.contains("checksum mismatch")
                && err.contains(md5),
            "{kind:?}: {err}"
        );
        let left: Vec<_> = walk(root.path());
        assert!(
            left.iter()
                .all(|p| !p.ends_with(".gz") && !p.ends_with(".part")),
            "{left:?}"
        );
    }
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p.display().to_string());
        }
    }
    out
}
