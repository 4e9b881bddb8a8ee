//! Fetching a published file: mirrors tried in order, a progress bar, the body streamed into
//! `<name>.part`, its MD5 checked, and only then renamed into place, so an interrupted or
//! corrupt download never looks like a complete file.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use md5::{Digest, Md5};

use super::DataError;

/// One published file.
#[derive(Debug, Clone, Copy)]
pub struct FileSpec {
    /// Name without `.gz`, e.g. `train-images-idx3-ubyte`.
    pub name: &'static str,
    /// MD5 of the `.gz` file as published.
    pub md5: &'static str,
}

/// Where and whether to download.
#[derive(Debug, Clone)]
pub struct Mirrors {
    /// Base URLs; empty means the dataset's own.
    pub bases: Vec<String>,
    pub download: bool,
    pub quiet: bool,
}

impl Mirrors {
    /// The configured bases, else `own`.
    pub fn bases_or(&self, own: &[&str]) -> Vec<String> {
        if self.bases.is_empty() {
            own.iter().map(|s| s.to_string()).collect()
        } else {
            self.bases.clone()
        }
    }
}

/// MD5 of a file, as lowercase hex.
pub(super) fn md5_hex(path: &Path) -> Result<String, DataError> {
    let mut file = std::fs::File::open(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut hasher = Md5::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(format!("{:x}", hasher.finalize()))
}

/// Download `<spec.name>.gz` from the first of `bases` that serves it with the right MD5, into
/// `dest`. `hint` says what to place by hand when every mirror fails.
pub(super) fn download(
    spec: &FileSpec,
    dest: &Path,
    bases: &[String],
    quiet: bool,
    hint: String,
) -> Result<(), DataError> {
    let file_name = format!("{}.gz", spec.name);
    let part = dest.with_extension("gz.part");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(15)))
        .timeout_recv_body(Some(Duration::from_secs(120)))
        .build()
        .into();
    let mut tried = Vec::new();
    for base in bases {
        let url = if base.ends_with('/') {
            format!("{base}{file_name}")
        } else {
            format!("{base}/{file_name}")
        };
        match fetch(&agent, &url, &part, quiet) {
            Ok(()) => {}
            Err(reason) => {
                let _ = std::fs::remove_file(&part);
                tried.push(format!("  {url}: {reason}"));
                continue;
            }
        }
        let found = md5_hex(&part)?;
        if found != spec.md5 {
            let _ = std::fs::remove_file(&part);
            tried.push(format!(
                "  {url}: checksum mismatch (MD5 {found}, expected {})",
                spec.md5
            ));
            continue;
        }
        std::fs::rename(&part, dest).map_err(|source| DataError::Io {
            path: dest.to_path_buf(),
            source,
        })?;
        return Ok(());
    }
    Err(DataError::Download {
        file: file_name,
        tried: if tried.is_empty() {
            "  (no mirrors configured in dataset.mirrors)".into()
        } else {
            tried.join("\n")
        },
        hint: format!(
            "To continue without network access, {hint}. {}",
            super::TRY_SYNTHETIC
        ),
    })
}

/// Stream one URL into `part`, with a progress bar on stderr.
fn fetch(agent: &ureq::Agent, url: &str, part: &Path, quiet: bool) -> Result<(), String> {
    let mut response = agent.get(url).call().map_err(|e| e.to_string())?;
    let total = response.body().content_length();
    let mut reader = response.body_mut().as_reader();
    let mut file =
        std::fs::File::create(part).map_err(|e| format!("cannot write {}: {e}", part.display()))?;
    let bar = if quiet {
        indicatif::ProgressBar::hidden()
    } else {
        let bar = indicatif::ProgressBar::new(total.unwrap_or(0));
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} {bar:30} {bytes}/{total_bytes} {bytes_per_sec}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message(format!("downloading {url}"));
        bar
    };
    let mut buf = vec![0u8; 1 << 16];
    let mut received: u64 = 0;
    loop {
        let n = reader.read(&mut buf).map_err(|e| match total {
            Some(total) => {
                format!("truncated: connection lost after {received} of {total} bytes ({e})")
            }
            None => format!("connection lost after {received} bytes: {e}"),
        })?;
        if n == 0 {
            break;
        }
        file.write_all(&buf[..n])
            .map_err(|e| format!("cannot write {}: {e}", part.display()))?;
        received += n as u64;
        bar.set_position(received);
    }
    bar.finish_and_clear();
    if let Some(total) = total.filter(|t| *t != received) {
        return Err(format!("truncated: received {received} of {total} bytes"));
    }
    file.sync_all()
        .map_err(|e| format!("cannot write {}: {e}", part.display()))?;
    Ok(())
}
