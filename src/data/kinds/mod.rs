//! The dataset kinds (`dataset.kind`): each in a file of its own, registered here once.
//!
//! A kind's file holds its reader (behind [`Dataset`]) and a [`Kind`], which answers every
//! question the rest of loaderlab asks about the kind: the images' shape and number from the
//! settings alone (validation), how they are stored (the storage checks), its own keys'
//! checks, how to open it, and how the pytorch engine's child reads the same files (torchvision's
//! class, a reader of the child's, or by default the very bytes the native reader holds).
//!
//! To add a kind: write `kinds/foo.rs` with the reader and a `static FOO: FooKind`, then
//! register it here: a `mod foo;` line and a `Foo => foo::FOO` line in `kinds!`. The word a
//! user writes is the variant's name in snake case.

mod cifar;
mod folder;
mod mnist;
mod section;
mod synthetic;
pub mod webdataset;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use cifar::{CIFAR_ARCHIVE, CIFAR_DIR, CIFAR_SHAPE, unpack as unpack_cifar};
pub use folder::ImageFolder;
pub use mnist::{FASHION_MNIST, IdxFamily, MNIST, ensure_files};
pub use section::{
    CacheMode, ColorMode, DatasetSection, Encoding, OnError, PageCache, Split, StorageSection,
};
pub use synthetic::{EncodedSynthetic, Synthetic};

use super::{DataError, Dataset, ImageShape, Mirrors};

/// What every dataset kind answers, from its `[dataset]` section.
pub trait Kind: Sync {
    /// The shape of every image, known from the settings alone. By default images of any
    /// size, decoded to `dataset.mode`: its channels, height and width 0 until an op fixes
    /// them.
    fn shape(&self, d: &DatasetSection) -> ImageShape {
        crate::data::varying_shape(d.mode)
    }
    /// The number of images, known from the settings alone. By default `u64::MAX`: only
    /// opening tells (the loader then checks that a batch fits).
    fn len(&self, _d: &DatasetSection) -> u64 {
        u64::MAX
    }
    /// How the images are stored, which decides where the storage keys apply.
    fn storing(&self, _d: &DatasetSection) -> Storing {
        Storing::default()
    }
    /// Whether missing files are fetched from `dataset.mirrors`.
    fn downloads(&self) -> bool {
        false
    }
    /// Problems with the kind's own keys: (the key under `[dataset]`, the message).
    fn check(&self, _d: &DatasetSection, _bad: &mut dyn FnMut(&'static str, String)) {}
    /// The dataset, opened (downloaded first where the settings allow); `seed` is the
    /// experiment's, for kinds that generate their images.
    fn open(
        &self,
        d: &DatasetSection,
        seed: u64,
        mirrors: &Mirrors,
    ) -> Result<Arc<dyn Dataset>, DataError>;
    /// How the pytorch engine's child reads the same files as this kind's reader: torchvision's
    /// own class where it has one, or a reader of the child's (`{"kind": …, …}`, read by
    /// `dataset_of` in the child's `datasets.py`); `None`: the child reads the bytes the native
    /// reader holds, one image after another.
    fn pytorch_twin(&self, _d: &DatasetSection) -> Option<serde_json::Value> {
        None
    }
}

/// How a kind stores its images.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Storing {
    /// Each image is an encoded file (JPEG, PNG) decoded per sample.
    pub encoded: bool,
    /// Each sample reads its file from disk (not held in memory once opened).
    pub per_file: bool,
}

/// The kinds: the enum serde reads `dataset.kind` into, its list, and each variant's [`Kind`].
macro_rules! kinds {
    ($($(#[$doc:meta])* $variant:ident => $kind:expr),+ $(,)?) => {
        /// `dataset.kind`: which reader. The word is the variant's name in snake case.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum DatasetKind {
            $($(#[$doc])* $variant),+
        }

        impl DatasetKind {
            /// Every kind, in the order the words are listed.
            pub const ALL: &'static [DatasetKind] = &[$(DatasetKind::$variant),+];

            /// What the kind answers.
            pub fn spec(self) -> &'static dyn Kind {
                match self {
                    $(DatasetKind::$variant => &$kind),+
                }
            }
        }
    };
}

kinds! {
    FashionMnist => mnist::FASHION_MNIST_KIND,
    Mnist => mnist::MNIST_KIND,
    Cifar10 => cifar::CIFAR10_KIND,
    /// torchvision's `ImageFolder` layout: `root/<class>/<image>`.
    ImageFolder => folder::IMAGE_FOLDER_KIND,
    Synthetic => synthetic::SYNTHETIC_KIND,
    /// WebDataset tar shards: `key.jpg|jpeg|png` + `key.cls` members (`shards`).
    Webdataset => webdataset::WEBDATASET_KIND,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a kind says from the settings alone is what its reader gives once opened.
    #[test]
    fn a_kinds_settings_facts_match_the_opened_dataset() {
        let quiet = Mirrors {
            bases: Vec::new(),
            download: false,
            quiet: true,
        };
        for (encoding, channels, size) in [
            (crate::data::Encoding::Raw, 1, [28, 28]),
            (crate::data::Encoding::Png, 3, [17, 40]),
        ] {
            let d = DatasetSection {
                kind: DatasetKind::Synthetic,
                synthetic_size: 37,
                channels,
                size,
                encoding,
                ..DatasetSection::default()
            };
            let kind = d.kind.spec();
            let opened = kind.open(&d, 7, &quiet).unwrap();
            assert_eq!(kind.shape(&d), opened.shape());
            assert_eq!(kind.len(&d), opened.len() as u64);
            assert_eq!(kind.storing(&d).encoded, opened.storage().decodes());
        }
    }

    /// Every registered kind is a word serde reads back to itself.
    #[test]
    fn every_kind_is_its_word() {
        for &kind in DatasetKind::ALL {
            let word = serde_json::to_value(kind).unwrap();
            let back: DatasetKind = serde_json::from_value(word.clone()).unwrap();
            assert_eq!(back, kind, "{word}");
        }
    }
}
