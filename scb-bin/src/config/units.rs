//! The value types of the config file that TOML has no type for: durations, byte sizes
//! and listening addresses.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use serde::de::{self, Deserialize, Deserializer, Visitor};
use toml::Spanned;

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

/// A listening address: `IP:PORT` (`127.0.0.1:8080`, `[::1]:8080`), `:PORT` for every
/// IPv4 interface (`0.0.0.0:PORT`, nginx's `listen PORT`; `[::]:PORT` for IPv6), or
/// `HOST:PORT` with a host name resolved once, when the config is loaded, to its first
/// IPv4 address (else its first address): `localhost:8080` is `127.0.0.1:8080`.
///
/// For `#[serde(deserialize_with)]` on a `Spanned<SocketAddr>` field.
pub(crate) fn listen_addr<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Spanned<SocketAddr>, D::Error> {
    let text = Spanned::<String>::deserialize(deserializer)?;
    let addr = parse_listen_addr(text.get_ref()).map_err(de::Error::custom)?;
    Ok(Spanned::new(text.span(), addr))
}

/// A `[[listen]]` address: TCP, or a Unix domain socket (`unix:/run/scb/scb.sock`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ListenAddr {
    Tcp(SocketAddr),
    Unix(std::path::PathBuf),
}

/// For `#[serde(deserialize_with)]` on a `[[listen]]`'s `addr`: `unix:PATH` (relative
/// paths are relative to the config file, as every path), or what [`listen_addr`] takes.
pub(crate) fn listen_or_unix<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Spanned<ListenAddr>, D::Error> {
    let text = Spanned::<String>::deserialize(deserializer)?;
    let addr = match text.get_ref().strip_prefix("unix:") {
        Some("") => return Err(de::Error::custom("`unix:` needs a socket path")),
        Some(path) => ListenAddr::Unix(path.into()),
        None => ListenAddr::Tcp(parse_listen_addr(text.get_ref()).map_err(de::Error::custom)?),
    };
    Ok(Spanned::new(text.span(), addr))
}

fn parse_listen_addr(s: &str) -> Result<SocketAddr, String> {
    let expected = || {
        format!(
            "invalid address {s:?}: expected IP:PORT, [IPv6]:PORT, HOST:PORT or :PORT \
             (every IPv4 interface)"
        )
    };
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let (host, port) = s.rsplit_once(':').ok_or_else(expected)?;
    let port: u16 = port.parse().map_err(|_| expected())?;
    if host.is_empty() {
        return Ok(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)));
    }
    if host.contains(['[', ']', ':', '/', ' ']) {
        return Err(expected());
    }
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve the host of {s:?}: {e}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| format!("the host of {s:?} has no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_take_ips_ports_and_host_names() {
        for (text, want) in [
            ("127.0.0.1:8080", "127.0.0.1:8080"),
            ("[::1]:8080", "[::1]:8080"),
            (":8080", "0.0.0.0:8080"),
            ("localhost:8080", "127.0.0.1:8080"),
        ] {
            assert_eq!(parse_listen_addr(text).unwrap().to_string(), want, "{text}");
        }
        for text in [
            "8080",
            "localhost",
            ":http",
            "127.0.0.1:99999",
            "[::1:80",
            "a b:80",
        ] {
            let e = parse_listen_addr(text).unwrap_err();
            assert!(e.contains(text), "{text}: {e}");
        }
    }

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
