//! Automatic certificates: ACME (RFC 8555) with the TLS-ALPN-01 (RFC 8737), HTTP-01 or
//! DNS-01 challenge, through [instant-acme](https://docs.rs/instant-acme).
//!
//! A listener whose [`TlsSettings`](crate::TlsSettings) carry [`AcmeSettings`] serves the
//! certificate kept in `state_dir`, and [`TlsAcceptor::acme_task`](crate::TlsAcceptor::acme_task)
//! is the one task per process that obtains it and renews it:
//!
//! ```no_run
//! use scb_tls::{AcmeSettings, TlsAcceptor, TlsSettings};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let acme = AcmeSettings::new(["example.com"], "/var/lib/scb/acme").email("ops@example.com");
//! let acceptor = TlsAcceptor::new(TlsSettings::acme(acme))?;
//! // Handshakes fail cleanly until the first certificate is issued; then it is served,
//! // and renewed at two thirds of its lifetime, without a dropped connection.
//! tokio::spawn(acceptor.acme_task().expect("an ACME listener"));
//! # Ok(())
//! # }
//! ```
//!
//! - **State**: the account's key (`account.json`) and the certificate and its key
//!   (`NAME.crt.pem`, `NAME.key.pem`, NAME the first domain) are written to `state_dir`,
//!   mode 0600 in a 0700 directory, each by a rename (never half written). A restart
//!   serves the stored certificate at once and orders nothing until renewal is due.
//! - **Renewal** at two thirds of the certificate's lifetime (Let's Encrypt's 90 days: at
//!   60). The new files are installed by [`TlsAcceptor::reload`](crate::TlsAcceptor::reload),
//!   the same swap a configuration reload makes: new handshakes get the new certificate,
//!   open connections keep theirs.
//! - **Failures** (the CA unreachable or answering garbage, a challenge the CA could not
//!   verify) are logged with the CA's own words, counted in
//!   `scb_acme_failures_total`, and retried after [`AcmeSettings::retry`], doubling up to
//!   an hour. A certificate still valid keeps being served meanwhile.
//! - **Challenges**: TLS-ALPN-01 (the default) is answered by the TLS listener itself: a
//!   handshake offering only ALPN `acme-tls/1` gets the challenge certificate and the
//!   connection is closed without HTTP. HTTP-01 is answered on plain listeners by
//!   [`Http01Layer`] at `/.well-known/acme-challenge/TOKEN`. DNS-01 ([`Dns01`]) publishes
//!   TXT records through RFC 2136 updates signed with TSIG, and is the one for wildcard
//!   names (`*.example.com`).

mod challenge;
mod client;
mod dns01;
#[cfg(feature = "cluster")]
mod fleet;
mod http01;
mod issue;
pub mod on_demand;
mod store;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub(crate) use challenge::Challenges;
pub use dns01::{Dns01, Dns01Error, DnsTransport, Rfc2136, TsigAlgorithm, TsigKey};
pub use http01::{Http01, Http01Layer};
pub use on_demand::{OnDemandRefused, OnDemandSettings};
pub(crate) use store::Store;

use crate::TlsAcceptor;

/// Let's Encrypt's production directory: the default CA.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// The ALPN protocol of a TLS-ALPN-01 validation (RFC 8737 §6.2).
pub(crate) const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// Longest wait between two tries after failures.
const MAX_RETRY: Duration = Duration::from_secs(3600);

/// Which challenge proves control of the names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
#[allow(
    clippy::large_enum_variant,
    reason = "one value per ACME listener, made once per config load: a Box would cost every \
              caller's pattern more than the bytes cost anyone"
)]
pub enum AcmeChallenge {
    /// TLS-ALPN-01: the CA connects to port 443 and the TLS listener answers. Needs
    /// nothing else. The default.
    #[default]
    TlsAlpn01,
    /// HTTP-01: the CA fetches `http://NAME/.well-known/acme-challenge/TOKEN` on port 80,
    /// which a plain listener with [`Http01Layer`] answers.
    Http01,
    /// DNS-01: the CA looks up the TXT record `_acme-challenge.NAME`, which is published
    /// in the zone as [`Dns01`] says. The only challenge for wildcard names, and the only
    /// one that needs nothing reachable from the CA but the zone's servers.
    Dns01(Dns01),
}

