//! Encoded images → planar 8-bit pixels, as PIL's `Image.open(f).convert(mode)` gives them:
//! `rgb` keeps three channels (grey images repeated, an alpha channel dropped, palettes
//! expanded), `l` takes ITU-R 601-2 luma of colour images with Pillow's fixed-point formula.
//! Decoding is pure Rust (zune-jpeg for JPEG, `image` 0.24's png and bmp), so a fresh machine
//! needs nothing installed; its agreement with Pillow (libjpeg-turbo) is measured in
//! tests/images.rs.

use std::cell::RefCell;
use std::io::Cursor;

use image::{DynamicImage, ImageFormat};

use super::ColorMode;
use super::{CropBox, ImageShape, Read, Region};

/// The formats this build decodes, by lowercase file extension.
pub const EXTENSIONS: [&str; 4] = ["jpg", "jpeg", "png", "bmp"];

/// The extensions torchvision's `ImageFolder` accepts that this build cannot decode: a folder
/// holding them would give another sample list than torchvision's, so it is refused.
pub const UNSUPPORTED: [&str; 5] = ["ppm", "pgm", "tif", "tiff", "webp"];

/// Pillow's decompression-bomb limit: `Image.open` refuses images of more than twice
/// `Image.MAX_IMAGE_PIXELS` (89,478,485) pixels. A few KB of PNG can declare 50,000 × 50,000
/// pixels (7.5 GB decoded); checked from the header, before anything is allocated.
pub const MAX_PIXELS: u64 = 2 * 89_478_485;

fn check_size(width: u64, height: u64) -> Result<(), String> {
    if width * height > MAX_PIXELS {
        return Err(format!(
            "{width} × {height} = {} pixels, more than Pillow's decompression-bomb limit of \
             {MAX_PIXELS} (Image.open refuses it too)",
            width * height
        ));
    }
    Ok(())
}

/// Decode `bytes` into `out` (planar), returning the image's shape; the error is the decoder's
/// reason.
pub fn decode(bytes: &[u8], mode: ColorMode, out: &mut Vec<u8>) -> Result<ImageShape, String> {
    decode_region(bytes, mode, &|_| None, out).map(|read| read.shape)
}

