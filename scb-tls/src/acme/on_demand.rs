//! On-demand certificates: a handshake for a name the listener has no certificate for asks
//! the operator's `ask` URL whether the name is allowed, then obtains a certificate for
//! it while the handshake waits (Caddy's on-demand TLS).
//!
//! In order, for a name without a certificate:
//!
//! 1. **The name is checked** before anything is asked: a DNS name of at least two labels,
//!    253 bytes at most, letters, digits and hyphens only, not an IP address.
//! 2. **Refusals are remembered**: a name the `ask` URL refused is refused at once for
//!    [`refused_for`](OnDemandSettings::refused_for) (10 minutes), a name whose `ask` or
//!    order failed for [`failed_for`](OnDemandSettings::failed_for) (30 s), without asking
//!    again: a client cannot make scb flood the ask service or the CA.
//! 3. **`GET {ask}?domain=NAME`**: a 200 allows the name, anything else refuses it (3 s at
//!    most).
//! 4. **At most [`per_hour`](OnDemandSettings::per_hour) names (10) are ordered per
//!    hour** by this process (orders, not asks: names a client makes up do not use up
//!    the hour); past that, handshakes for new names fail at once until the hour is
//!    over.
//! 5. **The order** (TLS-ALPN-01 on this listener, or HTTP-01) runs in a task of its own:
//!    a client that gives up does not stop it, and every handshake for the name joins it.
//!    The handshake waits [`wait`](OnDemandSettings::wait) at most (8 s; scb's
//!    `handshake_timeout` bounds the whole handshake, 10 s by default). A validation from
//!    the CA (ALPN `acme-tls/1`) never starts one.
//!
//! Certificates are kept in the state directory (one per name), loaded at start, and
//! renewed at two thirds of their lifetime by the listener's ACME task; at most
//! [`max_names`](OnDemandSettings::max_names) are held.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use rustls::sign::CertifiedKey;
use tokio::sync::watch;

use super::{AcmeError, AcmeSettings, Challenges, issue};
use crate::certs::CertInfo;

/// What an on-demand listener asks and how it obtains certificates; see the
/// [module documentation](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnDemandSettings {
    pub(crate) ask: String,
    /// Everything of an ACME listener's settings but the names.
    pub(crate) acme: AcmeSettings,
    pub(crate) wait: Duration,
    pub(crate) per_hour: u32,
    pub(crate) refused_for: Duration,
    pub(crate) failed_for: Duration,
    pub(crate) max_names: usize,
}

impl OnDemandSettings {
    /// Certificates for the names `ask` allows (an `http://` or `https://` URL, asked
    /// with `?domain=NAME`), kept in `state_dir`.
    pub fn new(ask: impl Into<String>, state_dir: impl Into<PathBuf>) -> Self {
        Self {
            ask: ask.into(),
            acme: AcmeSettings::new(Vec::<String>::new(), state_dir),
            wait: Duration::from_secs(8),
            per_hour: 10,
            refused_for: Duration::from_secs(600),
            failed_for: Duration::from_secs(30),
            max_names: 10_000,
        }
    }

    /// The ACME settings orders are made with (email, directory, CA root, challenge,
    /// timeouts; the names are each handshake's). Defaults to [`AcmeSettings::new`]'s.
    #[must_use]
    pub fn acme(mut self, acme: AcmeSettings) -> Self {
        self.acme = acme;
        self
    }

    /// The longest a handshake waits for its name's certificate. Defaults to 8 s.
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// How many names may be ordered per hour. Defaults to 10.
    #[must_use]
    pub fn per_hour(mut self, count: u32) -> Self {
        self.per_hour = count;
        self
    }

    /// How long a name the `ask` URL refused is refused without asking again. Defaults
    /// to 10 minutes.
    #[must_use]
    pub fn refused_for(mut self, time: Duration) -> Self {
        self.refused_for = time;
        self
    }

    /// How long a name whose `ask` or order failed is refused. Defaults to 30 s.
    #[must_use]
    pub fn failed_for(mut self, time: Duration) -> Self {
        self.failed_for = time;
        self
    }

