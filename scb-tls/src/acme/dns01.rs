//! DNS-01 (RFC 8555 §8.4): the CA looks up the TXT record at `_acme-challenge.NAME`, which
//! scb publishes with an RFC 2136 dynamic update signed with TSIG (RFC 8945). The only
//! challenge that proves a wildcard name, and one that needs no listener reachable by the
//! CA.
//!
//! ```no_run
//! use scb_tls::acme::{Dns01, Rfc2136, TsigKey};
//! use scb_tls::{AcmeChallenge, AcmeSettings};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The key as `tsig-keygen -a hmac-sha256 scb` writes it; the zone's server lets it
//! // update the zone (BIND: `allow-update { key "scb"; };` or an `update-policy`).
//! let key = TsigKey::from_file("scb", None, "/etc/scb/tsig.key")?;
//! let dns = Dns01::new(Rfc2136::new("10.0.0.53:53".parse()?, "example.com.", key)?);
//! let acme = AcmeSettings::new(["*.example.com", "example.com"], "/var/lib/scb/acme")
//!     .email("ops@example.com")
//!     .challenge(AcmeChallenge::Dns01(dns));
//! # let _ = acme;
//! # Ok(())
//! # }
//! ```
//!
//! One order, step by step:
//!
//! 1. **Publish.** Each pending authorization's value is added to the TXT records at
//!    `_acme-challenge.NAME`. A wildcard `*.NAME` is proved at its base name too, so a
//!    certificate for `*.example.com` and `example.com` puts two values at one name: they
//!    are added to the record set (never created with a "must not exist" prerequisite,
//!    which the second would fail), and later removed by value, which leaves any other
//!    value at that name (another order's, another tool's) alone.
//! 2. **Wait** until the zone's servers answer with every value, authoritatively (the `aa`
//!    flag): the configured server, then each server of the zone's NS set (see
//!    [`Dns01::check_nameservers`]), each asked directly, never through a cache. A CA told
//!    too early may ask a secondary that has not caught up, fail the order, and the next
//!    try waits for the retry.
//! 3. **Validate.** Only then is the CA told that the challenges are ready.
//! 4. **Remove** the records, whether the order succeeded or not. An order abandoned
//!    half-way (a reload replaces the renewal task) removes them from a task of its own.
//!
//! The TSIG secret is never logged nor shown by `Debug`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use base64::Engine as _;
use hickory_net::client::{Client, ClientHandle as _};
use hickory_net::runtime::TokioRuntimeProvider;
use hickory_net::tcp::TcpClientStream;
use hickory_net::udp::UdpClientStream;
use hickory_net::{DnsMultiplexer, NetError};
use hickory_proto::op::{DnsResponse, ResponseCode};
use hickory_proto::rr::rdata::TXT;
use hickory_proto::rr::rdata::tsig::TsigAlgorithm as HickoryAlgorithm;
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType, TSigner};

/// How long one DNS exchange (an update, or a query) may take. A server on the same
/// network answers in milliseconds; five seconds is what `dig` and `nsupdate` wait too.
const DNS_TIMEOUT: Duration = Duration::from_secs(5);

/// The least time a propagation query is given, even once the wait has run out: enough
/// for a server on the same network to answer, so that the last round still asks.
const MIN_QUERY_TIMEOUT: Duration = Duration::from_millis(200);

/// TSIG's fudge: how far apart the signer's and the server's clocks may be. 300 seconds,
/// as RFC 8945 §10 recommends and `nsupdate` sends.
const TSIG_FUDGE: u16 = 300;

/// The label the CA looks under (RFC 8555 §8.4).
const CHALLENGE_LABEL: &str = "_acme-challenge";

/// The port DNS servers listen on, and the one an NS record's server is asked on.
const DNS_PORT: u16 = 53;

/// A TSIG algorithm scb can sign with: those of RFC 8945 §6 that hickory implements.
/// HMAC-MD5 (deprecated there), HMAC-SHA1 and HMAC-SHA224 are not among them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TsigAlgorithm {
    /// `hmac-sha256`: `tsig-keygen`'s default. The default.
    #[default]
    HmacSha256,
    /// `hmac-sha384`.
    HmacSha384,
    /// `hmac-sha512`.
    HmacSha512,
}

impl TsigAlgorithm {
    /// The algorithm's name as BIND and RFC 8945 write it.
    pub fn name(self) -> &'static str {
        match self {
            Self::HmacSha256 => "hmac-sha256",
            Self::HmacSha384 => "hmac-sha384",
            Self::HmacSha512 => "hmac-sha512",
        }
    }

    fn hickory(self) -> HickoryAlgorithm {
        match self {
            Self::HmacSha256 => HickoryAlgorithm::HmacSha256,
            Self::HmacSha384 => HickoryAlgorithm::HmacSha384,
            Self::HmacSha512 => HickoryAlgorithm::HmacSha512,
        }
    }
}

