//! torchvision's `ImageFolder`: `root/<class>/…/<image>`, classes = the sorted names of the
//! root's folders, label = the class's index, samples in torchvision's order (classes sorted,
//! each class folder walked with its sub-folders in sorted order, file names sorted), so a
//! sample index names the same image in both. Images are decoded per sample in the loader,
//! as torchvision does, unless `cache = "decoded"`.
//!
//! A root with no class folder, a class folder with no image, or a file torchvision would
//! take but this build cannot decode is an error at open time, listing what was found. A
//! corrupt image is found when it is read: `on_error = "fail"` stops the run naming the file
//! and the decoder's reason; `"skip"` serves the next readable image in its place (the same
//! one in every condition) and counts it.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Kind, Storing};
use crate::data::decode::{EXTENSIONS, UNSUPPORTED};
use crate::data::encoded::{EncodedImages, Members};
use crate::data::{CacheMode, ColorMode, DataError, Dataset, DatasetSection, Mirrors, OnError};

/// `dataset.kind = "image_folder"`: images of any size, listed when opened.
pub struct ImageFolderKind;

pub static IMAGE_FOLDER_KIND: ImageFolderKind = ImageFolderKind;

impl Kind for ImageFolderKind {
    fn storing(&self, d: &DatasetSection) -> Storing {
        Storing {
            encoded: true,
            per_file: d.cache == CacheMode::None,
        }
    }
    fn open(
        &self,
        d: &DatasetSection,
        _seed: u64,
        _mirrors: &Mirrors,
    ) -> Result<Arc<dyn Dataset>, DataError> {
        let root = Path::new(&d.root);
        if !d.samples.is_empty() {
            return Ok(Arc::new(ImageFolder::listed(
                root,
                Path::new(&d.samples),
                d.mode,
                d.cache,
                d.on_error,
            )?));
        }
        Ok(Arc::new(ImageFolder::open(
            root, d.mode, d.cache, d.on_error,
        )?))
    }
    fn pytorch_twin(&self, d: &DatasetSection) -> Option<serde_json::Value> {
        Some(serde_json::json!({
            "kind": "image_folder",
            "root": d.root,
            "mode": match d.mode {
                ColorMode::L => "L",
                ColorMode::Rgb => "RGB",
            },
        }))
    }
}

/// An image folder: its files and their labels.
pub type ImageFolder = EncodedImages<FolderFiles>;

/// The image files of a folder, in torchvision's order.
pub struct FolderFiles {
    root: PathBuf,
    classes: Vec<String>,
    samples: Vec<(PathBuf, u8)>,
    cache: CacheMode,
    /// Every file's bytes (`cache = "encoded"`).
    encoded: Option<Vec<Vec<u8>>>,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> DataError + '_ {
    move |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The lowercase extension of a file name.
fn extension(path: &Path) -> String {
    path.extension()
        .map(|e| e.to_string_lossy().to_lowercase())
        .unwrap_or_default()
}

/// Every file under `dir` in `os.walk` order as torchvision sorts it: folders by path, the
/// files of each folder by name.
fn walk(dir: &Path, out: &mut Vec<(PathBuf, PathBuf)>) -> Result<(), DataError> {
    // Each folder with its real path and the folder it was found in: a link back to a folder
    // on its own path would make the walk endless (os.walk(followlinks=True) recurses until
    // the path is too long). Two links to one folder elsewhere are walked twice, as os.walk
    // does.
    let mut folders: Vec<(PathBuf, PathBuf, Option<usize>)> = Vec::new();
    let real = |p: &Path| std::fs::canonicalize(p).map_err(io(p));
    folders.push((dir.to_path_buf(), real(dir)?, None));
    let mut i = 0;
    while i < folders.len() {
        let here = folders[i].0.clone();
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&here).map_err(io(&here))? {
            let entry = entry.map_err(io(&here))?;
            let path = entry.path();
            // Like os.walk(followlinks=True): a link to a folder is walked.
            if path.is_dir() {
                let target = real(&path)?;
                let mut up = Some(i);
                while let Some(a) = up {
                    if folders[a].1 == target {
                        return Err(DataError::Mismatch(format!(
                            "{}: a link loop: it leads back to {}, which contains it; remove \
                             the link so that the image folder is a tree",
                            path.display(),
                            folders[a].0.display()
                        )));
                    }
                    up = folders[a].2;
                }
                folders.push((path, target, Some(i)));
            } else {
                files.push(path);
            }
        }
        files.sort();
        out.extend(files.into_iter().map(|f| (here.clone(), f)));
        i += 1;
    }
    // sorted(os.walk(...)) orders by folder path as a string (Python compares code points,
    // as UTF-8 bytes compare); a stable sort keeps each folder's files in name order.
    out.sort_by(|a, b| {
        a.0.as_os_str()
            .as_encoded_bytes()
            .cmp(b.0.as_os_str().as_encoded_bytes())
    });
    Ok(())
}