    /// The most names held. Defaults to 10,000.
    #[must_use]
    pub fn max_names(mut self, count: usize) -> Self {
        self.max_names = count;
        self
    }

    /// The `ask` URL.
    pub fn ask_url(&self) -> &str {
        &self.ask
    }
}

/// Why a handshake got no on-demand certificate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OnDemandRefused {
    /// Not a name a certificate can be ordered for.
    #[error("not a DNS name scb orders certificates for")]
    InvalidName,
    /// The `ask` URL said no (now or a short while ago).
    #[error("the ask URL does not allow this name")]
    NotAllowed,
    /// Asking or ordering failed (now or a short while ago).
    #[error("no certificate could be obtained: {0}")]
    Failed(String),
    /// This hour's orders are used up.
    #[error("the per-hour limit of new names is reached")]
    OverLimit,
    /// The certificate did not come within the wait.
    #[error("no certificate within the wait")]
    TimedOut,
    /// The most names are held already.
    #[error("the most names an on-demand listener holds are held")]
    Full,
}

/// What an order's task tells the handshakes waiting for it: nothing yet, then its
/// result.
type Outcome = watch::Receiver<Option<Result<(), OnDemandRefused>>>;

/// An issued name's certificate, and what it covers.
#[derive(Debug)]
struct Held {
    key: Arc<CertifiedKey>,
    info: CertInfo,
}

/// The state of an on-demand listener: certificates held, names refused, orders running.
#[derive(Debug)]
pub(crate) struct OnDemand {
    settings: OnDemandSettings,
    challenges: Arc<Challenges>,
    held: RwLock<HashMap<String, Held>>,
    refused: Mutex<HashMap<String, (Instant, OnDemandRefused)>>,
    /// The hour (since the epoch) of the count, and the count.
    ordered: Mutex<(u64, u32)>,
    running: Mutex<HashMap<String, Outcome>>,
}

/// Whether `name` is one scb orders on demand: a DNS name (letters, digits, hyphens in
/// labels of 1 to 63, at least two labels, 253 bytes at most), not an address.
pub(crate) fn valid_name(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    name.len() <= 253
        && name.parse::<IpAddr>().is_err()
        && name.split('.').count() >= 2
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
        // A top-level label of digits only would be an address in disguise.
        && !name.rsplit('.').next().is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit()))
}

impl OnDemand {
    /// The listener's state, with the certificates its state directory holds.
    pub(crate) fn load(settings: OnDemandSettings, challenges: Arc<Challenges>) -> Self {
        let provider = crate::provider::provider();
        let mut held = HashMap::new();
        if let Ok(entries) = std::fs::read_dir(&settings.acme.state_dir) {
            for entry in entries.flatten() {
                let file = entry.file_name().to_string_lossy().into_owned();
                let Some(name) = file.strip_suffix(".crt.pem") else {
                    continue;
                };
                if !valid_name(name) {
                    continue;
                }
                let store = super::Store::new(&settings.acme.state_dir, name);
                if let Ok(loaded) = crate::certs::load_files(&store.files(), &provider) {
                    held.insert(
                        name.to_owned(),
                        Held {
                            key: loaded.key,
                            info: loaded.info,
                        },
                    );
                }
            }
        }
        Self {
            settings,
            challenges,
            held: RwLock::new(held),
            refused: Mutex::default(),
            ordered: Mutex::default(),
            running: Mutex::default(),
        }
    }

