//! A learnable, class-structured synthetic dataset: each class is a fixed arrangement of bright
//! strokes; each sample shifts it by a few pixels, scales its brightness and adds texture, all
//! drawn from (seed, index), so it needs no download. Any size, 1 or 3 channels (a colour per
//! stroke). Up to [`PRERENDER_MAX_BYTES`] of images are rendered once at construction and then copied out, like a real dataset held in memory
//! (FashionMNIST's `image_into` is a copy); a loader benchmark on synthetic data then measures
//! the loader and the transforms, not the generator. Larger datasets render on every read.

use std::sync::Arc;

use super::{Kind, Storing};
use crate::data::{
    DataError, Dataset, DatasetSection, Encoding, ImageShape, Mirrors, StorageHints,
};
use crate::hash::splitmix;

/// Datasets up to this many bytes (250 000 FashionMNIST-sized images) are rendered once, at
/// construction.
pub const PRERENDER_MAX_BYTES: usize = 250_000 * 784;

/// The size the strokes were designed at; other sizes scale them.
const DESIGN_SIDE: usize = 28;

/// `dataset.kind = "synthetic"`: generated images of the declared size, raw or pre-encoded.
pub struct SyntheticKind;

pub static SYNTHETIC_KIND: SyntheticKind = SyntheticKind;

impl Kind for SyntheticKind {
    fn shape(&self, d: &DatasetSection) -> ImageShape {
        ImageShape::new(d.channels as usize, d.size[0] as usize, d.size[1] as usize)
    }
    fn len(&self, d: &DatasetSection) -> u64 {
        d.synthetic_size
    }
    fn storing(&self, d: &DatasetSection) -> Storing {
        Storing {
            encoded: d.encoding != Encoding::Raw,
            per_file: false,
        }
    }
    fn check(&self, d: &DatasetSection, bad: &mut dyn FnMut(&'static str, String)) {
        if !(1..=100).contains(&d.quality) {
            let found = d.quality;
            bad(
                "quality",
                format!("expected a JPEG quality from 1 to 100, found {found}"),
            );
        }
        if d.synthetic_size == 0 {
            bad(
                "synthetic_size",
                "expected at least 1 image, found 0".into(),
            );
        }
        if !(2..=256).contains(&d.synthetic_classes) {
            let found = d.synthetic_classes;
            bad(
                "synthetic_classes",
                format!("expected 2 to 256 classes, found {found}"),
            );
        }
        let [h, w] = d.size;
        if !(1..=8192).contains(&h) || !(1..=8192).contains(&w) {
            bad(
                "size",
                format!("expected [height, width], each 1 to 8192 pixels, found [{h}, {w}]"),
            );
        }
        if !matches!(d.channels, 1 | 3) {
            let found = d.channels;
            bad(
                "channels",
                format!("expected 1 (grey) or 3 (RGB), found {found}"),
            );
        }
    }
    fn open(
        &self,
        d: &DatasetSection,
        seed: u64,
        _mirrors: &Mirrors,
    ) -> Result<Arc<dyn Dataset>, DataError> {
        let (len, classes) = (d.synthetic_size as usize, d.synthetic_classes as usize);
        let images = Synthetic::with_shape(len, classes, self.shape(d), seed);
        Ok(match d.encoding {
            Encoding::Raw => Arc::new(images),
            Encoding::Jpeg => Arc::new(EncodedSynthetic::new(images, Some(d.quality as u8))),
            Encoding::Png => Arc::new(EncodedSynthetic::new(images, None)),
        })
    }
}

pub struct Synthetic {
    len: usize,
    classes: usize,
    seed: u64,
    shape: ImageShape,
    /// One template per class, planar.
    templates: Vec<Vec<u8>>,
    /// Noise in 0–31 that samples take their texture from.
    texture: Vec<u8>,
    /// Every image, rendered, when the dataset is small enough.
    rendered: Option<Vec<u8>>,
}

impl Synthetic {
    /// 28×28 grey images, FashionMNIST's shape.
    pub fn new(len: usize, classes: usize, seed: u64) -> Self {
        Self::with_shape(len, classes, ImageShape::GREY_28, seed)
    }

    /// Images of any shape; at 1×28×28 the same pixels as [`Synthetic::new`].
    pub fn with_shape(len: usize, classes: usize, shape: ImageShape, seed: u64) -> Self {
        let templates = (0..classes).map(|c| template(c, seed, shape)).collect();
        let texture = (0..(1usize << 16).max(2 * shape.len()) as u64)
            .map(|i| (splitmix(seed ^ 0x7465_7874 ^ i) & 31) as u8)
            .collect();
        let mut s = Synthetic {
            len,
            classes,
            seed,
            shape,
            templates,
            texture,
            rendered: None,
        };
        let bytes = len * shape.len();
        if bytes <= PRERENDER_MAX_BYTES {
            let mut all = crate::data::with_large_pages(bytes);
            all.resize(bytes, 0);
            for (i, img) in all.chunks_exact_mut(shape.len()).enumerate() {
                s.render(i, img);
            }
            s.rendered = Some(all);
        }
        s
    }