impl fmt::Display for TsigAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TsigAlgorithm {
    type Err = Dns01Error;

    /// `hmac-sha256`, `hmac-sha384` or `hmac-sha512`, in any case, with or without the
    /// final dot of a DNS name.
    fn from_str(s: &str) -> Result<Self, Dns01Error> {
        let name = s.strip_suffix('.').unwrap_or(s).to_ascii_lowercase();
        [Self::HmacSha256, Self::HmacSha384, Self::HmacSha512]
            .into_iter()
            .find(|a| a.name() == name)
            .ok_or_else(|| Dns01Error::Algorithm { name: s.to_owned() })
    }
}

/// How updates reach the zone's server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum DnsTransport {
    /// One datagram each way, as `nsupdate` sends. The default.
    #[default]
    Udp,
    /// A TCP connection per order: for a firewall that passes DNS over TCP only.
    Tcp,
}

/// A TSIG key (RFC 8945): the name the server knows it by, its algorithm and its secret.
/// `Debug` shows the name and the algorithm, never the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct TsigKey {
    name: Name,
    algorithm: TsigAlgorithm,
    secret: Vec<u8>,
}

impl TsigKey {
    /// The key `name` with the raw (decoded) `secret`.
    ///
    /// # Errors
    ///
    /// [`Dns01Error::Name`] when `name` is not a DNS name, [`Dns01Error::Secret`] when the
    /// secret is empty.
    pub fn new(
        name: &str,
        algorithm: TsigAlgorithm,
        secret: impl Into<Vec<u8>>,
    ) -> Result<Self, Dns01Error> {
        let secret = secret.into();
        if secret.is_empty() {
            return Err(Dns01Error::Secret {
                path: None,
                reason: "the TSIG secret is empty".into(),
            });
        }
        Ok(Self {
            name: dns_name(name)?,
            algorithm,
            secret,
        })
    }

    /// The key `name` read from `path`: either a bare base64 secret, or BIND's `key`
    /// clauses as `tsig-keygen` writes them (`key "scb" { algorithm hmac-sha256; secret
    /// "..."; };`), of which the one named `name` is taken. Its algorithm must be
    /// `algorithm` when that is given; when not, it is the clause's, or
    /// [`TsigAlgorithm::HmacSha256`] for a bare secret.
    ///
    /// # Errors
    ///
    /// [`Dns01Error::SecretFile`] when the file cannot be read, [`Dns01Error::Secret`]
    /// when it holds no usable secret for `name` (or one of another algorithm), and
    /// [`Dns01Error::Name`] when `name` is not a DNS name.
    pub fn from_file(
        name: &str,
        algorithm: Option<TsigAlgorithm>,
        path: impl AsRef<Path>,
    ) -> Result<Self, Dns01Error> {
        let path = path.as_ref();
        let name = dns_name(name)?;
        let text = std::fs::read_to_string(path).map_err(|source| Dns01Error::SecretFile {
            path: path.to_owned(),
            source,
        })?;
        let (algorithm, secret) =
            parse_secret(&text, &name, algorithm).map_err(|reason| Dns01Error::Secret {
                path: Some(path.to_owned()),
                reason,
            })?;
        Ok(Self {
            name,
            algorithm,
            secret,
        })
    }

    /// The key's name, as BIND writes it (without the final dot).
    pub fn name(&self) -> String {
        self.name.to_ascii().trim_end_matches('.').to_owned()
    }

    /// The key's algorithm.
    pub fn algorithm(&self) -> TsigAlgorithm {
        self.algorithm
    }

    fn signer(&self) -> Result<TSigner, Dns01Error> {
        TSigner::new(
            self.secret.clone(),
            self.algorithm.hickory(),
            self.name.clone(),
            TSIG_FUDGE,
        )
        .map_err(|_| Dns01Error::Algorithm {
            name: self.algorithm.name().to_owned(),
        })
    }
}

impl fmt::Debug for TsigKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TsigKey")
            .field("name", &self.name.to_ascii())
            .field("algorithm", &self.algorithm)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Where the TXT records go: the primary server of a zone that accepts RFC 2136 updates
/// signed with a TSIG key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rfc2136 {
    server: SocketAddr,
    zone: Name,
    key: TsigKey,
    transport: DnsTransport,
}

