//! WebDataset tar shards (`dataset.kind = "webdataset"`): each sample is the members of one
//! shard that share a key — `key.jpg` (or `.jpeg`, `.png`) and `key.cls` (the class index as
//! text). Shards are named in `dataset.shards`, each a path or a brace pattern
//! (`train-{000000..000009}.tar`), relative to `dataset.root`.
//!
//! Opening indexes every shard once (where each image's bytes lie, every label); reads are
//! positioned reads of those bytes, decoded like an image folder's (region decoding included).
//! An epoch visits the shards in a seeded order, sample by sample in archive order, through a
//! seeded shuffle buffer of `dataset.shuffle_buffer` samples — the order is computed from
//! (seed, epoch) alone, so every worker count sees the same batches.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Kind, Storing};
use crate::data::encoded::{EncodedImages, Members};
use crate::data::{ColorMode, DataError, Dataset, DatasetSection, Mirrors, OnError};

/// One sample: where its image lies and its label.
struct Member {
    shard: u32,
    offset: u64,
    len: u64,
    label: u8,
    key: String,
}

/// `dataset.kind = "webdataset"`: the tar shards of `dataset.shards`, images of any size.
pub struct WebDatasetKind;

pub static WEBDATASET_KIND: WebDatasetKind = WebDatasetKind;

