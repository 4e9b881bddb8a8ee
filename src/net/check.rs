//! Whether an architecture can take an input: the first `[model]` key that cannot, and why.

use super::*;

/// Whether `arch` can take `input`, naming the `[model]` key that cannot.
pub fn check(arch: &Architecture, input: ModelInput) -> Result<(), ShapeError> {
    let ImageShape { height, width, .. } = input.shape;
    let bad = |key: &'static str, message: String| Err(ShapeError { key, message });
    let positive = |key: &'static str, values: &[usize]| {
        if values.contains(&0) {
            bad(
                key,
                format!("expected sizes of at least 1, found {values:?}"),
            )
        } else {
            Ok(())
        }
    };
    if let Some((convs, kernel, hidden)) = arch.plain() {
        let key = match arch {
            Architecture::SmallCnn { .. } => "width",
            _ => "channels",
        };
        if let Architecture::SmallCnn { width: 0 } = arch {
            return bad(
                "width",
                "expected a multiplier of at least 1, found 0".into(),
            );
        }
        if convs.is_empty() {
            return bad(
                key,
                "expected at least one convolution block, found []".into(),
            );
        }
        positive(key, &convs)?;
        positive("hidden", &hidden)?;
        if kernel != 3 && kernel != 5 {
            return bad("kernel", format!("expected 3 or 5, found {kernel}"));
        }
        let need = 1usize << convs.len().min(30);
        if height < need || width < need {
            let blocks = convs.len();
            let fits = (height.min(width).max(1)).ilog2() as usize;
            return bad(
                key,
                format!(
                    "{} 2×2 poolings need images of at least {need}×{need}, the transforms hand \
                     the model {height}×{width}{}",
                    blocks,
                    if matches!(arch, Architecture::Cnn { .. }) {
                        format!(": use at most {fits} blocks or larger images")
                    } else {
                        String::new()
                    }
                ),
            );
        }
    }
    match arch {
        Architecture::Mlp { hidden } => positive("hidden", hidden)?,
        Architecture::Resnet {
            depth,
            width: w,
            stem,
        } => {
            if Architecture::resnet_blocks(*depth).is_none() {
                return bad("depth", format!("expected 18 or 34, found {depth}"));
            }
            if *w == 0 {
                return bad(
                    "width",
                    "expected base channels of at least 1, found 0".into(),
                );
            }
            let kernel = match stem {
                Stem::Imagenet => 7,
                Stem::Cifar => 3,
            };
            if height < kernel || width < kernel {
                return bad(
                    "stem",
                    format!(
                        "the {} stem's {kernel}×{kernel} convolution is larger than the \
                         {height}×{width} images the transforms hand the model{}",
                        match stem {
                            Stem::Imagenet => "imagenet",
                            Stem::Cifar => "cifar",
                        },
                        if *stem == Stem::Imagenet && height >= 3 && width >= 3 {
                            " (stem = \"cifar\" takes them)"
                        } else {
                            ""
                        }
                    ),
                );
            }
        }
        _ => {}
    }
    if input.classes == 0 {
        return bad("kind", "the dataset has no classes".into());
    }
    Ok(())
}
