//! Who the client is when proxies stand in between: [`TrustedProxies`] and
//! [`client_ip`].
//!
//! A request's peer is the client, unless the peer is a proxy the operator trusts; then
//! the client is what that proxy wrote in `X-Forwarded-For`, read from the right: the
//! nearest address that is not itself a trusted proxy. Addresses further left were
//! written by whoever the first untrusted hop was, so they may be anything.
//!
//! ```
//! use std::net::IpAddr;
//! use http::HeaderMap;
//! use scb_core::client_ip::{TrustedProxies, client_ip};
//!
//! let trusted = TrustedProxies::new(["10.0.0.0/8"]).unwrap();
//! let mut headers = HeaderMap::new();
//! headers.insert("x-forwarded-for", "203.0.113.9, 10.0.0.7".parse().unwrap());
//! let peer: IpAddr = "10.0.0.1".parse().unwrap();
//! assert_eq!(client_ip(peer, &headers, &trusted), "203.0.113.9".parse::<IpAddr>().unwrap());
//! // An untrusted peer is the client, whatever it claims.
//! let peer: IpAddr = "198.51.100.4".parse().unwrap();
//! assert_eq!(client_ip(peer, &headers, &trusted), peer);
//! ```

use std::net::IpAddr;

use http::HeaderMap;
use ipnet::IpNet;

/// A list of networks (`10.0.0.0/8`, `::1/128`; a bare address is a /32 or /128).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Networks(Vec<IpNet>);

impl Networks {
    /// The networks and addresses given.
    ///
    /// # Errors
    ///
    /// The first entry that is neither a network nor an address, and its position.
    pub fn new<'a>(nets: impl IntoIterator<Item = &'a str>) -> Result<Self, InvalidNetwork> {
        nets.into_iter()
            .enumerate()
            .map(|(index, net)| {
                net.parse::<IpNet>()
                    .or_else(|_| net.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| InvalidNetwork {
                        index,
                        entry: net.to_owned(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }

    /// Whether `ip` is in one of the networks (IPv4-mapped IPv6 addresses count as
    /// their IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The position of the first of these networks that is not wholly inside one of
    /// `wider`'s, or `None` when every one is (an empty list is inside any).
    pub fn first_outside(&self, wider: &Self) -> Option<usize> {
        self.0
            .iter()
            .position(|net| !wider.0.iter().any(|w| w.contains(net)))
    }
}

/// The networks in the form they parse from, separated by `, `.
impl std::fmt::Display for Networks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, net) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{net}")?;
        }
        Ok(())
    }
}

/// Which clients may tell us who *their* client was.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies(Networks);

impl TrustedProxies {
    /// Trust the given networks (`10.0.0.0/8`, `::1/128`, a bare address is a /32 or
    /// /128). Defaults to none.
    ///
    /// # Errors
    ///
    /// The first entry that is neither a network nor an address, and its position.
    pub fn new<'a>(nets: impl IntoIterator<Item = &'a str>) -> Result<Self, InvalidNetwork> {
        Networks::new(nets).map(Self)
    }

    /// Whether `ip` is one of the trusted proxies.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        self.0.contains(ip)
    }

    /// Whether no proxy is trusted (the default).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The position of the first trusted network that `wider` does not trust wholly, or
    /// `None` when `wider` trusts all of these: whether this list only narrows `wider`.
    pub fn first_outside(&self, wider: &Self) -> Option<usize> {
        self.0.first_outside(&wider.0)
    }
}

/// The trusted networks, as [`Networks`] shows them (`10.0.0.0/8, ::1/128`).
impl std::fmt::Display for TrustedProxies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// An entry given to [`Networks::new`] that is neither a network nor an address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{entry:?} is neither a network (10.0.0.0/8) nor an address")]
#[non_exhaustive]
pub struct InvalidNetwork {
    /// Its position in the list, from 0.
    pub index: usize,
    /// The entry as given.
    pub entry: String,
}