impl Rfc2136 {
    /// Updates to `zone` (`example.com.`; the final dot may be left out, as there is no
    /// origin it could be relative to), sent to `server` and signed with `key`.
    ///
    /// # Errors
    ///
    /// [`Dns01Error::Name`] when `zone` is not a DNS name.
    pub fn new(server: SocketAddr, zone: &str, key: TsigKey) -> Result<Self, Dns01Error> {
        Ok(Self {
            server,
            zone: dns_name(zone)?,
            key,
            transport: DnsTransport::default(),
        })
    }

    /// How the updates are sent. Defaults to [`DnsTransport::Udp`].
    #[must_use]
    pub fn transport(mut self, transport: DnsTransport) -> Self {
        self.transport = transport;
        self
    }

    /// The server the updates go to.
    pub fn server(&self) -> SocketAddr {
        self.server
    }

    /// The zone, with its final dot.
    pub fn zone(&self) -> String {
        self.zone.to_ascii()
    }

    /// Checks that this zone holds the CA's record for `domain` (`_acme-challenge.` and
    /// the name, without a wildcard's `*.`), as an update can only change its own zone.
    ///
    /// # Errors
    ///
    /// [`Dns01Error::OutsideZone`] when it does not, [`Dns01Error::Name`] when `domain` is
    /// not a DNS name.
    pub fn check_domain(&self, domain: &str) -> Result<(), Dns01Error> {
        record_name(&self.zone, domain).map(drop)
    }

    /// A client that signs every request; its background task is spawned here and ends
    /// when the client is dropped.
    async fn update_client(&self) -> Result<Client<TokioRuntimeProvider>, Dns01Error> {
        client(
            self.server,
            self.transport,
            Some(self.key.signer()?),
            DNS_TIMEOUT,
        )
        .await
        .map_err(|e| Dns01Error::Unreachable {
            server: self.server,
            detail: e.to_string(),
        })
    }

    /// Sends one update and reads its answer.
    async fn update(
        &self,
        client: &mut Client<TokioRuntimeProvider>,
        record: &Record,
        action: Action,
    ) -> Result<(), Dns01Error> {
        let sent = match action {
            Action::Add => {
                client
                    .append(record.clone(), self.zone.clone(), false)
                    .await
            }
            Action::Remove => {
                client
                    .delete_by_rdata(record.clone(), self.zone.clone())
                    .await
            }
        };
        match sent {
            // The client never turns an error code into an `Err`: the answer must be read.
            Ok(answer) if answer.metadata.response_code == ResponseCode::NoError => Ok(()),
            Ok(answer) => Err(Dns01Error::Update {
                server: self.server,
                action: action.verb(),
                name: record.name.to_ascii(),
                zone: self.zone.to_ascii(),
                rcode: u16::from(answer.metadata.response_code),
            }),
            Err(e) if transport_failed(&e) => Err(Dns01Error::Unreachable {
                server: self.server,
                detail: e.to_string(),
            }),
            // An answer that does not verify. A server that refuses the signature answers
            // NOTAUTH with a TSIG error (BADSIG, BADKEY, BADTIME) and an empty MAC, which
            // hickory reports as a MAC it does not support ("Please file an issue ... to
            // support truncated HMACs"): said as what it is, the TSIG error itself being in
            // the server's log.
            Err(e) => {
                let detail = e.to_string();
                let detail = if detail.contains("truncated HMACs") {
                    "its answer carries no MAC".to_owned()
                } else {
                    detail
                };
                Err(Dns01Error::Signature {
                    server: self.server,
                    key: self.key.name(),
                    detail,
                })
            }
        }
    }
}

/// What the CA's TXT records are published with, and how long and where scb waits for
/// them before the CA is told to look.
///
/// Each order adds one value per name to `_acme-challenge.NAME` (a wildcard's at its base
/// name), waits until the zone's servers answer with all of them authoritatively, only
/// then tells the CA, and removes the values it added when the order is over, whether it
/// succeeded or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dns01 {
    rfc2136: Rfc2136,
    ttl: u32,
    propagation_timeout: Duration,
    propagation_interval: Duration,
    propagation_delay: Duration,
    check_nameservers: bool,
    /// The port NS-set servers are asked on: 53, except in this crate's tests, whose one
    /// server listens on a port of its own.
    nameserver_port: u16,
}

impl Dns01 {
    /// Records published through `rfc2136`.
    pub fn new(rfc2136: Rfc2136) -> Self {
        Self {
            rfc2136,
            ttl: 60,
            propagation_timeout: Duration::from_secs(120),
            propagation_interval: Duration::from_secs(2),
            propagation_delay: Duration::ZERO,
            check_nameservers: true,
            nameserver_port: DNS_PORT,
        }
    }

    /// The records' TTL, in seconds. Short, so that a resolver that cached an earlier
    /// order's value (or this one's absence) forgets it soon. Defaults to 60 seconds.
    #[must_use]
    pub fn ttl(mut self, seconds: u32) -> Self {
        self.ttl = seconds;
        self
    }