    fn pixels(&self, index: usize) -> Option<&[u8]> {
        let n = self.shape.len();
        self.rendered
            .as_ref()
            .map(|all| &all[index * n..(index + 1) * n])
    }
}

/// Class `c`'s template: three strokes (bars or boxes) placed by a hash of (seed, class), with
/// a level per channel (a colour when there are three).
fn template(class: usize, seed: u64, shape: ImageShape) -> Vec<u8> {
    let (w, hgt) = (shape.width, shape.height);
    let mut img = vec![0u8; shape.len()];
    let along_x = |v: usize| v * w / DESIGN_SIDE;
    let along_y = |v: usize| v * hgt / DESIGN_SIDE;
    let mut h = splitmix(seed ^ 0x5eed_c1a5 ^ (class as u64).wrapping_mul(0x1000_0001));
    for stroke in 0..3 {
        h = splitmix(h.wrapping_add(stroke));
        let x0 = along_x(4 + (h % 16) as usize);
        let y0 = along_y(4 + ((h >> 8) % 16) as usize);
        let len = 6 + ((h >> 16) % 10) as usize;
        let thick = 2 + ((h >> 24) % 2) as usize;
        let horizontal = (h >> 32) & 1 == 0;
        let (run_x, run_y) = if horizontal {
            (along_x(len), along_y(thick).max(1))
        } else {
            (along_x(thick).max(1), along_y(len))
        };
        for c in 0..shape.channels {
            let level = if c == 0 {
                140 + ((h >> 40) % 116) as u8
            } else {
                40 + (splitmix(h ^ c as u64) % 216) as u8
            };
            let plane = &mut img[c * shape.plane()..][..shape.plane()];
            for y in y0..(y0 + run_y).min(hgt) {
                for x in x0..(x0 + run_x).min(w) {
                    plane[y * w + x] = level;
                }
            }
        }
    }
    img
}

impl Dataset for Synthetic {
    fn len(&self) -> usize {
        self.len
    }

    fn label(&self, index: usize) -> u8 {
        (splitmix(self.seed ^ (index as u64).wrapping_mul(0x2545_f491_4f6c_dd1d))
            % self.classes as u64) as u8
    }

    fn shape(&self) -> ImageShape {
        self.shape
    }

    fn image_into(&self, index: usize, buf: &mut [u8]) {
        match self.pixels(index) {
            Some(p) => buf[..p.len()].copy_from_slice(p),
            None => self.render(index, buf),
        }
    }

    fn classes(&self) -> usize {
        self.classes
    }

    fn describe(&self) -> String {
        let shape = if self.shape == ImageShape::GREY_28 {
            String::new()
        } else {
            format!(" {}", self.shape)
        };
        format!(
            "synthetic{shape}, {} classes ({} images)",
            self.classes, self.len
        )
    }
    fn storage(&self) -> &dyn StorageHints {
        self
    }
}

impl StorageHints for Synthetic {
    fn prefetch(&self, index: usize) {
        if let Some(p) = self.pixels(index) {
            crate::data::prefetch_bytes(p);
        }
    }
}

impl Synthetic {
    /// Image `index`, drawn from (seed, index) alone.
    fn render(&self, index: usize, buf: &mut [u8]) {
        let ImageShape { width, height, .. } = self.shape;
        let plane = self.shape.plane();
        let class = self.label(index) as usize;
        let t = &self.templates[class];
        let h = splitmix(self.seed.rotate_left(17) ^ index as u64);
        // Shifts of up to ±2 pixels at 28 px, proportionally more on larger images.
        let reach = |side: usize| (2 * side / DESIGN_SIDE).max(2) as u64;
        let (mx, my) = (reach(width), reach(height));
        let dx = (h % (2 * mx + 1)) as isize - mx as isize;
        let dy = ((h >> 8) % (2 * my + 1)) as isize - my as isize;
        let gain = 160 + ((h >> 16) % 97) as u32; // brightness × gain / 256
        // Texture: a window into a fixed noise table, chosen by the sample (a load, not a draw).
        let n = self.shape.len();
        let start = (h >> 24) as usize % (self.texture.len() - n);
        let texture = &self.texture[start..start + n];
        for c in 0..self.shape.channels {
            let t = &t[c * plane..][..plane];
            for y in 0..height {
                let row = &mut buf[c * plane + y * width..][..width];
                let noise = &texture[c * plane + y * width..][..width];
                let sy = y as isize - dy;
                if !(0..height as isize).contains(&sy) {
                    row.copy_from_slice(noise);
                    continue;
                }
                let src = &t[sy as usize * width..][..width];
                for (x, (out, &n)) in row.iter_mut().zip(noise).enumerate() {
                    let sx = x as isize - dx;
                    let base = if (0..width as isize).contains(&sx) {
                        src[sx as usize] as u32
                    } else {
                        0
                    };
                    *out = ((base * gain) / 256 + n as u32).min(255) as u8;
                }
            }
        }
    }
}

/// The synthetic images pre-encoded in memory (JPEG at a quality, or PNG) and decoded on every
/// read, so that decoding costs what it costs on photographs, on a machine with none.
pub struct EncodedSynthetic {
    inner: Synthetic,
    encoded: Vec<Vec<u8>>,
    format: &'static str,
}

impl EncodedSynthetic {
    /// Encode every image of `inner` (in parallel; JPEG when `jpeg_quality` is set, else PNG).
    pub fn new(inner: Synthetic, jpeg_quality: Option<u8>) -> Self {
        use rayon::prelude::*;
        let shape = inner.shape;
        let encoded = (0..inner.len)
            .into_par_iter()
            .map_init(
                || vec![0u8; shape.len()],
                |pixels, i| {
                    inner.image_into(i, pixels);
                    crate::data::decode::encode(pixels, shape, jpeg_quality)
                },
            )
            .collect();
        let format = if jpeg_quality.is_some() {
            "JPEG"
        } else {
            "PNG"
        };
        EncodedSynthetic {
            inner,
            encoded,
            format,
        }
    }

