//! The IDX format of (Fashion)MNIST: a 4-byte magic (0, 0, type, dims), big-endian u32 sizes,
//! then the data. Files may be raw or gzip-compressed (by content, not by name).

use std::io::Read;
use std::path::Path;

use super::DataError;

/// An unsigned-byte IDX array.
#[derive(Debug, Clone, PartialEq)]
pub struct IdxArray {
    pub dims: Vec<usize>,
    pub data: Vec<u8>,
}

const TYPE_U8: u8 = 0x08;

/// Read an unsigned-byte IDX file (raw or gzip) and check it is complete.
pub fn read_idx(path: &Path) -> Result<IdxArray, DataError> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let raw = std::fs::read(path).map_err(io)?;
    let bytes = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .map_err(|e| DataError::BadIdx {
                path: path.to_path_buf(),
                reason: format!("gzip data is corrupt or truncated ({e})"),
            })?;
        out
    } else {
        raw
    };
    parse_idx(&bytes).map_err(|reason| DataError::BadIdx {
        path: path.to_path_buf(),
        reason,
    })
}

fn parse_idx(bytes: &[u8]) -> Result<IdxArray, String> {
    if bytes.len() < 4 {
        return Err(format!(
            "{} bytes is too short for the 4-byte header",
            bytes.len()
        ));
    }
    if bytes[0] != 0 || bytes[1] != 0 {
        return Err(format!(
            "bad magic {:02x} {:02x} {:02x} {:02x}: IDX files start with 00 00",
            bytes[0], bytes[1], bytes[2], bytes[3]
        ));
    }
    if bytes[2] != TYPE_U8 {
        return Err(format!(
            "data type 0x{:02x} is not supported (expected 0x08, unsigned byte)",
            bytes[2]
        ));
    }
    let ndim = bytes[3] as usize;
    if ndim == 0 {
        return Err("zero dimensions".into());
    }
    let header = 4 + 4 * ndim;
    if bytes.len() < header {
        return Err(format!(
            "truncated header: {ndim} dimensions need {header} bytes, found {}",
            bytes.len()
        ));
    }
    let dims: Vec<usize> = (0..ndim)
        .map(|i| {
            let b = &bytes[4 + 4 * i..8 + 4 * i];
            u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize
        })
        .collect();
    let expected = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or("dimensions overflow")?;
    let found = bytes.len() - header;
    if found != expected {
        let dims_text: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
        return Err(format!(
            "dimensions {} need {expected} data bytes, found {found} ({})",
            dims_text.join("×"),
            if found < expected {
                "truncated"
            } else {
                "trailing bytes"
            }
        ));
    }
    let mut data = super::with_large_pages(expected);
    data.extend_from_slice(&bytes[header..]);
    Ok(IdxArray { dims, data })
}

/// Encode an unsigned-byte IDX array (raw, uncompressed).
pub fn write_idx(array: &IdxArray) -> Vec<u8> {
    let mut out = vec![0, 0, TYPE_U8, array.dims.len() as u8];
    for d in &array.dims {
        out.extend_from_slice(&(*d as u32).to_be_bytes());
    }
    out.extend_from_slice(&array.data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn sample() -> IdxArray {
        IdxArray {
            dims: vec![3, 2, 2],
            data: (0..12).collect(),
        }
    }

    #[test]
    fn round_trip_raw_and_gzip() {
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("a-idx3-ubyte");
        std::fs::write(&raw, write_idx(&sample())).unwrap();
        assert_eq!(read_idx(&raw).unwrap(), sample());
        let gz = dir.path().join("a-idx3-ubyte.gz");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&write_idx(&sample())).unwrap();
        std::fs::write(&gz, enc.finish().unwrap()).unwrap();
        assert_eq!(read_idx(&gz).unwrap(), sample());
    }

    #[test]
    fn round_trip_of_a_dataset_sized_array() {
        // 8,000 images of 28×28 (6.3 MB): large enough for the huge-page allocation path.
        let array = IdxArray {
            dims: vec![8_000, 28, 28],
            data: (0..8_000 * 784u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
                .collect(),
        };
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("big-idx3-ubyte");
        std::fs::write(&raw, write_idx(&array)).unwrap();
        assert_eq!(read_idx(&raw).unwrap(), array);
    }

    #[test]
    fn malformed_files_are_named_and_explained() {
        let dir = tempfile::tempdir().unwrap();
        let good = write_idx(&sample());
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("short", vec![0, 0], "too short"),
            (
                "magic",
                [&[1u8, 2, 8, 1][..], &good[4..]].concat(),
                "bad magic",
            ),
            (
                "dtype",
                [&[0u8, 0, 0x0d, 3][..], &good[4..]].concat(),
                "data type 0x0d",
            ),
            ("header", good[..9].to_vec(), "truncated header"),
            ("body", good[..good.len() - 1].to_vec(), "truncated"),
            (
                "trailing",
                [&good[..], &[9u8][..]].concat(),
                "trailing bytes",
            ),
            ("gzip", vec![0x1f, 0x8b, 8, 0, 0, 0], "gzip data is corrupt"),
        ];
        for (name, bytes, needle) in cases {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            let message = read_idx(&path).unwrap_err().to_string();
            assert!(message.contains(needle), "{name}: {message}");
            assert!(message.contains(&path.display().to_string()), "{message}");
        }
        let missing = read_idx(&dir.path().join("nope")).unwrap_err().to_string();
        assert!(missing.contains("cannot read"), "{missing}");
    }
}