    /// Longest wait for the zone's servers to answer with the records; past it the try
    /// fails (naming the servers still without them) and is retried like any other
    /// failure. Defaults to 120 seconds.
    #[must_use]
    pub fn propagation_timeout(mut self, timeout: Duration) -> Self {
        self.propagation_timeout = timeout;
        self
    }

    /// How often the servers are asked while waiting. Defaults to 2 seconds.
    #[must_use]
    pub fn propagation_interval(mut self, interval: Duration) -> Self {
        self.propagation_interval = interval;
        self
    }

    /// A further wait once every server checked answers with the records, before the CA
    /// is told: for servers behind the ones scb can ask (an anycast provider's nodes
    /// that sync after the address scb reaches). Defaults to none.
    #[must_use]
    pub fn propagation_delay(mut self, delay: Duration) -> Self {
        self.propagation_delay = delay;
        self
    }

    /// Whether the wait covers the zone's NS set besides the configured server: the
    /// servers the CA asks, found by asking the configured server for the zone's NS
    /// records (addresses from their glue, else the system's resolver), each asked on
    /// port 53. Turn it off when this host cannot reach them (the configured server then
    /// has the last word, and [`propagation_delay`](Self::propagation_delay) can stand in
    /// for the secondaries' lag). Defaults to on.
    #[must_use]
    pub fn check_nameservers(mut self, check: bool) -> Self {
        self.check_nameservers = check;
        self
    }

    /// Where the records are published.
    pub fn rfc2136(&self) -> &Rfc2136 {
        &self.rfc2136
    }

    #[cfg(test)]
    pub(crate) fn nameserver_port(mut self, port: u16) -> Self {
        self.nameserver_port = port;
        self
    }
}

/// Why a DNS-01 setting was refused, or publishing the CA's records failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Dns01Error {
    /// A zone, key or domain that is not a DNS name.
    #[error("{name:?} is not a DNS name: {reason}")]
    Name {
        /// The text given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A TSIG algorithm scb cannot sign with.
    #[error(
        "unknown TSIG algorithm {name:?}: expected \"hmac-sha256\", \"hmac-sha384\" or \"hmac-sha512\""
    )]
    Algorithm {
        /// The name given.
        name: String,
    },
    /// The TSIG secret file could not be read.
    #[error("{}: {source}", path.display())]
    SecretFile {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The TSIG secret (or its file) is not usable.
    #[error("{}{reason}", path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default())]
    Secret {
        /// The file, when it came from one.
        path: Option<PathBuf>,
        /// What is wrong (never the secret itself).
        reason: String,
    },
    /// The CA's record for a domain would be outside the zone.
    #[error("{record} is not in the zone {zone}, which updates can change")]
    OutsideZone {
        /// The record's name (`_acme-challenge.` and the domain).
        record: String,
        /// The zone.
        zone: String,
    },
    /// The server could not be reached, or did not answer in time.
    #[error("the DNS server {server} did not answer: {detail}")]
    Unreachable {
        /// The server.
        server: SocketAddr,
        /// What the DNS client said.
        detail: String,
    },
    /// The server's answer to a signed update did not verify: it refused the signature.
    #[error(
        "the DNS server {server} refused the TSIG signature of key {key:?} (a wrong key name, \
         secret or algorithm, or clocks more than {TSIG_FUDGE} s apart; the server's log says \
         which): {detail}"
    )]
    Signature {
        /// The server.
        server: SocketAddr,
        /// The key's name.
        key: String,
        /// What the DNS client said.
        detail: String,
    },
    /// The server answered an update with an error code.
    #[error(
        "the DNS server {server} refused to {action} the TXT record {name} in {zone}: {}",
        rcode_text(*rcode)
    )]
    Update {
        /// The server.
        server: SocketAddr,
        /// `add` or `remove`.
        action: &'static str,
        /// The record's name.
        name: String,
        /// The zone.
        zone: String,
        /// The response code (RFC 2136 §2.2).
        rcode: u16,
    },
    /// The zone's NS set could not be found at the configured server.
    #[error("cannot find the nameservers of {zone} at {server}: {detail}")]
    Nameservers {
        /// The zone.
        zone: String,
        /// The server asked.
        server: SocketAddr,
        /// What went wrong.
        detail: String,
    },
    /// Some servers still answered without the records when the wait ran out.
    #[error(
        "the TXT records were not visible everywhere after {}s: {}",
        timeout.as_secs_f64(),
        waiting.join("; ")
    )]
    NotPropagated {
        /// The wait ([`Dns01::propagation_timeout`]).
        timeout: Duration,
        /// Each record and server still without it, and how it answered.
        waiting: Vec<String>,
    },
}