thread_local! {
    /// The decoder's interleaved output, reused from image to image: a fresh zeroed buffer per
    /// image (what `JpegDecoder::decode` allocates) costs page faults on every sample. Given
    /// back after an image that needed more than [`KEEP_DECODE_BUFFER_BYTES`].
    static DECODED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The largest decode buffer a thread keeps between images (a 12-megapixel RGB photo fits).
/// A larger one (a panorama: Pillow's limit allows ~0.5 GB) is freed right after its image,
/// so one outlier does not stay pinned in every worker for the rest of the run.
pub const KEEP_DECODE_BUFFER_BYTES: usize = 40 << 20;

/// The bytes this thread's decode buffer holds now.
#[cfg(test)]
fn decode_buffer_bytes() -> usize {
    DECODED.with_borrow(|rgb| rgb.capacity())
}

/// [`decode`] of the part `region` asks for (given the image's shape, from its header): when
/// it names a crop, `out` receives only the crop's pixels, identical to the same crop of a
/// full decode, and a JPEG is decoded only as far as the crop needs (see
/// `JpegDecoder::set_window` in vendor/zune-jpeg).
pub fn decode_region(
    bytes: &[u8],
    mode: ColorMode,
    region: Region,
    out: &mut Vec<u8>,
) -> Result<Read, String> {
    let format = image::guess_format(bytes).map_err(|e| e.to_string())?;
    if format == ImageFormat::Jpeg {
        return decode_jpeg(bytes, mode, region, out);
    }
    if !matches!(format, ImageFormat::Png | ImageFormat::Bmp) {
        return Err(format!("{format:?} images are not decoded by this build"));
    }
    let (w, h) = image::io::Reader::with_format(Cursor::new(bytes), format)
        .into_dimensions()
        .map_err(|e| e.to_string())?;
    check_size(w.into(), h.into())?;
    let mut reader = image::io::Reader::with_format(Cursor::new(bytes), format);
    reader.no_limits();
    let img = reader.decode().map_err(|e| e.to_string())?;
    let full = ImageShape::new(channels(mode), h as usize, w as usize);
    let b = region(full).filter(|b| inside(b, full));
    // A grey image stays one channel (repeated for RGB, as PIL's convert does); colour is taken
    // as RGB: an alpha channel dropped, a palette expanded.
    let (pixels, components) = match img {
        DynamicImage::ImageLuma8(_) | DynamicImage::ImageLumaA8(_) => {
            (img.into_luma8().into_raw(), 1)
        }
        _ => (img.into_rgb8().into_raw(), 3),
    };
    let window = b.unwrap_or(CropBox::whole(full));
    to_planar(&pixels, components, w as usize, window, mode, out);
    Ok(Read {
        shape: full,
        region: b,
    })
}

fn channels(mode: ColorMode) -> usize {
    match mode {
        ColorMode::L => 1,
        ColorMode::Rgb => 3,
    }
}

fn inside(b: &CropBox, shape: ImageShape) -> bool {
    b.height > 0
        && b.width > 0
        && b.top + b.height <= shape.height
        && b.left + b.width <= shape.width
}

/// JPEG through zune-jpeg (SIMD IDCT and colour conversion) to RGB, or one channel for a grey
/// JPEG (repeated for RGB), then to `mode`: both modes give what Pillow gives.
fn decode_jpeg(
    bytes: &[u8],
    mode: ColorMode,
    region: Region,
    out: &mut Vec<u8>,
) -> Result<Read, String> {
    let options = zune_jpeg::zune_core::options::DecoderOptions::default()
        .jpeg_set_out_colorspace(zune_jpeg::zune_core::colorspace::ColorSpace::RGB)
        .set_max_width(1 << 16)
        .set_max_height(1 << 16)
        .set_strict_mode(true);
    if !ends_after_last_scan(bytes) {
        return Err("truncated: no end-of-image marker after the last scan".into());
    }
    let mut decoder = zune_jpeg::JpegDecoder::new_with_options(bytes, options);
    decoder.decode_headers().map_err(|e| format!("{e:?}"))?;
    let (w, h) = decoder.dimensions().ok_or("no JPEG header")?;
    check_size(w as u64, h as u64)?;
    let full = ImageShape::new(channels(mode), h, w);
    let b = region(full).filter(|b| inside(b, full));
    if let Some(b) = b {
        decoder.set_window(b.top..b.top + b.height, b.left..b.left + b.width);
    }
    let size = decoder.output_buffer_size().ok_or("no JPEG header")?;
    // RGB, or one channel for a grey JPEG (zune-jpeg keeps a single component as it is).
    let components = size / (w * h).max(1);
    if !matches!(components, 1 | 3) || size != components * w * h {
        return Err(format!(
            "the decoder gives {size} bytes for a {w}×{h} image"
        ));
    }
    DECODED.with_borrow_mut(|rgb| {
        if rgb.len() < size {
            rgb.resize(size, 0);
        }
        let decoded = decoder
            .decode_into(&mut rgb[..size])
            .map_err(|e| format!("{e:?}"));
        if decoded.is_ok() {
            to_planar(
                &rgb[..size],
                components,
                w,
                b.unwrap_or(CropBox::whole(full)),
                mode,
                out,
            );
        }
        if rgb.capacity() > KEEP_DECODE_BUFFER_BYTES {
            *rgb = Vec::new();
        }
        decoded
    })?;
    Ok(Read {
        shape: full,
        region: b,
    })
}

/// The `b` window of an interleaved RGB (`components` = 3) or grey (1) image `width` wide,
/// converted to `mode` (grey repeated to R = G = B, as PIL's `convert("RGB")`), planar, into
/// `out`.
fn to_planar(
    rgb: &[u8],
    components: usize,
    width: usize,
    b: CropBox,
    mode: ColorMode,
    out: &mut Vec<u8>,
) {
    let plane = b.height * b.width;
    let n = components;
    let rows =
        || (b.top..b.top + b.height).map(move |y| &rgb[n * (y * width + b.left)..][..n * b.width]);
    match (mode, n) {
        (_, 1) => {
            out.clear();
            for row in rows() {
                out.extend_from_slice(row);
            }
            if mode == ColorMode::Rgb {
                out.extend_from_within(..plane);
                out.extend_from_within(..plane);
            }
        }
        (ColorMode::L, _) => {
            out.clear();
            for row in rows() {
                out.extend(
                    row.chunks_exact(3)
                        .map(|p| crate::shape::luma(p[0], p[1], p[2])),
                );
            }
        }
        (ColorMode::Rgb, _) => {
            out.resize(3 * plane, 0);
            let (r, rest) = out.split_at_mut(plane);
            let (g, bl) = rest.split_at_mut(plane);
            let planes = r
                .chunks_exact_mut(b.width)
                .zip(g.chunks_exact_mut(b.width))
                .zip(bl.chunks_exact_mut(b.width));
            for (((r, g), bl), row) in planes.zip(rows()) {
                for (i, p) in row.chunks_exact(3).enumerate() {
                    r[i] = p[0];
                    g[i] = p[1];
                    bl[i] = p[2];
                }
            }
        }
    }
}

/// Whether an end-of-image marker (FF D9) follows the start of the last scan (FF DA). Inside
/// entropy-coded data every FF byte is followed by 00, so neither marker can appear there: a
/// file cut short in its scan data has no FF D9 after its last FF DA (markers of an embedded
/// thumbnail all come before the main scan). zune-jpeg fills a cut-short scan with grey
/// without an error, where Pillow refuses the file ("image file is truncated"), so the check
/// is made here.
fn ends_after_last_scan(bytes: &[u8]) -> bool {
    let last_scan = bytes.windows(2).rposition(|w| w == [0xFF, 0xDA]);
    let last_end = bytes.windows(2).rposition(|w| w == [0xFF, 0xD9]);
    matches!((last_scan, last_end), (Some(s), Some(e)) if e > s)
}

/// Encode planar `pixels` of `shape` as JPEG at `quality` (1–100; colour with 4:2:0 chroma
/// subsampling, Pillow's default and what cameras write) or as PNG.
pub fn encode(pixels: &[u8], shape: ImageShape, jpeg_quality: Option<u8>) -> Vec<u8> {
    let plane = shape.plane();
    let interleaved: Vec<u8> = (0..plane)
        .flat_map(|i| (0..shape.channels).map(move |c| pixels[c * plane + i]))
        .collect();
    let (w, h) = (shape.width as u32, shape.height as u32);
    let mut out = Vec::new();
    // Encoding pixels we generated into memory cannot fail but for a bug.
    match jpeg_quality {
        Some(q) => {
            let mut encoder = jpeg_encoder::Encoder::new(&mut out, q);
            encoder.set_sampling_factor(jpeg_encoder::SamplingFactor::R_4_2_0);
            let colour = if shape.channels == 1 {
                jpeg_encoder::ColorType::Luma
            } else {
                jpeg_encoder::ColorType::Rgb
            };
            encoder
                .encode(&interleaved, w as u16, h as u16, colour)
                .expect("encoding a generated image");
        }
        None => {
            use image::ImageEncoder;
            let colour = if shape.channels == 1 {
                image::ColorType::L8
            } else {
                image::ColorType::Rgb8
            };
            image::codecs::png::PngEncoder::new(&mut out)
                .write_image(&interleaved, w, h, colour)
                .expect("encoding a generated image");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use jpeg_encoder::{ColorType, Encoder, SamplingFactor};

    /// A smooth gradient with noise (so every block has AC coefficients), interleaved.
    fn picture(w: usize, h: usize, channels: usize) -> Vec<u8> {
        (0..w * h * channels)
            .map(|i| {
                let (p, c) = (i / channels, i % channels);
                let (x, y) = (p % w, p / w);
                let noise = (i as u32).wrapping_mul(2_654_435_761) >> 28;
                ((x * 3 + y * 2 + c * 70) as u32 + noise) as u8
            })
            .collect()
    }

    fn jpeg(
        w: usize,
        h: usize,
        grey: bool,
        sampling: SamplingFactor,
        restart: u16,
        progressive: bool,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        let mut enc = Encoder::new(&mut out, 85);
        enc.set_sampling_factor(sampling);
        enc.set_restart_interval(restart);
        enc.set_progressive(progressive);
        let (pixels, colour) = if grey {
            (picture(w, h, 1), ColorType::Luma)
        } else {
            (picture(w, h, 3), ColorType::Rgb)
        };
        enc.encode(&pixels, w as u16, h as u16, colour).unwrap();
        out
    }

    /// Windows at the corners, edges, the middle, 1-pixel ones and the whole image.
    fn windows(w: usize, h: usize) -> Vec<CropBox> {
        let mut v = Vec::new();
        for (top, height) in [
            (0, h),
            (0, 1),
            (h - 1, 1),
            (0, 17),
            (h - 20, 20),
            (7, h / 2),
            (h / 3, h / 3 + 1),
        ] {
            for (left, width) in [
                (0, w),
                (0, 1),
                (w - 1, 1),
                (0, 33),
                (w - 17, 17),
                (9, w / 2),
                (w / 4, w / 3),
            ] {
                v.push(CropBox {
                    top,
                    left,
                    height,
                    width,
                });
            }
        }
        v
    }

    #[test]
    fn a_region_is_the_same_crop_of_a_full_decode() {
        let samplings = [
            SamplingFactor::R_4_4_4,
            SamplingFactor::R_4_2_2,
            SamplingFactor::R_4_4_0,
            SamplingFactor::R_4_2_0,
            SamplingFactor::R_4_1_1,
        ];
        let mut checked = 0;
        for (w, h) in [(101, 75), (64, 48)] {
            for grey in [false, true] {
                for &sampling in &samplings {
                    for restart in [0, 3] {
                        // (zune-jpeg refuses some progressive files with restart markers.)
                        for progressive in [false, restart == 0] {
                            let bytes = jpeg(w, h, grey, sampling, restart, progressive);
                            for mode in [ColorMode::Rgb, ColorMode::L] {
                                let mut whole = Vec::new();
                                let full = decode(&bytes, mode, &mut whole).unwrap_or_else(|e| panic!("{w}×{h} grey={grey} {sampling:?} restart={restart} progressive={progressive}: {e}"));
                                for b in windows(w, h) {
                                    let mut part = Vec::new();
                                    let read = decode_region(&bytes, mode, &|_| Some(b), &mut part)
                                        .unwrap();
                                    assert_eq!(
                                        read,
                                        Read {
                                            shape: full,
                                            region: Some(b)
                                        }
                                    );
                                    let mut expected =
                                        vec![0; full.with_size(b.height, b.width).len()];
                                    crate::transforms::crop(
                                        &whole,
                                        full,
                                        b.top,
                                        b.left,
                                        b.height,
                                        b.width,
                                        &mut expected,
                                    );
                                    assert!(
                                        part == expected,
                                        "{w}×{h} grey={grey} {sampling:?} restart={restart} progressive={progressive} {mode:?} {b:?}"
                                    );
                                    checked += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 2 * 2 * 5 * 2 * 2 * 2 * 49); // progressive with restarts: twice baseline
    }

    #[test]
    fn a_window_leaves_the_rest_of_a_baseline_image_undecoded() {
        // The decoder writes into a zeroed buffer: rows below the window's last MCU row (and
        // the one after it) and columns outside it stay zero; inside, the full decode.
        let (w, h) = (160, 128);
        let bytes = jpeg(w, h, false, SamplingFactor::R_4_2_0, 0, false);
        let decoder = || {
            let options = zune_jpeg::zune_core::options::DecoderOptions::default()
                .jpeg_set_out_colorspace(zune_jpeg::zune_core::colorspace::ColorSpace::RGB);
            zune_jpeg::JpegDecoder::new_with_options(&bytes[..], options)
        };
        let full = decoder().decode().unwrap();
        let mut d = decoder();
        d.decode_headers().unwrap();
        d.set_window(40..50, 60..70);
        let mut out = vec![0u8; 3 * w * h];
        d.decode_into(&mut out).unwrap();
        let row = |y: usize| &out[3 * w * y..3 * w * (y + 1)];
        assert!(
            row(h - 1).iter().all(|&v| v == 0),
            "the last row was decoded"
        );
        assert!(row(0).iter().all(|&v| v == 0), "the first row was decoded");
        assert!(
            row(45)[..3 * 50].iter().all(|&v| v == 0),
            "columns left of it were converted"
        );
        for y in 40..50 {
            assert_eq!(
                row(y)[3 * 60..3 * 70],
                full[3 * (w * y + 60)..3 * (w * y + 70)]
            );
        }
    }
}

#[cfg(test)]
mod buffer_tests {
    use super::*;
    use jpeg_encoder::{ColorType, Encoder};

    fn flat_jpeg(w: u16, h: u16) -> Vec<u8> {
        let mut out = Vec::new();
        let pixels = vec![90u8; w as usize * h as usize * 3];
        Encoder::new(&mut out, 50)
            .encode(&pixels, w, h, ColorType::Rgb)
            .unwrap();
        out
    }

    #[test]
    fn an_outsized_image_does_not_stay_pinned_in_the_thread() {
        let mut out = Vec::new();
        decode(&flat_jpeg(64, 48), ColorMode::Rgb, &mut out).unwrap();
        let small = decode_buffer_bytes();
        assert!((64 * 48 * 3..1 << 20).contains(&small), "{small}");
        // 4000 × 3600 RGB is 43 MB of decoder output: freed once the image is decoded.
        let shape = decode(&flat_jpeg(4000, 3600), ColorMode::Rgb, &mut out).unwrap();
        assert_eq!((shape.width, shape.height), (4000, 3600));
        assert_eq!(decode_buffer_bytes(), 0);
        decode(&flat_jpeg(64, 48), ColorMode::Rgb, &mut out).unwrap();
        assert!(decode_buffer_bytes() < 1 << 20);
    }
}