    /// The certificate held for `name`.
    pub(crate) fn certificate(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        self.held
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&name)
            .map(|h| Arc::clone(&h.key))
    }

    /// What the held certificates cover.
    pub(crate) fn infos(&self) -> Vec<CertInfo> {
        self.held
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(|h| h.info.clone())
            .collect()
    }

    /// Makes sure `name` has a certificate, obtaining one if it is allowed; waits at most
    /// the settings' `wait`.
    pub(crate) async fn obtain(self: &Arc<Self>, name: &str) -> Result<(), OnDemandRefused> {
        let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        if self.certificate(&name).is_some() {
            return Ok(());
        }
        if !valid_name(&name) {
            return Err(OnDemandRefused::InvalidName);
        }
        if let Some(refusal) = self.refusal(&name) {
            return Err(refusal);
        }
        let mut done = self.join_or_start(&name)?;
        let outcome =
            tokio::time::timeout(self.settings.wait, done.wait_for(Option::is_some)).await;
        match outcome {
            Ok(Ok(result)) => result.clone().unwrap_or(Err(OnDemandRefused::TimedOut)),
            Ok(Err(_)) => Err(OnDemandRefused::Failed("the order's task ended".into())),
            Err(_) => Err(OnDemandRefused::TimedOut),
        }
    }

    fn refusal(&self, name: &str) -> Option<OnDemandRefused> {
        let mut refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        match refused.get(name) {
            Some((until, why)) if *until > Instant::now() => Some(why.clone()),
            Some(_) => {
                refused.remove(name);
                None
            }
            None => None,
        }
    }

    fn refuse(&self, name: &str, why: OnDemandRefused) {
        let time = match why {
            OnDemandRefused::NotAllowed => self.settings.refused_for,
            _ => self.settings.failed_for,
        };
        let mut refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
        // Bounded as the held names are: a flood of names cannot grow it without end.
        if refused.len() >= self.settings.max_names {
            let now = Instant::now();
            refused.retain(|_, (until, _)| *until > now);
            if refused.len() >= self.settings.max_names {
                refused.clear();
            }
        }
        refused.insert(name.to_owned(), (Instant::now() + time, why));
    }

    /// Joins the order running for `name`, or starts one if this hour allows.
    fn join_or_start(self: &Arc<Self>, name: &str) -> Result<Outcome, OnDemandRefused> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(done) = running.get(name) {
            return Ok(done.clone());
        }
        if self
            .held
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
            >= self.settings.max_names
        {
            return Err(OnDemandRefused::Full);
        }
        let (tell, done) = watch::channel(None);
        running.insert(name.to_owned(), done.clone());
        let this = Arc::clone(self);
        let name = name.to_owned();
        // Its own task: a handshake that gives up does not stop the order.
        tokio::spawn(async move {
            let result = this.ask_and_order(&name).await;
            if let Err(why) = &result {
                this.refuse(&name, why.clone());
            }
            this.running
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&name);
            let _ = tell.send(Some(result));
        });
        Ok(done)
    }

    async fn ask_and_order(&self, name: &str) -> Result<(), OnDemandRefused> {
        match ask(&self.settings.ask, name).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(
                    domain = name,
                    "ACME on demand: the ask URL refused the name"
                );
                return Err(OnDemandRefused::NotAllowed);
            }
            Err(e) => {
                tracing::warn!(domain = name, error = %e, "ACME on demand: the ask URL could not be asked");
                return Err(OnDemandRefused::Failed(e));
            }
        }
        // Orders are counted, not asks: names a client makes up (refused by the ask URL)
        // must not use up the hour for real ones.
        let hour = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() / 3600);
        {
            let mut ordered = self.ordered.lock().unwrap_or_else(PoisonError::into_inner);
            if ordered.0 != hour {
                *ordered = (hour, 0);
            }
            if ordered.1 >= self.settings.per_hour {
                tracing::warn!(
                    domain = name,
                    per_hour = self.settings.per_hour,
                    "ACME on demand: this hour's orders are used up"
                );
                return Err(OnDemandRefused::OverLimit);
            }
            ordered.1 += 1;
        }
        tracing::info!(domain = name, "ACME on demand: ordering a certificate");
        self.order(name).await.map_err(|e| {
            metrics::counter!("scb_acme_failures_total").increment(1);
            tracing::error!(domain = name, error = %e, "ACME on demand: could not obtain a certificate");
            OnDemandRefused::Failed(e.to_string())
        })
    }

    /// Orders `name`'s certificate, stores it, and holds it.
    async fn order(&self, name: &str) -> Result<(), AcmeError> {
        let mut settings = self.settings.acme.clone();
        settings.domains = vec![name.to_owned()];
        let store = settings.store();
        #[cfg(feature = "cluster")]
        if let Some(cluster) = &settings.cluster {
            super::fleet::order_one(&cluster.0, &settings, &self.challenges).await?;
        } else {
            let _lock = store.lock()?;
            issue::obtain(&settings, &self.challenges).await?;
            super::installable(&settings)?;
        }
        #[cfg(not(feature = "cluster"))]
        {
            let _lock = store.lock()?;
            issue::obtain(&settings, &self.challenges).await?;
            super::installable(&settings)?;
        }
        let loaded = crate::certs::load_files(&store.files(), &crate::provider::provider())?;
        self.held
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                name.to_owned(),
                Held {
                    key: loaded.key,
                    info: loaded.info,
                },
            );
        metrics::counter!("scb_acme_certificates_issued_total").increment(1);
        tracing::info!(
            domain = name,
            "ACME on demand: certificate issued and serving"
        );
        Ok(())
    }

    /// Renews the held certificates that are due, one after the other: the body of an
    /// on-demand listener's ACME task.
    pub(crate) async fn renew_forever(self: Arc<Self>) {
        loop {
            let now = SystemTime::now();
            let due: Vec<String> = self
                .held
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .filter(|(_, h)| {
                    let life = h
                        .info
                        .not_after
                        .duration_since(h.info.not_before)
                        .unwrap_or_default();
                    h.info.not_before + life * 2 / 3 <= now
                })
                .map(|(name, _)| name.clone())
                .collect();
            for name in due {
                if let Err(e) = self.order(&name).await {
                    metrics::counter!("scb_acme_failures_total").increment(1);
                    tracing::error!(domain = %name, error = %e, "ACME on demand: renewal failed; the current certificate keeps being served");
                }
            }
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
    }
}

