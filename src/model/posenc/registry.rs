//! The registry: every position encoding posflow has, one line each, by the `type` a config names
//! it with. The only code that names them all; everything else reaches an encoding through
//! [`Encoding`] ([`PosEnc`] dereferences to it).

use serde::de::{self, DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use super::encoding::{Encoding, Preset, Presets};
use super::{alibi, floater, learned, none, relative, rope, sinusoidal, tupe};

/// Declares [`PosEnc`], one variant per encoding holding that encoding's settings, and its
/// dispatch.
macro_rules! registry {
    ($($(#[$doc:meta])* $variant:ident = $tag:literal => $settings:ty,)*) => {
        /// A model's position encoding: its `type` and its settings. In TOML:
        /// `posenc = { type = "relative", buckets = 32 }`; each encoding's file documents its
        /// settings.
        #[derive(Clone, Copy, Debug, PartialEq, Serialize)]
        #[serde(tag = "type")]
        pub enum PosEnc {
            $($(#[$doc])* #[serde(rename = $tag)] $variant($settings),)*
        }

        /// Every encoding's `type`, in the registry's order.
        pub const TYPES: &[&str] = &[$($tag),*];

        /// Every encoding's presets, in the registry's order.
        pub fn presets() -> impl Iterator<Item = &'static Preset> {
            [$(<$settings as Presets>::PRESETS),*].into_iter().flatten()
        }

        /// Every encoding's other forms (`Presets::OTHER_FORMS`), in the registry's order.
        #[cfg(test)]
        fn other_forms() -> impl Iterator<Item = &'static &'static str> {
            [$(<$settings as Presets>::OTHER_FORMS),*].into_iter().flatten()
        }

        impl PosEnc {
            /// The encoding behind the tag.
            pub fn encoding(&self) -> &(dyn Encoding + 'static) {
                match self {
                    $(Self::$variant(settings) => settings,)*
                }
            }

            /// The encoding `tag` names, with `settings` read by its own serde struct.
            fn read(tag: &str, settings: serde_json::Map<String, serde_json::Value>) -> Result<Option<Self>, String> {
                Ok(Some(match tag {
                    $($tag => Self::$variant(read_settings(settings)?),)*
                    _ => return Ok(None),
                }))
            }
        }
    };
}

registry! {
    /// No position information (a causal model can still infer some from the mask).
    None = "none" => none::NoEncoding,
    /// Vaswani et al.'s fixed sin/cos table.
    Sinusoidal = "sinusoidal" => sinusoidal::Sinusoidal,
    /// A trained table (BERT, GPT-2).
    Learned = "learned" => learned::Learned,
    /// T5's relative bias (and BERT-R's learned table with it).
    Relative = "relative" => relative::Relative,
    /// TUPE-A (Ke et al., 2020).
    TupeA = "tupe_a" => tupe::TupeA,
    /// TUPE-R: TUPE-A with T5's relative bias.
    TupeR = "tupe_r" => tupe::TupeR,
    /// FLOATER (Liu et al., 2020): encodings from a neural ODE.
    Floater = "floater" => floater::FloaterConfig,
    /// RoPE (Su et al., RoFormer).
    Rope = "rope" => rope::Rope,
    /// ALiBi (Press et al., 2022).
    Alibi = "alibi" => alibi::Alibi,
}

/// The preset named `name`.
pub fn preset(name: &str) -> Option<&'static Preset> {
    presets().find(|p| p.name == name)
}

impl PosEnc {
    /// The encoding of the preset `name` (`"rope"`, `"floater"`; [`presets`] lists them), in an
    /// encoder or not: an encoding chosen in code without writing its settings.
    pub fn from_preset(name: &str, encoder: bool) -> crate::error::Result<Self> {
        let preset = preset(name).ok_or_else(|| {
            let names: Vec<&str> = presets().map(|p| p.name).collect();
            crate::error::Error::Input(format!(
                "no position encoding preset `{name}`; the presets are {}",
                names.join(", ")
            ))
        })?;
        Ok(Self::from_inline_toml(preset.posenc_for(encoder))
            .expect("a preset parses as its encoding (tested)"))
    }

    /// The encoding of a `posenc` inline table, `{ type = "rope", base = 500.0 }`.
    pub(crate) fn from_inline_toml(posenc: &str) -> crate::error::Result<Self> {
        #[derive(Deserialize)]
        struct Line {
            posenc: PosEnc,
        }
        let line: Line = toml::from_str(&format!("posenc = {posenc}"))
            .map_err(|e| crate::error::Error::Input(format!("posenc = {posenc}: {e}")))?;
        Ok(line.posenc)
    }
}

/// Every form of every encoding that the tests build each model kind with: each preset as a
/// causal LM and as an encoder has it, and each encoding's other forms. A new encoding's file is
/// all it takes for the tests to cover it.
#[cfg(test)]
pub(crate) fn every_form() -> Vec<PosEnc> {
    let mut forms: Vec<PosEnc> = Vec::new();
    let texts = presets()
        .flat_map(|p| [p.posenc_for(false), p.posenc_for(true)])
        .chain(other_forms().copied());
    for text in texts {
        let form = PosEnc::from_inline_toml(text).unwrap_or_else(|e| panic!("{e}"));
        if !forms.contains(&form) {
            forms.push(form);
        }
    }
    forms
}

impl Default for PosEnc {
    /// No position encoding.
    fn default() -> Self {
        Self::None(none::NoEncoding {})
    }
}

// `c.posenc.name()`, `c.posenc.terms(..)`: the config's value is the encoding, so its callers
// read it as one.
impl std::ops::Deref for PosEnc {
    type Target = dyn Encoding;

    fn deref(&self) -> &Self::Target {
        self.encoding()
    }
}

impl PosEnc {
    /// TUPE's settings that its correlation view reads (TUPE-R's, without the relative bias),
    /// or `None` for any other encoding.
    pub fn tupe(&self) -> Option<tupe::TupeA> {
        match *self {
            Self::TupeA(t) => Some(t),
            Self::TupeR(t) => Some(t.absolute()),
            _ => None,
        }
    }
}

/// Reads `{ type = "…", … }` as the type's settings. Serde's internally tagged enums read the
/// whole table into values before they pick the variant, and an error in a value then lost its
/// key (`{ type = "floater", substeps = -1 }` was "invalid value: integer `-1`, expected usize"):
/// here each setting's error names it.
impl<'de> Deserialize<'de> for PosEnc {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(SpecVisitor)
    }
}

struct SpecVisitor;

impl<'de> Visitor<'de> for SpecVisitor {
    type Value = PosEnc;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a position encoding: a table with its `type` and settings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PosEnc, A::Error> {
        let mut tag: Option<String> = None;
        let mut settings = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == "type" {
                tag = Some(map.next_value()?);
            } else {
                let value: serde_json::Value = map.next_value()?;
                settings.insert(key, value);
            }
        }
        let tag = tag.ok_or_else(|| de::Error::missing_field("type"))?;
        PosEnc::read(&tag, settings)
            .map_err(|e| de::Error::custom(format!("{tag}: {e}")))?
            .ok_or_else(|| de::Error::unknown_variant(&tag, TYPES))
    }
}

/// An encoding's settings from the table's other entries, an error naming the entry it is in.
fn read_settings<T: DeserializeOwned>(
    settings: serde_json::Map<String, serde_json::Value>,
) -> Result<T, String> {
    let entries = KeyedEntries {
        entries: settings.into_iter(),
        value: None,
    };
    T::deserialize(de::value::MapAccessDeserializer::new(entries)).map_err(|e| e.to_string())
}

/// A table's entries, each value's error prefixed with its key.
struct KeyedEntries {
    entries: serde_json::map::IntoIter,
    value: Option<(String, serde_json::Value)>,
}

impl<'de> MapAccess<'de> for KeyedEntries {
    type Error = serde_json::Error;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        let read = seed.deserialize(de::value::StringDeserializer::<serde_json::Error>::new(
            key.clone(),
        ))?;
        self.value = Some((key, value));
        Ok(Some(read))
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Self::Error> {
        let (key, value) = self
            .value
            .take()
            .ok_or_else(|| de::Error::custom("a setting's value was read before its key"))?;
        seed.deserialize(value)
            .map_err(|e| de::Error::custom(format!("`{key}`: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::{PosEnc, TYPES, preset, presets};

    /// Every encoding offers a preset, every preset parses as its encoding (in an encoder too),
    /// and no two presets share a name.
    #[test]
    fn every_encoding_has_presets_that_parse_as_it() {
        let all: Vec<_> = presets().collect();
        for tag in TYPES {
            assert!(
                all.iter()
                    .any(|p| p.posenc.contains(&format!("type = \"{tag}\""))),
                "no preset of {tag}"
            );
        }
        for p in &all {
            for encoder in [false, true] {
                let posenc = PosEnc::from_inline_toml(p.posenc_for(encoder))
                    .unwrap_or_else(|e| panic!("{}: {e}", p.name));
                let tag = serde_json::to_value(posenc).unwrap()["type"].clone();
                assert!(p.posenc.contains(&format!("type = {tag}")), "{}: {tag}", p.name);
            }
            assert_eq!(preset(p.name), Some(*p), "{} is not unique", p.name);
        }
        assert!(!preset("none").unwrap().reads_positions);
        assert!(preset("floater_horizon").is_some() && preset("wavelets").is_none());
    }
}