impl AcmeChallenge {
    /// The challenge's name in RFC 8555 and in the CA's answers: `tls-alpn-01`,
    /// `http-01` or `dns-01`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::TlsAlpn01 => "tls-alpn-01",
            Self::Http01 => "http-01",
            Self::Dns01(_) => "dns-01",
        }
    }
}

/// What an ACME listener asks for, and where it keeps what it gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcmeSettings {
    pub(crate) domains: Vec<String>,
    pub(crate) email: Option<String>,
    pub(crate) directory: String,
    pub(crate) ca_root: Option<PathBuf>,
    pub(crate) state_dir: PathBuf,
    pub(crate) challenge: AcmeChallenge,
    pub(crate) retry: Duration,
    pub(crate) timeout: Duration,
    /// How long an order waits between setting up its answers and telling the CA: for
    /// the instances of a fleet to set them up too.
    pub(crate) answer_delay: Duration,
    #[cfg(feature = "cluster")]
    pub(crate) cluster: Option<fleet::ClusterRef>,
}

impl AcmeSettings {
    /// One certificate for `domains` (DNS names, wildcards such as `*.example.com` with
    /// [`AcmeChallenge::Dns01`], or IP addresses; the first names the files), kept in
    /// `state_dir`.
    pub fn new(
        domains: impl IntoIterator<Item = impl Into<String>>,
        state_dir: impl Into<PathBuf>,
    ) -> Self {
        Self {
            domains: domains
                .into_iter()
                .map(|d| d.into().to_ascii_lowercase())
                .collect(),
            email: None,
            directory: LETS_ENCRYPT.to_owned(),
            ca_root: None,
            state_dir: state_dir.into(),
            challenge: AcmeChallenge::default(),
            retry: Duration::from_secs(60),
            timeout: Duration::from_secs(30),
            answer_delay: Duration::ZERO,
            #[cfg(feature = "cluster")]
            cluster: None,
        }
    }

    /// Keeps the account, the certificate and its renewal state in `cluster`'s Redis,
    /// shared by every instance of the fleet, one of which orders at a time (see the
    /// `fleet` section of the [module documentation](self)); the state directory keeps a
    /// local copy. Defaults to the state directory alone.
    #[cfg(feature = "cluster")]
    #[must_use]
    pub fn cluster(mut self, cluster: scb_core::cluster::Cluster) -> Self {
        self.cluster = Some(fleet::ClusterRef(cluster));
        self.answer_delay = fleet::ANSWER_DELAY;
        self
    }

    /// The contact address the account is registered with (the CA's expiry warnings go
    /// there). Defaults to none.
    #[must_use]
    pub fn email(mut self, email: impl Into<String>) -> Self {
        self.email = Some(email.into());
        self
    }

    /// The CA's directory URL. Defaults to [`LETS_ENCRYPT`].
    #[must_use]
    pub fn directory(mut self, url: impl Into<String>) -> Self {
        self.directory = url.into();
        self
    }

    /// A PEM file of roots the directory's own certificate is verified against, for a
    /// private CA. Defaults to the system's roots.
    #[must_use]
    pub fn ca_root(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_root = Some(path.into());
        self
    }

    /// The challenge answered. Defaults to [`AcmeChallenge::TlsAlpn01`].
    #[must_use]
    pub fn challenge(mut self, challenge: AcmeChallenge) -> Self {
        self.challenge = challenge;
        self
    }

    /// The wait after a first failure; each further failure doubles it, up to an hour.
    /// Defaults to 60 seconds.
    #[must_use]
    pub fn retry(mut self, wait: Duration) -> Self {
        self.retry = wait;
        self
    }

    /// Longest wait for the CA's answer to one request (connect, TLS and response); past
    /// it the try fails and is retried like any other failure. Defaults to 30 seconds.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The names the certificate covers.
    pub fn domains(&self) -> &[String] {
        &self.domains
    }

    /// Where the account and the certificate are kept.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    pub(crate) fn store(&self) -> Store {
        Store::new(&self.state_dir, &self.domains[0])
    }
}