impl Kind for WebDatasetKind {
    fn storing(&self, _d: &DatasetSection) -> Storing {
        Storing {
            encoded: true,
            per_file: true,
        }
    }
    fn check(&self, d: &DatasetSection, bad: &mut dyn FnMut(&'static str, String)) {
        if d.shards.is_empty() {
            bad(
                "shards",
                "kind = \"webdataset\" reads the tar shards listed here (paths or brace \
                 patterns such as \"train-{000000..000009}.tar\", relative to dataset.root)"
                    .to_string(),
            );
        }
    }
    /// The child's reader of the same shards: an IterableDataset split by worker, with the
    /// shards' order and a shuffle buffer drawn per epoch, as the `webdataset` library reads.
    fn pytorch_twin(&self, d: &DatasetSection) -> Option<serde_json::Value> {
        let shards = shard_paths(Path::new(&d.root), &d.shards).ok()?;
        let absolute: Vec<PathBuf> = shards
            .iter()
            .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
            .collect();
        Some(serde_json::json!({
            "kind": "webdataset",
            "shards": absolute,
            "mode": match d.mode {
                ColorMode::L => "L",
                ColorMode::Rgb => "RGB",
            },
            "shuffle_buffer": d.shuffle_buffer,
        }))
    }
    fn open(
        &self,
        d: &DatasetSection,
        _seed: u64,
        _mirrors: &Mirrors,
    ) -> Result<Arc<dyn Dataset>, DataError> {
        Ok(Arc::new(WebDataset::open(
            Path::new(&d.root),
            &d.shards,
            d.mode,
            d.on_error,
            d.shuffle_buffer as usize,
        )?))
    }
}

/// WebDataset tar shards: their members and labels.
pub type WebDataset = EncodedImages<Shards>;

/// The samples of a list of tar shards, each shard open for positioned reads.
pub struct Shards {
    shards: Vec<PathBuf>,
    files: Vec<File>,
    samples: Vec<Member>,
    /// The samples of each shard, as a range of `samples`.
    ranges: Vec<std::ops::Range<usize>>,
    classes: usize,
    shuffle_buffer: usize,
}

fn bad(path: &Path, message: String) -> DataError {
    DataError::Mismatch(format!("{}: {message}", path.display()))
}

/// `a{000..003}b` → a000b, a001b, a002b, a003b (one brace group; the width of its first
/// bound is kept); anything else is itself.
pub fn expand(pattern: &str) -> Result<Vec<String>, String> {
    let (Some(open), Some(close)) = (pattern.find('{'), pattern.find('}')) else {
        return Ok(vec![pattern.to_string()]);
    };
    let inner = pattern
        .get(open + 1..close)
        .ok_or_else(|| format!("{pattern:?}: a brace pattern is {{first..last}}"))?;
    let (a, b) = inner
        .split_once("..")
        .ok_or_else(|| format!("{pattern:?}: a brace pattern is {{first..last}}"))?;
    let (first, last): (u64, u64) = match (a.parse(), b.parse()) {
        (Ok(x), Ok(y)) if x <= y && y - x < 1_000_000 => (x, y),
        _ => {
            return Err(format!(
                "{pattern:?}: {{{inner}}} is not a range of numbers"
            ));
        }
    };
    let width = a.len();
    Ok((first..=last)
        .map(|n| format!("{}{n:0width$}{}", &pattern[..open], &pattern[close + 1..]))
        .collect())
}

/// The shards `patterns` name, each expanded and taken relative to `root`.
fn shard_paths(root: &Path, patterns: &[String]) -> Result<Vec<PathBuf>, String> {
    let mut shards = Vec::new();
    for p in patterns {
        for s in expand(p)? {
            shards.push(root.join(s));
        }
    }
    Ok(shards)
}

impl WebDataset {
    pub fn open(
        root: &Path,
        patterns: &[String],
        mode: ColorMode,
        on_error: OnError,
        shuffle_buffer: usize,
    ) -> Result<WebDataset, DataError> {
        let shards = shard_paths(root, patterns).map_err(|m| bad(root, m))?;
        let mut files = Vec::new();
        let mut samples = Vec::new();
        let mut ranges = Vec::new();
        for (k, shard) in shards.iter().enumerate() {
            let start = samples.len();
            index(shard, k as u32, &mut samples)?;
            ranges.push(start..samples.len());
            files.push(File::open(shard).map_err(|source| DataError::Io {
                path: shard.clone(),
                source,
            })?);
        }
        if samples.is_empty() {
            return Err(bad(root, "the shards hold no sample".into()));
        }
        let classes = samples
            .iter()
            .map(|m| m.label as usize + 1)
            .max()
            .unwrap_or(1);
        let shards = Shards {
            shards,
            files,
            samples,
            ranges,
            classes,
            shuffle_buffer,
        };
        EncodedImages::new(shards, mode, on_error, false)
    }
}

/// Index one shard: every sample's image position and label, in archive order.
fn index(shard: &Path, k: u32, out: &mut Vec<Member>) -> Result<(), DataError> {
    let file = File::open(shard).map_err(|source| DataError::Io {
        path: shard.to_path_buf(),
        source,
    })?;
    let malformed = |e: std::io::Error| bad(shard, format!("not a readable tar archive: {e}"));
    let mut archive = tar::Archive::new(file);
    // key → (image offset and length, label), and keys in order of first appearance.
    type Parts = (Option<(u64, u64)>, Option<u8>);
    let mut found: HashMap<String, Parts> = HashMap::new();
    let mut order = Vec::new();
    for entry in archive.entries().map_err(malformed)? {
        let mut entry = entry.map_err(malformed)?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry.path().map_err(malformed)?.into_owned();
        if path.is_absolute()
            || path
                .components()
                .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)))
        {
            return Err(bad(
                shard,
                format!("member {} escapes the archive", path.display()),
            ));
        }
        let name = path.to_string_lossy().to_string();
        // WebDataset's key: the path up to the first dot of the file name.
        let base = name.rfind('/').map_or(0, |i| i + 1);
        let Some(dot) = name[base..].find('.').map(|d| base + d) else {
            continue;
        };
        let (key, ext) = (name[..dot].to_string(), name[dot + 1..].to_lowercase());
        let slot = found.entry(key.clone()).or_insert_with(|| {
            order.push(key.clone());
            (None, None)
        });
        match ext.as_str() {
            "jpg" | "jpeg" | "png" => {
                slot.0 = Some((
                    entry.raw_file_position(),
                    entry.header().size().map_err(malformed)?,
                ));
            }
            "cls" => {
                let mut text = String::new();
                entry.read_to_string(&mut text).map_err(malformed)?;
                let label: u8 = text.trim().parse().map_err(|_| {
                    bad(
                        shard,
                        format!(
                            "{name}: expected a class index from 0 to 255, found {:?}",
                            text.trim()
                        ),
                    )
                })?;
                slot.1 = Some(label);
            }
            _ => {}
        }
    }
    for key in order {
        match found.remove(&key) {
            Some((Some((offset, len)), Some(label))) => out.push(Member {
                shard: k,
                offset,
                len,
                label,
                key,
            }),
            Some((Some(_), None)) => {
                return Err(bad(
                    shard,
                    format!("sample {key} has an image but no .cls label"),
                ));
            }
            // A key with no image (metadata only) is not a sample.
            _ => {}
        }
    }
    Ok(())
}