/// The class folders under `root`, sorted (torchvision's class order), at least one and at
/// most 256.
fn class_folders(root: &Path) -> Result<Vec<String>, DataError> {
    let mut classes = Vec::new();
    let mut loose = 0usize;
    for entry in std::fs::read_dir(root).map_err(io(root))? {
        let entry = entry.map_err(io(root))?;
        if entry.path().is_dir() {
            classes.push(entry.file_name().to_string_lossy().into_owned());
        } else {
            loose += 1;
        }
    }
    classes.sort();
    if classes.is_empty() {
        return Err(DataError::Mismatch(format!(
            "{}: no class folders found ({loose} loose files); an image folder holds one \
             folder per class, e.g. {}/cat/001.jpg and {}/dog/001.jpg",
            root.display(),
            root.display(),
            root.display()
        )));
    }
    if classes.len() > 256 {
        return Err(DataError::Mismatch(format!(
            "{}: {} class folders; at most 256 classes are supported",
            root.display(),
            classes.len()
        )));
    }
    Ok(classes)
}

/// Every image of every class folder, labelled by the class's index, in torchvision's order;
/// a class without images, or files torchvision would take but this build cannot decode, are
/// refused by name.
fn list_samples(root: &Path, classes: &[String]) -> Result<Vec<(PathBuf, u8)>, DataError> {
    let mut samples = Vec::new();
    let mut empty = Vec::new();
    let mut undecodable = Vec::new();
    for (label, class) in classes.iter().enumerate() {
        let mut files = Vec::new();
        walk(&root.join(class), &mut files)?;
        let before = samples.len();
        for (_, f) in files {
            let ext = extension(&f);
            if EXTENSIONS.contains(&ext.as_str()) {
                samples.push((f, label as u8));
            } else if UNSUPPORTED.contains(&ext.as_str()) {
                undecodable.push(f);
            }
        }
        if samples.len() == before {
            empty.push(class.clone());
        }
    }
    if !undecodable.is_empty() {
        return Err(DataError::Mismatch(format!(
            "{}: {} files torchvision's ImageFolder would take but this build does not \
             decode (it reads .{}), e.g. {}; convert them or remove them, so that sample \
             indices stay torchvision's",
            root.display(),
            undecodable.len(),
            EXTENSIONS.join(" ."),
            undecodable[0].display()
        )));
    }
    if !empty.is_empty() {
        return Err(DataError::Mismatch(format!(
            "{}: no images (.{}) in the class folder{} {}; found {} classes: {}",
            root.display(),
            EXTENSIONS.join(" ."),
            if empty.len() == 1 { "" } else { "s" },
            empty.join(", "),
            classes.len(),
            classes.join(", ")
        )));
    }
    Ok(samples)
}

/// A samples list (`dataset.samples`): a torchvision folder dataset's own `classes` and
/// `samples`.
#[derive(serde::Deserialize)]
struct Listed {
    classes: Vec<String>,
    samples: Vec<(PathBuf, u64)>,
}