/// Why an ACME exchange failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AcmeError {
    /// The CA answered with an error, or could not be reached.
    #[error("{0}")]
    Acme(#[from] instant_acme::Error),
    /// The CA could not verify a challenge; its reason.
    #[error("the CA could not verify the {challenge} challenge for {name}: {reason}")]
    Challenge {
        /// `tls-alpn-01`, `http-01` or `dns-01`.
        challenge: &'static str,
        /// The name it was for.
        name: String,
        /// What the CA said.
        reason: String,
    },
    /// The CA offers no challenge of the configured type for a name.
    #[error("the CA offers no {challenge} challenge for {name}")]
    NotOffered {
        /// `tls-alpn-01`, `http-01` or `dns-01`.
        challenge: &'static str,
        /// The name.
        name: String,
    },
    /// The state directory or a file in it could not be read or written.
    #[error("{}: {source}", path.display())]
    State {
        /// The file or directory.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The CA's client has no roots to trust: the `ca_root` file could not be read or
    /// holds no certificate, or the system's store has none.
    #[error(transparent)]
    Roots(#[from] crate::client::RootsError),
    /// DNS-01: the records could not be published or removed, or did not reach the zone's
    /// servers in time.
    #[error("DNS-01: {0}")]
    Dns(#[from] Dns01Error),
    /// The issued certificate could not be installed.
    #[error("the issued certificate does not load: {0}")]
    Install(#[from] crate::TlsError),
    /// Anything else the exchange ran into.
    #[error("{0}")]
    Other(String),
}

/// When the served certificate is due for renewal: at two thirds of its lifetime, or now
/// when there is none or it does not cover every name.
pub(crate) fn renewal_due(acceptor: &TlsAcceptor, domains: &[String]) -> SystemTime {
    let now = SystemTime::now();
    let Some(cert) = acceptor.certificates().into_iter().next() else {
        return now;
    };
    let covers = domains
        .iter()
        .all(|d| d.parse::<std::net::IpAddr>().is_ok() || cert.names.iter().any(|n| n == d));
    if !covers {
        return now;
    }
    let life = cert
        .not_after
        .duration_since(cert.not_before)
        .unwrap_or_default();
    cert.not_before + life * 2 / 3
}

/// How often a certificate that is not due is looked for on disk (and, with a cluster,
/// in Redis): another instance sharing the state may have renewed it.
const SHARED_POLL: Duration = Duration::from_secs(30);
/// How often an instance waiting for another's order looks again.
const WAITING_POLL: Duration = Duration::from_secs(2);

/// Obtains and renews the certificate of `acceptor` forever: the body of
/// [`TlsAcceptor::acme_task`](crate::TlsAcceptor::acme_task). With a cluster, the
/// fleet's loop; otherwise this one, which takes the state directory's lock around each
/// order, so that instances sharing a directory order once, and serves what another
/// instance stored there.
pub(crate) async fn run(
    acceptor: TlsAcceptor,
    settings: AcmeSettings,
    challenges: Arc<Challenges>,
) {
    #[cfg(feature = "cluster")]
    if let Some(cluster) = settings.cluster.clone() {
        return fleet::run(acceptor, settings, challenges, cluster.0).await;
    }
    let names = settings.domains.join(", ");
    let store = settings.store();
    let mut failures: u32 = 0;
    let mut scheduled = None;
    loop {
        adopt_stored(
            &acceptor,
            &store,
            &names,
            "by another instance sharing the state directory",
        );
        let due = renewal_due(&acceptor, &settings.domains);
        if let Ok(wait) = due.duration_since(SystemTime::now()) {
            if scheduled != Some(due) {
                scheduled = Some(due);
                tracing::info!(
                    domains = %names,
                    renew_in_secs = wait.as_secs(),
                    "ACME: certificate valid; renewal scheduled"
                );
            }
            tokio::time::sleep(wait.min(SHARED_POLL)).await;
            continue;
        }
        let lock = match store.lock() {
            Ok(Some(lock)) => Some(lock),
            Ok(None) => {
                tracing::debug!(domains = %names, "ACME: another process is ordering; waiting for its certificate");
                tokio::time::sleep(WAITING_POLL).await;
                continue;
            }
            Err(e) => {
                tracing::warn!(domains = %names, error = %e, "ACME: the state directory's lock cannot be taken; ordering without it");
                None
            }
        };
        if acceptor.certificates().is_empty() && failures == 0 {
            tracing::info!(
                domains = %names,
                directory = %settings.directory,
                "ACME: no certificate yet; requesting one (TLS handshakes for these names fail until it is issued)"
            );
        }
        let outcome = obtain_and_install(&acceptor, &settings, &challenges).await;
        drop(lock);
        match outcome {
            Ok(()) => {
                failures = 0;
                scheduled = None;
            }
            Err(e) => {
                failures += 1;
                failed(&names, &e, &settings, failures, &acceptor).await;
            }
        }
    }
}

/// One order, its certificate checked and installed.
async fn obtain_and_install(
    acceptor: &TlsAcceptor,
    settings: &AcmeSettings,
    challenges: &Challenges,
) -> Result<(), AcmeError> {
    issue::obtain(settings, challenges).await?;
    installable(settings)?;
    acceptor.reload().map_err(AcmeError::Install)?;
    issued(acceptor, &settings.domains.join(", "));
    Ok(())
}

/// Logs and counts an issued certificate now being served.
fn issued(acceptor: &TlsAcceptor, names: &str) {
    metrics::counter!("scb_acme_certificates_issued_total").increment(1);
    let until = acceptor
        .certificates()
        .first()
        .map(|c| scb_core::date::UtcTime::from(c.not_after).to_string())
        .unwrap_or_default();
    tracing::info!(domains = %names, valid_until = %until, "ACME: certificate issued and serving");
}

/// Serves the certificate in the state directory when it is newer than the one being
/// served (another instance renewed it); whether it did.
fn adopt_stored(acceptor: &TlsAcceptor, store: &Store, names: &str, by: &str) -> bool {
    let Ok(stored) = crate::certs::load_issued(&store.files(), &crate::provider::provider()) else {
        return false;
    };
    let newer = acceptor
        .certificates()
        .first()
        .is_none_or(|served| stored.not_after > served.not_after);
    if !newer {
        return false;
    }
    match acceptor.reload() {
        Ok(()) => {
            tracing::info!(domains = %names, "ACME: serving the certificate renewed {by}");
            true
        }
        Err(e) => {
            tracing::warn!(domains = %names, error = %e, "ACME: a stored certificate does not load");
            false
        }
    }
}

/// Whether the certificate just stored loads and covers every name: checked before it
/// replaces the one being served (a reload of ACME files that do not load would leave
/// none, and the next try would order again at once).
fn installable(settings: &AcmeSettings) -> Result<(), AcmeError> {
    let store = settings.store();
    let checked = check_issued(settings, &store).and_then(|()| store.commit());
    if checked.is_err() {
        store.discard();
    }
    checked
}

fn check_issued(settings: &AcmeSettings, store: &Store) -> Result<(), AcmeError> {
    let info = crate::certs::load_issued(&store.staged(), &crate::provider::provider())?;
    let missing: Vec<&str> = settings
        .domains
        .iter()
        .filter(|d| d.parse::<std::net::IpAddr>().is_err() && !info.names.contains(d))
        .map(String::as_str)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(AcmeError::Other(format!(
            "the issued certificate does not name {}",
            missing.join(", ")
        )))
    }
}

/// Logs and counts a failed try, then waits before the next.
async fn failed(
    names: &str,
    error: &AcmeError,
    settings: &AcmeSettings,
    failures: u32,
    acceptor: &TlsAcceptor,
) {
    metrics::counter!("scb_acme_failures_total").increment(1);
    let wait = settings
        .retry
        .saturating_mul(1 << (failures - 1).min(16))
        .min(MAX_RETRY)
        .max(Duration::from_millis(100));
    let serving = if acceptor.certificates().is_empty() {
        "no certificate is served for these names until one is issued"
    } else {
        "the current certificate keeps being served"
    };
    tracing::error!(
        domains = %names,
        error = %error,
        retry_in_secs = wait.as_secs_f64(),
        "ACME: could not obtain a certificate; {serving}"
    );
    tokio::time::sleep(wait).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issued_certificate_that_does_not_load_is_discarded_and_the_served_one_kept() {
        let dir = std::env::temp_dir().join(format!("scb-tls-acme-install-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let settings = AcmeSettings::new(["example.com"], &dir);
        let store = settings.store();
        store
            .write_certificate("SERVED CHAIN", "SERVED KEY")
            .unwrap();
        store.commit().unwrap();
        store
            .write_certificate(
                "-----BEGIN CERTIFICATE-----\nnot one\n-----END CERTIFICATE-----\n",
                "no key",
            )
            .unwrap();
        assert!(installable(&settings).is_err());
        let files = store.files();
        assert_eq!(
            std::fs::read_to_string(&files.cert).unwrap(),
            "SERVED CHAIN"
        );
        assert!(!store.staged().cert.exists() && !store.staged().key.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