/// An update's response code, with what it usually means for an update.
fn rcode_text(rcode: u16) -> String {
    let (name, meaning) = match rcode {
        2 => ("SERVFAIL", "the server failed"),
        4 => ("NOTIMP", "the server does not take dynamic updates"),
        5 => (
            "REFUSED",
            "the server does not let this key update this name (BIND: allow-update or \
             update-policy)",
        ),
        9 => (
            "NOTAUTH",
            "the server is not authoritative for the zone, or does not know the key",
        ),
        10 => ("NOTZONE", "the name is not in the zone"),
        _ => return format!("response code {rcode}"),
    };
    format!("{name} ({meaning})")
}

/// Whether the exchange failed before any answer came.
fn transport_failed(error: &NetError) -> bool {
    matches!(
        error,
        NetError::Timeout | NetError::Io(_) | NetError::NoConnections | NetError::Busy
    )
}

#[derive(Clone, Copy, Debug)]
enum Action {
    Add,
    Remove,
}

impl Action {
    fn verb(self) -> &'static str {
        match self {
            Self::Add => "add",
            Self::Remove => "remove",
        }
    }
}

/// A DNS name, absolute whether or not it ends with a dot.
fn dns_name(text: &str) -> Result<Name, Dns01Error> {
    let invalid = |reason: String| Dns01Error::Name {
        name: text.to_owned(),
        reason,
    };
    if text.is_empty() || text == "." {
        return Err(invalid("empty".into()));
    }
    let mut name = Name::from_ascii(text).map_err(|e| invalid(e.to_string()))?;
    name.set_fqdn(true);
    Ok(name)
}

/// Where the CA looks for `domain`'s value: `_acme-challenge.` and the domain, without a
/// wildcard's `*.` (RFC 8555 §8.4), which must be in `zone`.
fn record_name(zone: &Name, domain: &str) -> Result<Name, Dns01Error> {
    let base = domain.strip_prefix("*.").unwrap_or(domain);
    let name = dns_name(&format!("{CHALLENGE_LABEL}.{base}"))?;
    if zone.zone_of(&name) {
        Ok(name)
    } else {
        Err(Dns01Error::OutsideZone {
            record: name.to_ascii(),
            zone: zone.to_ascii(),
        })
    }
}

/// A client for `server`, signing with `signer` if given, each exchange bounded by
/// `timeout`.
async fn client(
    server: SocketAddr,
    transport: DnsTransport,
    signer: Option<TSigner>,
    timeout: Duration,
) -> Result<Client<TokioRuntimeProvider>, NetError> {
    let (client, background) = match transport {
        DnsTransport::Udp => {
            let stream = UdpClientStream::builder(server, TokioRuntimeProvider::new())
                .with_timeout(Some(timeout))
                .with_signer(signer)
                .build();
            let (client, background) = Client::<TokioRuntimeProvider>::from_sender(stream);
            (client, tokio::spawn(background))
        }
        DnsTransport::Tcp => {
            let (connect, handle) =
                TcpClientStream::new(server, None, Some(timeout), TokioRuntimeProvider::new());
            let stream = tokio::time::timeout(timeout, connect)
                .await
                .map_err(|_| NetError::Timeout)??;
            let mut multiplexer = DnsMultiplexer::new(stream, handle).with_timeout(timeout);
            if let Some(signer) = signer {
                multiplexer = multiplexer.with_signer(signer);
            }
            let (client, background) = Client::<TokioRuntimeProvider>::from_sender(multiplexer);
            (client, tokio::spawn(background))
        }
    };
    // The background task ends by itself once the client (and its clones) are gone.
    drop(background);
    Ok(client)
}

/// The records an order has added, removed by [`remove`](Self::remove), or, if the order
/// is dropped before that (its task aborted), by a task spawned on drop.
pub(crate) struct Published {
    dns: Dns01,
    /// Every record the server may have added: those it accepted, and one whose answer
    /// never came (removing a record that is not there is no error, RFC 2136 §2.5.4). An
    /// update the server answered with a refusal changed nothing (updates are atomic,
    /// §3.7), so its record is not here.
    records: Vec<Record>,
    client: Option<Client<TokioRuntimeProvider>>,
}

impl fmt::Debug for Published {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Published")
            .field("zone", &self.dns.rfc2136.zone.to_ascii())
            .field("records", &self.records.len())
            .finish_non_exhaustive()
    }
}

impl Published {
    pub(crate) fn new(dns: &Dns01) -> Self {
        Self {
            dns: dns.clone(),
            records: Vec::new(),
            client: None,
        }
    }

