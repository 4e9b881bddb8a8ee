//! The enum settings' words: each enum lists its variants once (`choice!`), and the words a
//! user may write are serde's own names for them, so a message listing the allowed words can
//! never disagree with what the parser accepts.

use serde::Serialize;

use super::schema::*;

/// A setting whose value is one of an enum's words. The words are serde's own names for the
/// variants (never restated by hand); `choice!` lists the variants once, and a match it
/// generates stops the build when a variant is added to the enum but not to the list.
pub trait Choice: Serialize + Sized + 'static {
    const ALL: &'static [Self];

    /// The words a user may write, as serde reads them.
    fn words() -> Vec<String> {
        Self::ALL
            .iter()
            .filter_map(|v| match toml::Value::try_from(v) {
                Ok(toml::Value::String(s)) => Some(s),
                _ => None,
            })
            .collect()
    }
}

/// The dataset kinds list themselves where they are registered (`data::kinds`).
impl Choice for DatasetKind {
    const ALL: &'static [Self] = DatasetKind::ALL;
}

macro_rules! choice {
    ($t:ident: $($v:ident),+) => {
        impl Choice for $t {
            const ALL: &'static [Self] = &[$($t::$v),+];
        }
        const _: fn($t) = |v| match v {
            $($t::$v)|+ => {}
        };
    };
}

choice!(ColorMode: Rgb, L);
choice!(CacheMode: None, Encoded, Decoded);
choice!(OnError: Fail, Skip);
choice!(PageCache: AsIs, Warm, Cold);
choice!(Encoding: Raw, Jpeg, Png);
choice!(Split: Train, Test);
choice!(ModelKind: SmallCnn, Cnn, Resnet, Mlp, StandIn);
choice!(Stem: Imagenet, Cifar);
choice!(OptimizerKind: Adam, Adamw, Sgd);
choice!(DeviceKind: Auto, Cpu, Cuda);
choice!(EngineKind: Native, Pytorch);
choice!(RunOrder: Alternate, Fixed, Shuffled);
choice!(ImageFormat: Svg, Png);
choice!(PaddingMode: Constant, Edge, Reflect, Symmetric);

/// The allowed words of every string setting that is an enum, by dotted path without indices.
pub fn choices(path: &str) -> Option<Vec<String>> {
    Some(match path {
        "dataset.kind" => DatasetKind::words(),
        "dataset.split" => Split::words(),
        "dataset.mode" => ColorMode::words(),
        "dataset.cache" => CacheMode::words(),
        "dataset.on_error" => OnError::words(),
        "dataset.page_cache" => PageCache::words(),
        "dataset.encoding" => Encoding::words(),
        "model.kind" => ModelKind::words(),
        "model.stem" => Stem::words(),
        "optimizer.kind" => OptimizerKind::words(),
        "device.kind" => DeviceKind::words(),
        "loader.engine" => EngineKind::words(),
        "protocol.order" => RunOrder::words(),
        "report.formats" => ImageFormat::words(),
        "transforms.padding_mode" => PaddingMode::words(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_choice_deserialises() {
        let value = toml::Value::try_from(Settings::default()).unwrap();
        let table = value.as_table().unwrap();
        for (section, key) in [
            ("dataset", "kind"),
            ("dataset", "split"),
            ("model", "kind"),
            ("model", "stem"),
            ("optimizer", "kind"),
            ("device", "kind"),
        ] {
            for word in choices(&format!("{section}.{key}")).unwrap() {
                let mut t = table.clone();
                t[section].as_table_mut().unwrap()[key] = toml::Value::String(word.to_string());
                let parsed: Result<Settings, _> = toml::Value::Table(t).try_into();
                assert!(parsed.is_ok(), "{section}.{key} = {word}: {parsed:?}");
            }
        }
        for word in choices("protocol.order").unwrap() {
            let o: RunOrder = toml::Value::String(word.to_string()).try_into().unwrap();
            assert_eq!(serde_json::to_value(o).unwrap(), *word);
        }
        for word in choices("report.formats").unwrap() {
            let f: ImageFormat = toml::Value::String(word.to_string()).try_into().unwrap();
            assert_eq!(serde_json::to_value(f).unwrap(), *word);
        }
    }
}
