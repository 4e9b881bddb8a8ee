//! Pillow's resampling filter for one axis (`precompute_coeffs` + `normalize_coeffs_8bpc`):
//! the triangle filter's bounds and 22-bit fixed-point coefficients per output, cached per
//! (input size, output size) pair in the [`ResizeScratch`].

pub(super) const PRECISION_BITS: u32 = 32 - 8 - 2;

/// The fixed-point filter of one axis: per output, (first input, taps) and `ksize` coefficients.
#[derive(Debug, Default, Clone)]
pub(super) struct Coefficients {
    pub(super) ksize: usize,
    pub(super) bounds: Vec<(usize, usize)>,
    pub(super) coeffs: Vec<i32>,
    /// The same three-tap filter laid out for a 32-lane row (see [`Lanes32`]), when it fits.
    pub(super) lanes: Option<Box<Lanes32>>,
    /// For filters of at most 8 taps: each output's coefficients padded with zeros to 8, so
    /// one 8-lane load covers every tap (see [`hpass8_avx2`]); empty otherwise.
    pub(super) wide: Vec<i32>,
}

/// A three-tap filter of at most 32 outputs over at most 29 inputs, as 32 lanes: for tap `t`
/// and output `x`, the input index `xmin + t` and its coefficient (0 for unused taps and lanes).
/// A row of input then fits one 32-byte register and each tap is one byte shuffle.
#[derive(Debug, Clone)]
pub(super) struct Lanes32 {
    pub(super) index: [[u8; 32]; 3],
    pub(super) coeff: [[i32; 32]; 3],
}

impl Lanes32 {
    pub(super) fn new(in_size: usize, c: &Coefficients) -> Option<Box<Lanes32>> {
        if c.ksize != 3 || c.bounds.len() > 32 || in_size + 3 > 32 {
            return None;
        }
        let mut l = Lanes32 {
            index: [[31; 32]; 3], // byte 31 of the padded row is always 0
            coeff: [[0; 32]; 3],
        };
        for (x, &(xmin, n)) in c.bounds.iter().enumerate() {
            for t in 0..n {
                l.index[t][x] = (xmin + t) as u8;
                l.coeff[t][x] = c.coeffs[x * 3 + t];
            }
        }
        Some(Box::new(l))
    }
}

/// Reusable buffers, and the filters already computed (crop sizes repeat: at most one filter
/// per (input size, output size) pair).
#[derive(Debug, Default)]
pub struct ResizeScratch {
    /// Filters by (input size, output size); the last one used is checked first.
    pub(super) filters: Vec<((usize, usize), Coefficients)>,
    pub(super) weights: Vec<f64>,
    pub(super) row: Vec<u8>,
    /// A crop row widened to i32, with 8 zeros after it (for [`hpass8_avx2`]).
    pub(super) wide_row: Vec<i32>,
    pub(super) temp: Vec<u8>,
    pub(super) acc: Vec<i32>,
}

impl ResizeScratch {
    /// The filter for (in_size, out_size), taken out of the cache; give it back with `keep`.
    /// A linear search: a RandomResizedCrop of a 28-pixel image has a few dozen size pairs,
    /// and hashing the key cost more than the search.
    pub(super) fn filter(&mut self, in_size: usize, out_size: usize) -> Coefficients {
        let key = (in_size, out_size);
        match self.filters.iter().rposition(|(k, _)| *k == key) {
            Some(i) => self.filters.swap_remove(i).1,
            None => {
                let mut c = Coefficients::default();
                c.ksize = precompute(
                    in_size,
                    out_size,
                    &mut c.bounds,
                    &mut c.coeffs,
                    &mut self.weights,
                );
                c.lanes = Lanes32::new(in_size, &c);
                if c.ksize <= 8 {
                    c.wide = c
                        .coeffs
                        .chunks_exact(c.ksize)
                        .flat_map(|k| (0..8).map(|t| k.get(t).copied().unwrap_or(0)))
                        .collect();
                }
                c
            }
        }
    }

    pub(super) fn keep(&mut self, in_size: usize, out_size: usize, c: Coefficients) {
        self.filters.push(((in_size, out_size), c));
    }
}

/// Pillow's `precompute_coeffs` + `normalize_coeffs_8bpc` for the box [0, in_size).
/// Returns the kernel size; fills `bounds` with (first input, count) per output.
pub(super) fn precompute(
    in_size: usize,
    out_size: usize,
    bounds: &mut Vec<(usize, usize)>,
    coeffs: &mut Vec<i32>,
    k: &mut Vec<f64>,
) -> usize {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filterscale; // the triangle filter's support is 1
    let ksize = support.ceil() as usize * 2 + 1;
    bounds.clear();
    coeffs.clear();
    coeffs.resize(out_size * ksize, 0);
    k.clear();
    k.resize(ksize, 0.0);
    for xx in 0..out_size {
        let center = (xx as f64 + 0.5) * scale;
        let ss = 1.0 / filterscale;
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize - xmin;
        let mut ww = 0.0;
        for (x, kx) in k.iter_mut().enumerate().take(xmax) {
            let t = ((x + xmin) as f64 - center + 0.5) * ss;
            let w = if t.abs() < 1.0 { 1.0 - t.abs() } else { 0.0 };
            *kx = w;
            ww += w;
        }
        for x in 0..xmax {
            let w = if ww != 0.0 { k[x] / ww } else { k[x] };
            let scaled = w * (1u32 << PRECISION_BITS) as f64;
            coeffs[xx * ksize + x] = if w < 0.0 {
                (-0.5 + scaled) as i32
            } else {
                (0.5 + scaled) as i32
            };
        }
        bounds.push((xmin, xmax));
    }
    ksize
}

/// Pillow's `clip8`: the 8-bit value of a fixed-point accumulator, saturated.
#[inline]
pub(super) fn clip8(v: i32) -> u8 {
    (v >> PRECISION_BITS).clamp(0, 255) as u8
}