    /// Adds `value` to the TXT records of `domain`'s challenge name (`domain` may be a
    /// wildcard or its base name: both are proved at the same name).
    pub(crate) async fn add(&mut self, domain: &str, value: &str) -> Result<(), Dns01Error> {
        let rfc2136 = &self.dns.rfc2136;
        let name = record_name(&rfc2136.zone, domain)?;
        let record = Record::from_rdata(
            name,
            self.dns.ttl,
            RData::TXT(TXT::new(vec![value.to_owned()])),
        );
        let client = match &mut self.client {
            Some(client) => client,
            None => self.client.insert(rfc2136.update_client().await?),
        };
        let added = rfc2136.update(client, &record, Action::Add).await;
        if matches!(added, Ok(()) | Err(Dns01Error::Unreachable { .. })) {
            self.records.push(record);
        }
        added
    }

    /// Whether no record has been added (every authorization was already valid).
    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The names of the records added so far, for the log.
    pub(crate) fn names(&self) -> String {
        record_names(&self.records)
    }

    /// Waits until the configured server, and unless turned off every server of the
    /// zone's NS set, answers authoritatively with every record added; then waits the
    /// [`propagation_delay`](Dns01::propagation_delay).
    pub(crate) async fn propagated(&self) -> Result<(), Dns01Error> {
        let started = Instant::now();
        let deadline = started + self.dns.propagation_timeout;
        let mut expected: BTreeMap<Name, Vec<Vec<u8>>> = BTreeMap::new();
        for record in &self.records {
            if let RData::TXT(txt) = &record.data {
                expected
                    .entry(record.name.clone())
                    .or_default()
                    .push(txt.txt_data.concat());
            }
        }
        let servers = self.servers().await?;
        loop {
            let mut waiting = Vec::new();
            for (name, values) in &expected {
                for server in &servers {
                    if let Err(why) = server.answers_with(name, values, deadline).await {
                        waiting.push(format!("{} at {}: {why}", name.to_ascii(), server.label));
                    }
                }
            }
            if waiting.is_empty() {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Dns01Error::NotPropagated {
                    timeout: self.dns.propagation_timeout,
                    waiting,
                });
            }
            tracing::debug!(waiting = %waiting.join("; "), "ACME: DNS-01 records not visible everywhere yet");
            tokio::time::sleep(self.dns.propagation_interval.min(deadline - now)).await;
        }
        let labels: Vec<&str> = servers.iter().map(|s| s.label.as_str()).collect();
        tracing::info!(
            records = %self.names(),
            servers = %labels.join(", "),
            after_secs = started.elapsed().as_secs_f64(),
            "ACME: DNS-01 records visible at the zone's servers"
        );
        tokio::time::sleep(self.dns.propagation_delay).await;
        Ok(())
    }

    /// Removes every record added, trying each even when one fails; the first failure is
    /// returned.
    pub(crate) async fn remove(mut self) -> Result<(), Dns01Error> {
        let records = std::mem::take(&mut self.records);
        remove(&self.dns.rfc2136, self.client.take(), &records).await
    }

    /// The configured server, and the zone's NS set unless that check is off.
    async fn servers(&self) -> Result<Vec<Checked>, Dns01Error> {
        let rfc2136 = &self.dns.rfc2136;
        let mut servers = vec![Checked {
            label: rfc2136.server.to_string(),
            addrs: Ok(vec![rfc2136.server]),
            transport: rfc2136.transport,
        }];
        if !self.dns.check_nameservers {
            return Ok(servers);
        }
        let failed = |detail: String| Dns01Error::Nameservers {
            zone: rfc2136.zone.to_ascii(),
            server: rfc2136.server,
            detail,
        };
        let answer = ask(
            rfc2136.server,
            rfc2136.transport,
            &rfc2136.zone,
            RecordType::NS,
            None,
        )
        .await
        .map_err(|e| failed(e.to_string()))?;
        let names: Vec<&Name> = answer
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::NS(ns) => Some(&ns.0),
                _ => None,
            })
            .collect();
        if names.is_empty() {
            return Err(failed(format!(
                "no NS records in the answer ({})",
                answer.metadata.response_code
            )));
        }
        for ns in names {
            let glue: Vec<SocketAddr> = answer
                .additionals
                .iter()
                .filter(|r| r.name == *ns)
                .filter_map(|r| match &r.data {
                    RData::A(a) => Some(IpAddr::V4(a.0)),
                    RData::AAAA(aaaa) => Some(IpAddr::V6(aaaa.0)),
                    _ => None,
                })
                .map(|ip| SocketAddr::new(ip, self.dns.nameserver_port))
                .collect();
            let addrs = if glue.is_empty() {
                let host = ns.to_ascii();
                tokio::net::lookup_host((host.trim_end_matches('.'), self.dns.nameserver_port))
                    .await
                    .map(Iterator::collect)
                    .map_err(|e| format!("has no address: {e}"))
            } else {
                Ok(glue)
            };
            let label = match &addrs {
                Ok(addrs) => {
                    let addrs: Vec<String> = addrs.iter().map(ToString::to_string).collect();
                    format!("{} ({})", ns.to_ascii(), addrs.join(", "))
                }
                Err(_) => ns.to_ascii(),
            };
            servers.push(Checked {
                label,
                addrs,
                transport: DnsTransport::Udp,
            });
        }
        Ok(servers)
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        if self.records.is_empty() {
            return;
        }
        let records = std::mem::take(&mut self.records);
        let rfc2136 = self.dns.rfc2136.clone();
        let names = record_names(&records);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(e) = remove(&rfc2136, None, &records).await {
                        tracing::warn!(records = %names, error = %e, "ACME: could not remove the DNS-01 records of an abandoned order");
                    }
                });
            }
            Err(_) => {
                tracing::warn!(records = %names, "ACME: the DNS-01 records of an abandoned order are left in the zone (no runtime to remove them)");
            }
        }
    }
}