/// Asks `url` about `name`: `Ok(true)` for a 200.
async fn ask(url: &str, name: &str) -> Result<bool, String> {
    use http_body_util::BodyExt as _;
    let separator = if url.contains('?') { '&' } else { '?' };
    let uri: http::Uri = format!("{url}{separator}domain={name}")
        .parse()
        .map_err(|e: http::uri::InvalidUri| e.to_string())?;
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(ask_tls())
        .https_or_http()
        .enable_http1()
        .build();
    let client: hyper_util::client::legacy::Client<_, http_body_util::Empty<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(https);
    let request = http::Request::get(uri)
        .header(http::header::USER_AGENT, "scb on-demand TLS")
        .body(http_body_util::Empty::new())
        .map_err(|e| e.to_string())?;
    let answer = tokio::time::timeout(Duration::from_secs(3), async {
        let res = client.request(request).await.map_err(|e| e.to_string())?;
        let status = res.status();
        // Read (and drop) the body: a keep-alive connection is not left half-read.
        let _ = res.into_body().collect().await;
        Ok::<_, String>(status)
    })
    .await
    .map_err(|_| "no answer within 3 s".to_owned())??;
    Ok(answer == http::StatusCode::OK)
}

/// The TLS client of an `https://` ask URL: the system's roots.
fn ask_tls() -> rustls::ClientConfig {
    // An `ask` over plain http needs no roots, so an empty system store is no error here.
    crate::client::client_config(
        crate::client::roots(None).unwrap_or_else(|_| rustls::RootCertStore::empty()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_before_anything_is_asked() {
        for good in [
            "shop.example.com",
            "a-b.example",
            "xn--bcher-kva.example",
            "a.b.c.d",
        ] {
            assert!(valid_name(good), "{good}");
        }
        for bad in [
            "localhost",
            "127.0.0.1",
            "::1",
            "1.2.3.4.5",
            "-a.example",
            "a-.example",
            "a..example",
            "a_b.example",
            "*.example.com",
            "example.com/x",
            &format!("{}.example", "a".repeat(64)),
            &format!("{}.example", "a.".repeat(130)),
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