    /// Mean encoded size in bytes.
    pub fn mean_bytes(&self) -> f64 {
        let total: usize = self.encoded.iter().map(Vec::len).sum();
        total as f64 / self.encoded.len().max(1) as f64
    }
}

impl Dataset for EncodedSynthetic {
    fn len(&self) -> usize {
        self.inner.len
    }
    fn label(&self, index: usize) -> u8 {
        self.inner.label(index)
    }
    fn shape(&self) -> ImageShape {
        self.inner.shape
    }
    fn image_into(&self, index: usize, buf: &mut [u8]) {
        let mut v = Vec::new();
        match self.read_image(index, &mut v) {
            Ok(_) => buf[..v.len()].copy_from_slice(&v),
            // Bytes this process encoded itself: a failure is a bug, not bad input.
            Err(e) => panic!("{e}"),
        }
    }
    fn read_image(
        &self,
        index: usize,
        buf: &mut Vec<u8>,
    ) -> Result<ImageShape, crate::data::DataError> {
        self.read_region(index, buf, &|_| None)
            .map(|read| read.shape)
    }
    fn read_region(
        &self,
        index: usize,
        buf: &mut Vec<u8>,
        region: crate::data::Region,
    ) -> Result<crate::data::Read, crate::data::DataError> {
        let mode = if self.inner.shape.channels == 1 {
            crate::data::ColorMode::L
        } else {
            crate::data::ColorMode::Rgb
        };
        crate::data::decode::decode_region(&self.encoded[index], mode, region, buf)
            .map_err(crate::data::DataError::Mismatch)
    }
    fn classes(&self) -> usize {
        self.inner.classes
    }
    fn describe(&self) -> String {
        format!(
            "{}, {}-encoded in memory ({} KB each on average), decoded per sample",
            self.inner.describe(),
            self.format,
            crate::format::sig(self.mean_bytes() / 1000.0)
        )
    }
    fn storage(&self) -> &dyn StorageHints {
        self
    }
}

impl StorageHints for EncodedSynthetic {
    fn decodes(&self) -> bool {
        true
    }
    fn stored_len(&self, index: usize) -> Option<u64> {
        Some(self.encoded[index].len() as u64)
    }
    fn encoded(&self, index: usize) -> Option<Vec<u8>> {
        Some(self.encoded[index].clone())
    }
    fn prefetch(&self, index: usize) {
        // The header and first scans; the decoder streams the rest.
        let bytes = &self.encoded[index];
        crate::data::prefetch_bytes(&bytes[..bytes.len().min(4096)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_structured_and_balanced() {
        let a = Synthetic::new(1000, 10, 3);
        let b = Synthetic::new(1000, 10, 3);
        let mut x = [0u8; 784];
        let mut y = [0u8; 784];
        for i in [0, 17, 999] {
            a.image_into(i, &mut x);
            b.image_into(i, &mut y);
            assert_eq!(x, y);
            assert_eq!(a.label(i), b.label(i));
            // The pre-rendered copy is the rendering.
            b.render(i, &mut y);
            assert_eq!(x, y);
        }
        let mut counts = [0usize; 10];
        for i in 0..1000 {
            counts[a.label(i) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 50), "{counts:?}");
        // Images sit closer to their own class's template than to the others'.
        let mut d_template = |i: usize, c: usize| {
            a.image_into(i, &mut x);
            x.iter()
                .zip(&a.templates[c])
                .map(|(p, q)| (*p as i64 - *q as i64).abs())
                .sum::<i64>()
        };
        let mut nearest_own = 0;
        for i in 0..200 {
            let own = a.label(i) as usize;
            let best = (0..10).min_by_key(|&c| d_template(i, c)).unwrap();
            nearest_own += (best == own) as usize;
        }
        // Chance would be 20 of 200; shifts and gains blur it, a CNN learns the rest.
        assert!(
            nearest_own > 100,
            "only {nearest_own} of 200 nearest their own template"
        );
    }
}