impl Members for Shards {
    fn len(&self) -> usize {
        self.samples.len()
    }
    fn label(&self, index: usize) -> u8 {
        self.samples[index].label
    }
    fn classes(&self) -> usize {
        self.classes
    }
    fn bytes(&self, index: usize) -> Result<Cow<'_, [u8]>, DataError> {
        let m = &self.samples[index];
        let mut buf = vec![0u8; m.len as usize];
        self.files[m.shard as usize]
            .read_exact_at(&mut buf, m.offset)
            .map_err(|source| DataError::Io {
                path: self.shards[m.shard as usize].clone(),
                source,
            })?;
        Ok(Cow::Owned(buf))
    }
    fn undecodable(&self, index: usize, reason: String) -> DataError {
        let m = &self.samples[index];
        bad(
            &self.shards[m.shard as usize],
            format!("sample {}: {reason}", m.key),
        )
    }
    fn none_decodes(&self) -> DataError {
        DataError::Mismatch("no sample of the shards decodes".into())
    }
    fn describe(&self) -> String {
        format!(
            "WebDataset, {} shards ({} samples, {} classes, shuffle buffer {})",
            self.shards.len(),
            self.samples.len(),
            self.classes,
            self.shuffle_buffer
        )
    }
    fn files(&self) -> Vec<PathBuf> {
        self.shards.clone()
    }
    fn stored_len(&self, index: usize) -> Option<u64> {
        Some(self.samples[index].len)
    }
    fn storage_unit(&self, index: usize) -> Option<u32> {
        Some(self.samples[index].shard)
    }
    fn epoch_order(&self, shuffle: bool, seed: u64, epoch: u64, order: &mut Vec<u32>) -> bool {
        order.clear();
        let mut rng = ChaCha8Rng::seed_from_u64(crate::hash::splitmix(
            seed ^ 0x7765_6264_6174_6173 ^ crate::hash::splitmix(epoch),
        ));
        let mut shards: Vec<usize> = (0..self.ranges.len()).collect();
        if shuffle {
            shards.shuffle(&mut rng);
        }
        let stream = shards.into_iter().flat_map(|s| self.ranges[s].clone());
        if !shuffle || self.shuffle_buffer <= 1 {
            order.extend(stream.map(|i| i as u32));
            return true;
        }
        // A shuffle buffer: fill it, then each new sample takes the place of a random one,
        // which goes out; at the end the rest leaves in random order.
        let mut buffer: Vec<u32> = Vec::with_capacity(self.shuffle_buffer);
        for i in stream {
            if buffer.len() < self.shuffle_buffer {
                buffer.push(i as u32);
                continue;
            }
            let k = rng.random_range(0..buffer.len());
            order.push(std::mem::replace(&mut buffer[k], i as u32));
        }
        buffer.shuffle(&mut rng);
        order.extend(buffer);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brace_patterns_expand_with_their_width() {
        assert_eq!(
            expand("s-{008..011}.tar").unwrap(),
            ["s-008.tar", "s-009.tar", "s-010.tar", "s-011.tar"]
        );
        assert_eq!(expand("one.tar").unwrap(), ["one.tar"]);
        assert!(expand("s-{a..b}.tar").is_err());
        assert!(expand("s-{3..1}.tar").is_err());
    }
}
