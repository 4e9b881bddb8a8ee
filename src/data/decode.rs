//! Encoded images → planar 8-bit pixels, as PIL's `Image.open(f).convert(mode)` gives them:
//! `rgb` keeps three channels (grey images repeated, an alpha channel dropped, palettes
//! expanded), `l` takes ITU-R 601-2 luma of colour images with Pillow's fixed-point formula.
//! Decoding is pure Rust (zune-jpeg for JPEG, `image` 0.24's png and bmp), so a fresh machine
//! needs nothing installed; its agreement with Pillow (libjpeg-turbo) is measured in
//! tests/images.rs.

use std::io::Cursor;

use image::{DynamicImage, ImageFormat};

use super::ImageShape;
use crate::config::ColorMode;

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
    let format = image::guess_format(bytes).map_err(|e| e.to_string())?;
    if format == ImageFormat::Jpeg {
        return decode_jpeg(bytes, mode, out);
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
    Ok(planar(&img, mode, out))
}

/// JPEG through zune-jpeg (SIMD IDCT and colour conversion) to RGB, then to `mode`: a grey
/// JPEG comes out with R = G = B = Y, so both modes give what Pillow gives.
fn decode_jpeg(bytes: &[u8], mode: ColorMode, out: &mut Vec<u8>) -> Result<ImageShape, String> {
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
    let rgb = decoder.decode().map_err(|e| format!("{e:?}"))?;
    let info = decoder.info().ok_or("no JPEG header")?;
    let (w, h) = (info.width as usize, info.height as usize);
    let plane = w * h;
    if rgb.len() != 3 * plane {
        return Err(format!(
            "decoded {} bytes for a {w}×{h} RGB image",
            rgb.len()
        ));
    }
    Ok(match mode {
        ColorMode::L => {
            out.clear();
            out.extend(
                rgb.chunks_exact(3)
                    .map(|p| crate::shape::luma(p[0], p[1], p[2])),
            );
            ImageShape::new(1, h, w)
        }
        ColorMode::Rgb => {
            out.resize(3 * plane, 0);
            let (r, rest) = out.split_at_mut(plane);
            let (g, b) = rest.split_at_mut(plane);
            for (i, p) in rgb.chunks_exact(3).enumerate() {
                r[i] = p[0];
                g[i] = p[1];
                b[i] = p[2];
            }
            ImageShape::new(3, h, w)
        }
    })
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

/// `img` converted to `mode`, written planar into `out`.
pub fn planar(img: &DynamicImage, mode: ColorMode, out: &mut Vec<u8>) -> ImageShape {
    let (w, h) = (img.width() as usize, img.height() as usize);
    let grey_source = matches!(
        img,
        DynamicImage::ImageLuma8(_) | DynamicImage::ImageLumaA8(_)
    );
    let plane = w * h;
    match mode {
        ColorMode::L => {
            out.clear();
            if grey_source {
                out.extend_from_slice(img.to_luma8().as_raw());
            } else {
                let rgb = img.to_rgb8();
                out.extend(
                    rgb.as_raw()
                        .chunks_exact(3)
                        .map(|p| crate::shape::luma(p[0], p[1], p[2])),
                );
            }
            ImageShape::new(1, h, w)
        }
        ColorMode::Rgb => {
            out.resize(3 * plane, 0);
            if grey_source {
                let grey = img.to_luma8();
                for c in 0..3 {
                    out[c * plane..][..plane].copy_from_slice(grey.as_raw());
                }
            } else {
                let rgb = img.to_rgb8();
                let (r, rest) = out.split_at_mut(plane);
                let (g, b) = rest.split_at_mut(plane);
                for (i, p) in rgb.as_raw().chunks_exact(3).enumerate() {
                    r[i] = p[0];
                    g[i] = p[1];
                    b[i] = p[2];
                }
            }
            ImageShape::new(3, h, w)
        }
    }
}

/// Encode planar `pixels` of `shape` as JPEG at `quality` (1–100) or as PNG.
pub fn encode(pixels: &[u8], shape: ImageShape, jpeg_quality: Option<u8>) -> Vec<u8> {
    let plane = shape.plane();
    let interleaved: Vec<u8> = (0..plane)
        .flat_map(|i| (0..shape.channels).map(move |c| pixels[c * plane + i]))
        .collect();
    let (w, h) = (shape.width as u32, shape.height as u32);
    let colour = if shape.channels == 1 {
        image::ColorType::L8
    } else {
        image::ColorType::Rgb8
    };
    let mut out = Vec::new();
    let result = match jpeg_quality {
        Some(q) => image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, q).encode(
            &interleaved,
            w,
            h,
            colour,
        ),
        None => {
            use image::ImageEncoder;
            image::codecs::png::PngEncoder::new(&mut out).write_image(&interleaved, w, h, colour)
        }
    };
    // Encoding pixels we generated into memory cannot fail but for a bug.
    result.expect("encoding a generated image");
    out
}