/// Removes `records`, each tried even when one fails.
async fn remove(
    rfc2136: &Rfc2136,
    client: Option<Client<TokioRuntimeProvider>>,
    records: &[Record],
) -> Result<(), Dns01Error> {
    if records.is_empty() {
        return Ok(());
    }
    let mut client = match client {
        Some(client) => client,
        None => rfc2136.update_client().await?,
    };
    let mut first = None;
    for record in records {
        if let Err(e) = rfc2136.update(&mut client, record, Action::Remove).await {
            first.get_or_insert(e);
        }
    }
    match first {
        None => {
            tracing::info!(records = %record_names(records), "ACME: DNS-01 records removed");
            Ok(())
        }
        Some(e) => Err(e),
    }
}

/// The distinct names of `records`, joined for the log.
fn record_names(records: &[Record]) -> String {
    let mut names: Vec<String> = records.iter().map(|r| r.name.to_ascii()).collect();
    names.dedup();
    names.join(", ")
}

/// One server the records must be seen at.
struct Checked {
    label: String,
    /// Its addresses (any one answering will do), or why it has none.
    addrs: Result<Vec<SocketAddr>, String>,
    transport: DnsTransport,
}

impl Checked {
    /// Whether the server answers for `name` authoritatively with every value of
    /// `values`; if not, how it answered.
    async fn answers_with(
        &self,
        name: &Name,
        values: &[Vec<u8>],
        deadline: Instant,
    ) -> Result<(), String> {
        let addrs = self.addrs.as_ref().map_err(Clone::clone)?;
        let mut failure = String::from("has no address");
        for &addr in addrs {
            let answer =
                match ask(addr, self.transport, name, RecordType::TXT, Some(deadline)).await {
                    Ok(answer) => answer,
                    Err(e) => {
                        failure = format!("did not answer ({e})");
                        continue;
                    }
                };
            if !answer.metadata.authoritative {
                return Err(format!(
                    "answers without authority ({}), so it is not a server of the zone",
                    answer.metadata.response_code
                ));
            }
            let present: Vec<Vec<u8>> = answer
                .answers
                .iter()
                .filter_map(|r| match &r.data {
                    RData::TXT(txt) => Some(txt.txt_data.concat()),
                    _ => None,
                })
                .collect();
            let missing = values.iter().filter(|v| !present.contains(v)).count();
            return if missing == 0 {
                Ok(())
            } else {
                Err(format!(
                    "{missing} of {} values not there yet",
                    values.len()
                ))
            };
        }
        Err(failure)
    }
}

/// An unsigned query to `server`, given up at `deadline` if that comes before
/// [`DNS_TIMEOUT`] (a server that never answers must not stretch the propagation wait by
/// a whole timeout per query).
async fn ask(
    server: SocketAddr,
    transport: DnsTransport,
    name: &Name,
    kind: RecordType,
    deadline: Option<Instant>,
) -> Result<DnsResponse, NetError> {
    let timeout = deadline.map_or(DNS_TIMEOUT, |d| {
        d.saturating_duration_since(Instant::now())
            .clamp(MIN_QUERY_TIMEOUT, DNS_TIMEOUT)
    });
    let mut client = client(server, transport, None, timeout).await?;
    client.query(name.clone(), DNSClass::IN, kind).await
}

