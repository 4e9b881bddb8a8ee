//! Images of one shape held in memory with their labels: what a format of fixed-size records
//! (IDX files, CIFAR-10's binary batches) is read into when opened. An image read is one copy.

use crate::data::{Dataset, ImageShape, StorageHints};

pub struct InMemory {
    /// Every image, planar, one after another.
    images: Vec<u8>,
    labels: Vec<u8>,
    shape: ImageShape,
    classes: usize,
    /// What the images are, e.g. "FashionMNIST train"; `describe` adds their number.
    name: String,
}

impl InMemory {
    /// `images` holds `labels.len()` images of `shape`, back to back.
    pub fn new(
        images: Vec<u8>,
        labels: Vec<u8>,
        shape: ImageShape,
        classes: usize,
        name: String,
    ) -> InMemory {
        assert_eq!(
            images.len(),
            labels.len() * shape.len(),
            "{name}: the images are not one per label"
        );
        InMemory {
            images,
            labels,
            shape,
            classes,
            name,
        }
    }

    fn image(&self, index: usize) -> &[u8] {
        let n = self.shape.len();
        &self.images[index * n..(index + 1) * n]
    }
}

impl Dataset for InMemory {
    fn len(&self) -> usize {
        self.labels.len()
    }
    fn label(&self, index: usize) -> u8 {
        self.labels[index]
    }
    fn shape(&self) -> ImageShape {
        self.shape
    }
    fn image_into(&self, index: usize, buf: &mut [u8]) {
        let image = self.image(index);
        buf[..image.len()].copy_from_slice(image);
    }
    fn classes(&self) -> usize {
        self.classes
    }
    fn describe(&self) -> String {
        format!("{} ({} images)", self.name, self.len())
    }
    fn storage(&self) -> &dyn StorageHints {
        self
    }
}

impl StorageHints for InMemory {
    fn prefetch(&self, index: usize) {
        crate::data::prefetch_bytes(self.image(index));
    }
}
