//! Small, fast, non-cryptographic hashing: seed mixing and batch fingerprints.

/// SplitMix64 finaliser: a well-mixed 64-bit hash of a counter.
pub fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// SplitMix64 as a random number generator: one multiply-xorshift per draw and nothing to set
/// up, so a fresh generator per sample costs nothing (ChaCha's block setup cost more than the
/// whole transform chain). Its sequence is fixed by this code, not by a crate version, so
/// results reproduce across builds.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }
}

impl rand::RngCore for SplitMix64 {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// An order-sensitive hash of a batch: its images' exact f32 bits and its labels. Two batches
/// with the same fingerprint are, for all practical purposes, bit-identical.
#[derive(Debug, Clone, Copy)]
pub struct Fingerprint(u64);

impl Default for Fingerprint {
    fn default() -> Self {
        Fingerprint(0x6c6f_6164_6572_6c61)
    }
}

impl Fingerprint {
    #[inline]
    fn word(&mut self, w: u64) {
        self.0 = (self.0 ^ w)
            .wrapping_mul(0x0000_0100_0000_01b3)
            .rotate_left(29);
    }

    pub fn floats(&mut self, values: &[f32]) {
        let mut chunks = values.chunks_exact(2);
        for c in &mut chunks {
            self.word(c[0].to_bits() as u64 | ((c[1].to_bits() as u64) << 32));
        }
        for v in chunks.remainder() {
            self.word(v.to_bits() as u64);
        }
    }

    pub fn labels(&mut self, labels: &[u32]) {
        for &l in labels {
            self.word(l as u64 ^ 0xa5a5_0000_0000);
        }
    }

    pub fn finish(self) -> u64 {
        splitmix(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_change_changes_the_fingerprint() {
        let a = [0.5f32, 0.25, 1.0];
        let fp = |v: &[f32], l: &[u32]| {
            let mut f = Fingerprint::default();
            f.floats(v);
            f.labels(l);
            f.finish()
        };
        let base = fp(&a, &[1, 2]);
        assert_eq!(base, fp(&a, &[1, 2]));
        assert_ne!(base, fp(&[0.5, 0.25, 1.0000001], &[1, 2]));
        assert_ne!(base, fp(&a, &[2, 1]));
        assert_ne!(base, fp(&[0.25, 0.5, 1.0], &[1, 2]));
    }
}
