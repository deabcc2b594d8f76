//! The value types of the config file that TOML has no type for: durations and byte sizes.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserialize, Deserializer, Visitor};

/// A duration written the humantime way: `"10s"`, `"1m 30s"`, `"250ms"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HumanDuration(pub(crate) Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = HumanDuration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"10s\" or \"1m 30s\"")
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<HumanDuration, E> {
                humantime::parse_duration(s)
                    .map(HumanDuration)
                    .map_err(|_| E::custom(format_args!("invalid duration {s:?}")))
            }
        }
        deserializer.deserialize_str(V)
    }
}

/// A size in bytes: an integer, or a string with a unit such as `"16MiB"` or `"64 KB"`.
///
/// `KiB`, `MiB` and `GiB` are powers of 1024; `KB`, `MB` and `GB` powers of 1000, as the
/// units say. A bare `K`/`M`/`G` is refused: which one it means is exactly the ambiguity
/// the units exist to remove.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ByteSize(pub(crate) u64);

impl ByteSize {
    fn parse(s: &str) -> Option<u64> {
        let s = s.trim();
        let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (number, unit) = s.split_at(digits);
        let number: u64 = number.parse().ok()?;
        let multiplier: u64 = match unit.trim_start().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "kb" => 1000,
            "mb" => 1000 * 1000,
            "gb" => 1000 * 1000 * 1000,
            "kib" => 1 << 10,
            "mib" => 1 << 20,
            "gib" => 1 << 30,
            _ => return None,
        };
        number.checked_mul(multiplier)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size in bytes, such as 16384 or \"16MiB\"")
            }

            fn visit_u64<E: de::Error>(self, n: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(n))
            }

            fn visit_i64<E: de::Error>(self, n: i64) -> Result<ByteSize, E> {
                u64::try_from(n)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format_args!("invalid size {n}: must not be negative")))
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<ByteSize, E> {
                ByteSize::parse(s).map(ByteSize).ok_or_else(|| {
                    E::custom(format_args!(
                        "invalid size {s:?} (use bytes, or a unit: KiB, MiB, GiB, KB, MB, GB)"
                    ))
                })
            }
        }
        deserializer.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        for (text, want) in [
            ("0", 0),
            ("512", 512),
            ("512B", 512),
            ("16MiB", 16 << 20),
            ("16 MiB", 16 << 20),
            ("16mib", 16 << 20),
            ("64KB", 64_000),
            ("1GiB", 1 << 30),
            ("2GB", 2_000_000_000),
        ] {
            assert_eq!(ByteSize::parse(text), Some(want), "{text}");
        }
    }

    #[test]
    fn sizes_without_a_clear_unit_or_number_are_refused() {
        for text in [
            "",
            "MiB",
            "16M",
            "16 parsecs",
            "-1",
            "1.5MiB",
            "99999999999999GiB",
        ] {
            assert_eq!(ByteSize::parse(text), None, "{text}");
        }
    }
}