/// A TSIG key's algorithm and secret from the text of its file (see
/// [`TsigKey::from_file`]); the error is a reason, never showing the secret.
fn parse_secret(
    text: &str,
    name: &Name,
    configured: Option<TsigAlgorithm>,
) -> Result<(TsigAlgorithm, Vec<u8>), String> {
    let clauses = key_clauses(text);
    let (algorithm, secret) = if clauses.is_empty() {
        let secret: String = text.split_whitespace().collect();
        if secret.is_empty() {
            return Err("is empty: expected a base64 secret or tsig-keygen's output".into());
        }
        (configured.unwrap_or_default(), secret)
    } else {
        let names = || {
            let names: Vec<String> = clauses.iter().map(|c| format!("{:?}", c.name)).collect();
            names.join(", ")
        };
        let clause = clauses
            .iter()
            .find(|c| dns_name(&c.name).is_ok_and(|n| n.to_lowercase() == name.to_lowercase()))
            .ok_or_else(|| {
                format!(
                    "has no key {:?} (it has {})",
                    name.to_ascii().trim_end_matches('.'),
                    names()
                )
            })?;
        let secret = clause
            .secret
            .clone()
            .ok_or_else(|| format!("key {:?} has no secret", clause.name))?;
        let algorithm = match (&clause.algorithm, configured) {
            (None, configured) => configured.unwrap_or_default(),
            (Some(text), configured) => {
                let found = text.parse::<TsigAlgorithm>().map_err(|e| e.to_string())?;
                if configured.is_some_and(|c| c != found) {
                    return Err(format!(
                        "key {:?} is {found} there, not the configured {}",
                        clause.name,
                        configured.unwrap_or_default()
                    ));
                }
                found
            }
        };
        (algorithm, secret)
    };
    // Padding optional: some tools write the secret without it.
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let secret = engine.decode(secret.as_bytes()).map_err(
        |_| "the secret is not base64 (expected a base64 secret or tsig-keygen's output)",
    )?;
    if secret.is_empty() {
        return Err("the secret is empty".into());
    }
    Ok((algorithm, secret))
}

/// One `key "NAME" { algorithm ALG; secret "BASE64"; };` clause of a BIND config file.
#[derive(Debug, PartialEq, Eq)]
struct KeyClause {
    name: String,
    algorithm: Option<String>,
    secret: Option<String>,
}

/// The `key` clauses of a BIND config file (comments skipped): what `tsig-keygen` writes,
/// or a `named.conf` fragment holding several keys. A `key` that names a key inside
/// another statement (`allow-update { key "scb"; };`) is not a clause.
fn key_clauses(text: &str) -> Vec<KeyClause> {
    let tokens = tokens(text);
    let mut clauses = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let is_clause = tokens[i] == "key" && tokens.get(i + 2).is_some_and(|t| t == "{");
        if !is_clause {
            i += 1;
            continue;
        }
        let mut clause = KeyClause {
            name: tokens[i + 1].clone(),
            algorithm: None,
            secret: None,
        };
        i += 3;
        // Statements up to the clause's closing brace: `WORD VALUE ;`.
        while i < tokens.len() && tokens[i] != "}" {
            let value = tokens
                .get(i + 1)
                .filter(|v| *v != ";" && *v != "}")
                .cloned();
            match tokens[i].as_str() {
                "algorithm" => clause.algorithm = value,
                "secret" => clause.secret = value,
                _ => {}
            }
            while i < tokens.len() && tokens[i] != ";" && tokens[i] != "}" {
                i += 1;
            }
            if tokens.get(i).is_some_and(|t| t == ";") {
                i += 1;
            }
        }
        clauses.push(clause);
    }
    clauses
}

/// BIND config text as words, quoted strings (unquoted) and the punctuation `{`, `}`,
/// `;`, without its comments (`#`, `//`, `/* */`).
fn tokens(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        let Some(c) = rest.chars().next() else {
            return tokens;
        };
        if c == '#' || rest.starts_with("//") {
            rest = rest.find('\n').map_or("", |end| &rest[end..]);
        } else if let Some(comment) = rest.strip_prefix("/*") {
            rest = comment.find("*/").map_or("", |end| &comment[end + 2..]);
        } else if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted.find('"').unwrap_or(quoted.len());
            tokens.push(quoted[..end].to_owned());
            rest = quoted.get(end + 1..).unwrap_or("");
        } else if matches!(c, '{' | '}' | ';') {
            tokens.push(c.to_string());
            rest = &rest[1..];
        } else {
            let end = rest
                .find(|c: char| c.is_whitespace() || matches!(c, '{' | '}' | ';' | '"'))
                .unwrap_or(rest.len());
            tokens.push(rest[..end].to_owned());
            rest = &rest[end..];
        }
    }
}

#[cfg(test)]
mod tests;