/// The client of a request that came from `peer` with `headers`: `peer` itself unless it
/// is trusted, else the rightmost address in `X-Forwarded-For` that is not trusted (or
/// the leftmost one, when every hop is trusted). An entry that is not an address ends
/// the walk at the hop before it: nothing left of it can be believed.
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &TrustedProxies) -> IpAddr {
    let peer = peer.to_canonical();
    if trusted.is_empty() || !trusted.trusts(peer) {
        return peer;
    }
    let mut client = peer;
    let fields = headers.get_all("x-forwarded-for").iter().rev();
    for field in fields {
        let Ok(list) = field.to_str() else {
            return client;
        };
        for entry in list.rsplit(',') {
            let Ok(ip) = entry.trim().parse::<IpAddr>() else {
                return client;
            };
            client = ip.to_canonical();
            if !trusted.trusts(client) {
                return client;
            }
        }
    }
    client
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn forwarded(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append("x-forwarded-for", v.parse().unwrap());
        }
        headers
    }

    #[test]
    fn the_rightmost_untrusted_hop_is_the_client() {
        let trusted = TrustedProxies::new(["10.0.0.0/8", "::1"]).unwrap();
        let chain = forwarded(&["1.1.1.1, 2.2.2.2", "10.1.1.1"]);
        assert_eq!(client_ip(ip("10.0.0.1"), &chain, &trusted), ip("2.2.2.2"));
        assert_eq!(client_ip(ip("::1"), &chain, &trusted), ip("2.2.2.2"));
        // Untrusted peers are their own client, however long their story.
        assert_eq!(client_ip(ip("3.3.3.3"), &chain, &trusted), ip("3.3.3.3"));
        // Nobody trusted: the header is never read.
        let none = TrustedProxies::default();
        assert_eq!(client_ip(ip("10.0.0.1"), &chain, &none), ip("10.0.0.1"));
    }

    #[test]
    fn networks_and_addresses_parse_and_the_first_bad_entry_is_named() {
        assert!(TrustedProxies::new(["10.0.0.0/8", "192.168.1.1", "fd00::/8"]).is_ok());
        assert_eq!(
            TrustedProxies::new(["10.0.0.0/8", "nonsense"]),
            Err(InvalidNetwork {
                index: 1,
                entry: "nonsense".to_owned()
            })
        );
    }

    #[test]
    fn a_narrower_list_is_inside_a_wider_one_and_the_first_entry_outside_is_named() {
        let wide = TrustedProxies::new(["10.0.0.0/8", "::1"]).unwrap();
        let narrow = TrustedProxies::new(["10.1.0.0/16", "10.2.3.4", "::1"]).unwrap();
        assert_eq!(narrow.first_outside(&wide), None);
        assert_eq!(TrustedProxies::default().first_outside(&wide), None);
        let wider = TrustedProxies::new(["10.1.0.0/16", "0.0.0.0/0"]).unwrap();
        assert_eq!(wider.first_outside(&wide), Some(1));
        assert_eq!(narrow.first_outside(&TrustedProxies::default()), Some(0));
        assert_eq!(narrow.to_string(), "10.1.0.0/16, 10.2.3.4/32, ::1/128");
    }

    #[test]
    fn garbage_stops_the_walk_at_the_last_believable_hop() {
        let trusted = TrustedProxies::new(["10.0.0.0/8"]).unwrap();
        let chain = forwarded(&["1.1.1.1, nonsense, 10.2.2.2"]);
        assert_eq!(client_ip(ip("10.0.0.1"), &chain, &trusted), ip("10.2.2.2"));
        let all_trusted = forwarded(&["10.3.3.3, 10.2.2.2"]);
        assert_eq!(
            client_ip(ip("10.0.0.1"), &all_trusted, &trusted),
            ip("10.3.3.3")
        );
        let mapped = forwarded(&["::ffff:5.5.5.5"]);
        assert_eq!(client_ip(ip("10.0.0.1"), &mapped, &trusted), ip("5.5.5.5"));
    }
}
