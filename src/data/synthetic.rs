//! A learnable, class-structured synthetic dataset: each class is a fixed arrangement of bright
//! strokes; each sample shifts it by a few pixels, scales its brightness and adds texture, all
//! drawn from (seed, index), so it needs no download. Up to [`PRERENDER_MAX`] images are
//! rendered once at construction and then copied out, like a real dataset held in memory
//! (FashionMNIST's `image_into` is a copy); a loader benchmark on synthetic data then measures
//! the loader and the transforms, not the generator. Larger datasets render on every read.

use super::{Dataset, IMAGE_PIXELS, IMAGE_SIDE};
use crate::hash::splitmix;

/// Datasets up to this many images (≈ 196 MB) are rendered once, at construction.
pub const PRERENDER_MAX: usize = 250_000;

pub struct Synthetic {
    len: usize,
    classes: usize,
    seed: u64,
    /// One 28×28 template per class.
    templates: Vec<[u8; IMAGE_PIXELS]>,
    /// Noise in 0–31 that samples take their texture from.
    texture: Vec<u8>,
    /// Every image, rendered, when the dataset is small enough.
    rendered: Option<Vec<u8>>,
}

impl Synthetic {
    pub fn new(len: usize, classes: usize, seed: u64) -> Self {
        let templates = (0..classes).map(|c| template(c, seed)).collect();
        let texture = (0..1u64 << 16)
            .map(|i| (splitmix(seed ^ 0x7465_7874 ^ i) & 31) as u8)
            .collect();
        let mut s = Synthetic {
            len,
            classes,
            seed,
            templates,
            texture,
            rendered: None,
        };
        if len <= PRERENDER_MAX {
            let mut all = super::with_large_pages(len * IMAGE_PIXELS);
            all.resize(len * IMAGE_PIXELS, 0);
            for (i, img) in all.chunks_exact_mut(IMAGE_PIXELS).enumerate() {
                s.render(i, img);
            }
            s.rendered = Some(all);
        }
        s
    }
}

/// Class `c`'s template: three strokes (bars or boxes) placed by a hash of (seed, class).
fn template(class: usize, seed: u64) -> [u8; IMAGE_PIXELS] {
    let mut img = [0u8; IMAGE_PIXELS];
    let mut h = splitmix(seed ^ 0x5eed_c1a5 ^ (class as u64).wrapping_mul(0x1000_0001));
    for stroke in 0..3 {
        h = splitmix(h.wrapping_add(stroke));
        let x0 = 4 + (h % 16) as usize;
        let y0 = 4 + ((h >> 8) % 16) as usize;
        let len = 6 + ((h >> 16) % 10) as usize;
        let thick = 2 + ((h >> 24) % 2) as usize;
        let horizontal = (h >> 32) & 1 == 0;
        let level = 140 + ((h >> 40) % 116) as u8;
        for a in 0..len {
            for t in 0..thick {
                let (x, y) = if horizontal {
                    (x0 + a, y0 + t)
                } else {
                    (x0 + t, y0 + a)
                };
                if x < IMAGE_SIDE && y < IMAGE_SIDE {
                    img[y * IMAGE_SIDE + x] = level;
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

    fn image_into(&self, index: usize, buf: &mut [u8]) {
        match &self.rendered {
            Some(all) => buf[..IMAGE_PIXELS]
                .copy_from_slice(&all[index * IMAGE_PIXELS..(index + 1) * IMAGE_PIXELS]),
            None => self.render(index, buf),
        }
    }

    fn prefetch(&self, index: usize) {
        if let Some(all) = &self.rendered {
            super::prefetch_bytes(&all[index * IMAGE_PIXELS..(index + 1) * IMAGE_PIXELS]);
        }
    }

    fn classes(&self) -> usize {
        self.classes
    }

    fn describe(&self) -> String {
        format!("synthetic, {} classes ({} images)", self.classes, self.len)
    }
}

impl Synthetic {
    /// Image `index`, drawn from (seed, index) alone.
    fn render(&self, index: usize, buf: &mut [u8]) {
        let class = self.label(index) as usize;
        let t = &self.templates[class];
        let h = splitmix(self.seed.rotate_left(17) ^ index as u64);
        let dx = (h % 5) as isize - 2;
        let dy = ((h >> 8) % 5) as isize - 2;
        let gain = 160 + ((h >> 16) % 97) as u32; // brightness × gain / 256
        // Texture: a window into a fixed noise table, chosen by the sample (a load, not a draw).
        let start = (h >> 24) as usize % (self.texture.len() - IMAGE_PIXELS);
        let texture = &self.texture[start..start + IMAGE_PIXELS];
        for y in 0..IMAGE_SIDE {
            let row = &mut buf[y * IMAGE_SIDE..][..IMAGE_SIDE];
            let noise = &texture[y * IMAGE_SIDE..][..IMAGE_SIDE];
            let sy = y as isize - dy;
            if !(0..IMAGE_SIDE as isize).contains(&sy) {
                row.copy_from_slice(noise);
                continue;
            }
            let src = &t[sy as usize * IMAGE_SIDE..][..IMAGE_SIDE];
            for (x, (out, &n)) in row.iter_mut().zip(noise).enumerate() {
                let sx = x as isize - dx;
                let base = if (0..IMAGE_SIDE as isize).contains(&sx) {
                    src[sx as usize] as u32
                } else {
                    0
                };
                *out = ((base * gain) / 256 + n as u32).min(255) as u8;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_structured_and_balanced() {
        let a = Synthetic::new(1000, 10, 3);
        let b = Synthetic::new(1000, 10, 3);
        let mut x = [0u8; IMAGE_PIXELS];
        let mut y = [0u8; IMAGE_PIXELS];
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