impl ImageFolder {
    /// The samples `list` names (`dataset.samples`), in its order, with its classes; paths
    /// relative to `root`. A missing file, a label past the classes or more than 256 classes
    /// is an error naming the list.
    pub fn listed(
        root: &Path,
        list: &Path,
        mode: ColorMode,
        cache: CacheMode,
        on_error: OnError,
    ) -> Result<Self, DataError> {
        let text = std::fs::read_to_string(list).map_err(io(list))?;
        let bad = |what: String| DataError::Mismatch(format!("{}: {what}", list.display()));
        let listed: Listed = serde_json::from_str(&text).map_err(|e| {
            bad(format!(
                "not a samples list ({{\"classes\": [...], \"samples\": [[path, label], ...]}}): {e}"
            ))
        })?;
        if listed.classes.is_empty() || listed.classes.len() > 256 {
            return Err(bad(format!(
                "{} classes; 1 to 256 are supported",
                listed.classes.len()
            )));
        }
        if listed.samples.is_empty() {
            return Err(bad("no samples".into()));
        }
        let mut samples = Vec::with_capacity(listed.samples.len());
        for (path, label) in listed.samples {
            let path = root.join(path);
            if label >= listed.classes.len() as u64 {
                return Err(bad(format!(
                    "{} has label {label}, past its {} classes",
                    path.display(),
                    listed.classes.len()
                )));
            }
            if !EXTENSIONS.contains(&extension(&path).as_str()) {
                return Err(bad(format!(
                    "{}: this build decodes .{} only",
                    path.display(),
                    EXTENSIONS.join(" .")
                )));
            }
            samples.push((path, label as u8));
        }
        let encoded = match cache {
            CacheMode::Encoded => Some(
                samples
                    .iter()
                    .map(|(p, _)| std::fs::read(p).map_err(io(p)))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            CacheMode::None | CacheMode::Decoded => None,
        };
        let files = FolderFiles {
            root: root.to_path_buf(),
            classes: listed.classes,
            samples,
            cache,
            encoded,
        };
        EncodedImages::new(files, mode, on_error, cache == CacheMode::Decoded)
    }

    pub fn open(
        root: &Path,
        mode: ColorMode,
        cache: CacheMode,
        on_error: OnError,
    ) -> Result<Self, DataError> {
        if !root.is_dir() {
            return Err(DataError::Mismatch(format!(
                "{} is not a folder: dataset.kind = \"image_folder\" reads root/<class>/<image> \
                 (torchvision's ImageFolder layout). {}",
                root.display(),
                crate::data::TRY_SYNTHETIC
            )));
        }
        let classes = class_folders(root)?;
        let samples = list_samples(root, &classes)?;
        // `cache = "encoded"`: every file read ahead of the runs.
        let encoded = match cache {
            CacheMode::Encoded => Some(
                samples
                    .iter()
                    .map(|(p, _)| std::fs::read(p).map_err(io(p)))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            CacheMode::None | CacheMode::Decoded => None,
        };
        let files = FolderFiles {
            root: root.to_path_buf(),
            classes,
            samples,
            cache,
            encoded,
        };
        EncodedImages::new(files, mode, on_error, cache == CacheMode::Decoded)
    }

    /// The class names, in label order.
    pub fn class_names(&self) -> &[String] {
        &self.members().classes
    }

    /// The file of sample `index`.
    pub fn path(&self, index: usize) -> &Path {
        &self.members().samples[index].0
    }
}

impl Members for FolderFiles {
    fn len(&self) -> usize {
        self.samples.len()
    }
    fn label(&self, index: usize) -> u8 {
        self.samples[index].1
    }
    fn classes(&self) -> usize {
        self.classes.len()
    }
    fn bytes(&self, index: usize) -> Result<Cow<'_, [u8]>, DataError> {
        match &self.encoded {
            Some(all) => Ok(Cow::Borrowed(&all[index])),
            None => {
                let path = &self.samples[index].0;
                Ok(Cow::Owned(std::fs::read(path).map_err(io(path))?))
            }
        }
    }
    fn undecodable(&self, index: usize, reason: String) -> DataError {
        let path = &self.samples[index].0;
        DataError::Mismatch(format!("cannot decode {}: {reason}", path.display()))
    }
    fn none_decodes(&self) -> DataError {
        DataError::Mismatch(format!("{}: no image decodes", self.root.display()))
    }
    fn describe(&self) -> String {
        let cache = match self.cache {
            CacheMode::None => "decoded per sample from files",
            CacheMode::Encoded => "files held in memory, decoded per sample",
            CacheMode::Decoded => "decoded once, pixels held in memory",
        };
        format!(
            "image folder {} ({} images, {} classes, {cache})",
            self.root.display(),
            self.samples.len(),
            self.classes.len()
        )
    }
    fn files(&self) -> Vec<PathBuf> {
        if self.cache == CacheMode::None {
            self.samples.iter().map(|(p, _)| p.clone()).collect()
        } else {
            Vec::new()
        }
    }
    fn stored_len(&self, index: usize) -> Option<u64> {
        match &self.encoded {
            Some(bytes) => Some(bytes[index].len() as u64),
            None => std::fs::metadata(&self.samples[index].0)
                .ok()
                .map(|m| m.len()),
        }
    }
}
