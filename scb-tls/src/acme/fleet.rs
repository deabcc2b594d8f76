//! ACME in a fleet (feature `cluster`): the certificate, its key, the account and the
//! renewal state live in the fleet's Redis, and one instance at a time orders a name.
//!
//! Each instance's loop, per certificate:
//!
//! 1. **Takes what the fleet has**: a certificate in `acme:cert:NAME` other than the one in
//!    its state directory is written there (it stays the local copy that a restart with
//!    Redis away serves), checked, and served. Looked at every 30 s, every 2 s while one
//!    is due.
//! 2. **When one is due**, and the fleet's backoff after failures allows, takes the lease
//!    `lock:acme:NAME` (60 s, renewed while held; its fencing token checked by Redis
//!    before every write). The holder looks again (another may have just finished),
//!    then orders, under [`Lease::guard`]: a holder that loses its lease stops, before
//!    another instance can take over. The others wait for the result.
//! 3. **Challenge answers are shared**: the CA's TLS-ALPN-01 or HTTP-01 validation may
//!    reach any instance behind the balancer, so the holder publishes its answers in
//!    `acme:answers` and every instance sets them up too (polled every 500 ms), and the
//!    CA is told only 1.5 s after they are published. DNS-01 needs nothing shared.
//! 4. **The account** (`acme:account`, by directory) is the fleet's: one registration
//!    for all.
//! 5. **Redis away**: an instance that has a certificate keeps serving it; one that needs
//!    a certificate and has not reached Redis for 30 s (at once when it has none at all)
//!    orders alone, under the state directory's lock, and says so: the fleet may then
//!    order a name more than once.
//!
//! What is in Redis is private material (the keys, as PEM): whoever can read that Redis
//! can impersonate the names. It must not be reachable by anyone else, and should have a
//! password (`redis://:PASSWORD@host`).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use scb_core::cluster::{Cluster, Lease};

use super::challenge::Answers;
use super::{
    AcmeError, AcmeSettings, Challenges, SHARED_POLL, WAITING_POLL, adopt_stored, failed,
    installable, issue, issued, renewal_due,
};
use crate::TlsAcceptor;

/// A cluster in [`AcmeSettings`], compared by the connection it is (settings are
/// compared to tell whether a reload changed them).
#[derive(Clone, Debug)]
pub(crate) struct ClusterRef(pub(crate) Cluster);

impl PartialEq for ClusterRef {
    fn eq(&self, other: &Self) -> bool {
        self.0.instance() == other.0.instance()
    }
}

impl Eq for ClusterRef {}

/// How long an order may hold the name's lock between renewals.
const LEASE: Duration = Duration::from_secs(60);
/// How often every instance looks for answers to set up.
const ANSWERS_POLL: Duration = Duration::from_millis(500);
/// How long the holder waits between publishing answers and telling the CA: three polls,
/// so that every instance has them when the CA comes.
pub(crate) const ANSWER_DELAY: Duration = Duration::from_millis(1500);
/// How long an instance that needs a certificate waits for Redis before ordering alone.
const ALONE_AFTER: Duration = Duration::from_secs(30);
/// The shared answers' key, which expires if its holder dies before removing it.
const ANSWERS: &str = "acme:answers";
const ANSWERS_TTL: Duration = Duration::from_secs(600);

/// What the fleet keeps of one certificate.
#[derive(Debug, Default)]
struct Stored {
    chain: Option<String>,
    key: Option<String>,
    failures: u32,
    next_try_ms: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The fleet's loop for one certificate; see the [module documentation](self).
pub(crate) async fn run(
    acceptor: TlsAcceptor,
    settings: AcmeSettings,
    challenges: Arc<Challenges>,
    cluster: Cluster,
) {
    let names = settings.domains.join(", ");
    let first = &settings.domains[0];
    let cert_key = format!("acme:cert:{first}");
    let lock = format!("lock:acme:{first}");
    let _mirror = AbortOnDrop(tokio::spawn(mirror_answers(
        cluster.clone(),
        Arc::clone(&challenges),
    )));
    let mut unreachable_since: Option<Instant> = None;
    let mut scheduled = None;
    loop {
        let stored = read(&cluster, &cert_key).await;
        match &stored {
            Ok(stored) if stored.chain.is_none() && !acceptor.certificates().is_empty() => {
                // The fleet has none (a new Redis, one restarted empty, a reload that added
                // the cluster): this instance's own goes there, so none orders again.
                unreachable_since = None;
                share(&cluster, &lock, &cert_key, &settings, &names).await;
            }
            Ok(stored) => {
                unreachable_since = None;
                adopt(&acceptor, &settings, stored, &names);
            }
            Err(_) => {
                unreachable_since.get_or_insert_with(Instant::now);
            }
        }
        let due = renewal_due(&acceptor, &settings.domains);
        if let Ok(wait) = due.duration_since(SystemTime::now()) {
            if scheduled != Some(due) {
                scheduled = Some(due);
                tracing::info!(domains = %names, renew_in_secs = wait.as_secs(), "ACME: certificate valid; renewal scheduled (fleet)");
            }
            // After an outage, look again soon: the fleet's state is taken up (or filled)
            // as soon as Redis answers.
            let poll = if unreachable_since.is_some() {
                WAITING_POLL
            } else {
                SHARED_POLL
            };
            tokio::time::sleep(wait.min(poll)).await;
            continue;
        }
        if let Ok(stored) = &stored
            && stored.next_try_ms > now_ms()
        {
            let wait = Duration::from_millis(stored.next_try_ms - now_ms());
            tokio::time::sleep(wait.min(WAITING_POLL)).await;
            continue;
        }
        match cluster.acquire(&lock, LEASE).await {
            Ok(Some(lease)) => {
                order(
                    &acceptor,
                    &settings,
                    &challenges,
                    &cluster,
                    &lease,
                    &cert_key,
                )
                .await;
                lease.release().await;
                scheduled = None;
            }
            Ok(None) => {
                tracing::debug!(domains = %names, "ACME: another instance of the fleet is ordering");
                tokio::time::sleep(WAITING_POLL).await;
            }
            Err(e) => {
                let away = unreachable_since.get_or_insert_with(Instant::now).elapsed();
                if !acceptor.certificates().is_empty() && away < ALONE_AFTER {
                    tokio::time::sleep(WAITING_POLL).await;
                    continue;
                }
                tracing::warn!(domains = %names, error = %e, "ACME: the cluster's Redis is unavailable; ordering alone (other instances may order these names too)");
                alone(&acceptor, &settings, &challenges, &names).await;
            }
        }
    }
}

/// Orders while holding `lease`, and stores the result (or the failure) for the fleet.
async fn order(
    acceptor: &TlsAcceptor,
    settings: &AcmeSettings,
    challenges: &Arc<Challenges>,
    cluster: &Cluster,
    lease: &Lease,
    cert_key: &str,
) {
    let names = settings.domains.join(", ");
    // Another instance may have stored a certificate while this one waited for the lock.
    if let Ok(stored) = read(cluster, cert_key).await {
        adopt(acceptor, settings, &stored, &names);
        if renewal_due(acceptor, &settings.domains) > SystemTime::now() {
            return;
        }
    }
    if acceptor.certificates().is_empty() {
        tracing::info!(domains = %names, directory = %settings.directory, "ACME: no certificate yet; this instance orders one for the fleet");
    }
    match obtain_under(lease, cluster, settings, challenges).await {
        Ok(()) => {
            let reset = [("failures", b"0".to_vec()), ("next_try_ms", b"0".to_vec())];
            if !store_for_fleet(lease, cluster, settings, cert_key, reset).await {
                tracing::warn!(domains = %names, "ACME: the certificate could not be stored for the fleet (lock lost or Redis away); served here only");
            }
            match acceptor.reload() {
                Ok(()) => issued(acceptor, &names),
                Err(e) => {
                    tracing::error!(domains = %names, error = %e, "ACME: the issued certificate does not load");
                }
            }
        }
        Err(e) => {
            let failures = read(cluster, cert_key)
                .await
                .map_or(0, |s| s.failures)
                .saturating_add(1);
            let wait = settings
                .retry
                .saturating_mul(1 << (failures - 1).min(16))
                .min(super::MAX_RETRY)
                .max(Duration::from_millis(100));
            let next = now_ms().saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
            let _ = lease
                .hset_fenced(
                    cert_key,
                    vec![
                        ("failures".into(), failures.to_string().into_bytes()),
                        ("next_try_ms".into(), next.to_string().into_bytes()),
                    ],
                )
                .await;
            metrics::counter!("scb_acme_failures_total").increment(1);
            tracing::error!(domains = %names, error = %e, retry_in_secs = wait.as_secs_f64(), "ACME: could not obtain a certificate for the fleet");
        }
    }
}

/// Stores the certificate this instance serves (from its state directory) for the fleet,
/// under the name's lock, unless another instance stored one meanwhile.
async fn share(
    cluster: &Cluster,
    lock: &str,
    cert_key: &str,
    settings: &AcmeSettings,
    names: &str,
) {
    let Ok(Some(lease)) = cluster.acquire(lock, LEASE).await else {
        return;
    };
    let empty = read(cluster, cert_key)
        .await
        .is_ok_and(|stored| stored.chain.is_none());
    if empty && store_for_fleet(&lease, cluster, settings, cert_key, []).await {
        tracing::info!(domains = %names, "ACME: this instance's certificate stored for the fleet");
    }
    lease.release().await;
}

/// Orders under `lease`: the account the fleet shares, the challenges' answers published
/// for the other instances while the order runs (any of them may be asked), and the order
/// abandoned if the lease is lost. `Ok` when the state directory holds an installable
/// certificate.
async fn obtain_under(
    lease: &Lease,
    cluster: &Cluster,
    settings: &AcmeSettings,
    challenges: &Arc<Challenges>,
) -> Result<(), AcmeError> {
    account_from_fleet(cluster, settings).await;
    let publish = AbortOnDrop(tokio::spawn(publish_answers(
        cluster.clone(),
        Arc::clone(challenges),
    )));
    challenges.set_ordering(true);
    let outcome = lease.guard(issue::obtain(settings, challenges)).await;
    challenges.set_ordering(false);
    drop(publish);
    let _ = cluster.del("acme", ANSWERS).await;
    match outcome {
        Ok(result) => result.and_then(|()| installable(settings)),
        Err(lost) => Err(AcmeError::Other(format!("{lost}; the order was abandoned"))),
    }
}

/// Stores the state directory's certificate and key under `cert_key` for the fleet,
/// fenced by `lease`, with the `extra` fields, then the account; whether the certificate
/// was written (not when the lease was lost or Redis is away).
async fn store_for_fleet<const N: usize>(
    lease: &Lease,
    cluster: &Cluster,
    settings: &AcmeSettings,
    cert_key: &str,
    extra: [(&str, Vec<u8>); N],
) -> bool {
    let store = settings.store();
    let (Some(chain), Ok(key)) = (
        read_chain(&store),
        std::fs::read_to_string(store.files().key),
    ) else {
        return false;
    };
    let mut fields = vec![
        ("chain".to_owned(), chain.into_bytes()),
        ("key".to_owned(), key.into_bytes()),
    ];
    fields.extend(
        extra
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value)),
    );
    let written = lease.hset_fenced(cert_key, fields).await;
    account_to_fleet(cluster, lease, settings).await;
    matches!(written, Ok(Some(_)))
}

/// One name's certificate for an on-demand listener in a fleet, into the state directory:
/// the fleet's if it has a usable one, else ordered by this instance under the name's
/// lease (and stored for the others), else, when another instance holds the lease, the
/// one it stores (waited for, a minute at most). Without Redis, ordered alone.
pub(crate) async fn order_one(
    cluster: &Cluster,
    settings: &AcmeSettings,
    challenges: &Arc<Challenges>,
) -> Result<(), AcmeError> {
    let name = &settings.domains[0];
    let cert_key = format!("acme:cert:{name}");
    let lock = format!("lock:acme:{name}");
    let take = |stored: &Stored| -> bool {
        let (Some(chain), Some(key)) = (&stored.chain, &stored.key) else {
            return false;
        };
        settings
            .store()
            .write_certificate(chain, key)
            .and_then(|()| installable(settings))
            .is_ok()
    };
    let deadline = Instant::now() + LEASE;
    loop {
        match read(cluster, &cert_key).await {
            Ok(stored) if take(&stored) => return Ok(()),
            Ok(_) => {}
            Err(_) => {
                // Redis away: as a lone instance.
                let _lock = settings.store().lock()?;
                issue::obtain(settings, challenges).await?;
                return installable(settings);
            }
        }
        match cluster.acquire(&lock, LEASE).await {
            Ok(Some(lease)) => {
                let outcome = obtain_under(&lease, cluster, settings, challenges).await;
                if outcome.is_ok() {
                    store_for_fleet(&lease, cluster, settings, &cert_key, []).await;
                }
                lease.release().await;
                return outcome;
            }
            Ok(None) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Ok(None) => {
                return Err(AcmeError::Other(
                    "another instance of the fleet held the order for a minute".into(),
                ));
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

/// Orders without the fleet (Redis unreachable): under the state directory's lock, as a
/// lone instance does.
async fn alone(
    acceptor: &TlsAcceptor,
    settings: &AcmeSettings,
    challenges: &Challenges,
    names: &str,
) {
    let store = settings.store();
    let Ok(Some(_lock)) = store.lock() else {
        tokio::time::sleep(WAITING_POLL).await;
        return;
    };
    adopt_stored(
        acceptor,
        &store,
        names,
        "by another instance sharing the state directory",
    );
    if renewal_due(acceptor, &settings.domains) > SystemTime::now() {
        return;
    }
    if let Err(e) = super::obtain_and_install(acceptor, settings, challenges).await {
        failed(names, &e, settings, 1, acceptor).await;
    }
}

/// Writes the fleet's certificate to the state directory and serves it, when it is not
/// the one there already.
fn adopt(acceptor: &TlsAcceptor, settings: &AcmeSettings, stored: &Stored, names: &str) {
    let (Some(chain), Some(key)) = (&stored.chain, &stored.key) else {
        return;
    };
    let store = settings.store();
    if read_chain(&store).as_deref() == Some(chain.as_str()) {
        // Written here already; served unless a reload of the files failed.
        if acceptor.certificates().is_empty() {
            let _ = acceptor.reload();
        }
        return;
    }
    let written = store
        .write_certificate(chain, key)
        .and_then(|()| installable(settings));
    match written {
        Ok(()) => match acceptor.reload() {
            Ok(()) => {
                tracing::info!(domains = %names, "ACME: serving the fleet's certificate");
            }
            Err(e) => {
                tracing::warn!(domains = %names, error = %e, "ACME: the fleet's certificate does not load");
            }
        },
        // Expired, not covering the names, or not a certificate: ordered anew when due.
        Err(e) => {
            tracing::warn!(domains = %names, error = %e, "ACME: the fleet's stored certificate is not usable");
        }
    }
}

/// The chain in the state directory, if any.
fn read_chain(store: &super::Store) -> Option<String> {
    std::fs::read_to_string(store.files().cert).ok()
}

/// What the fleet keeps of the certificate `key`.
async fn read(cluster: &Cluster, key: &str) -> Result<Stored, scb_core::cluster::ClusterError> {
    let fields = cluster.hgetall("acme", key).await?;
    let mut stored = Stored::default();
    for (field, value) in fields {
        let text = String::from_utf8_lossy(&value).into_owned();
        match field.as_str() {
            "chain" => stored.chain = Some(text),
            "key" => stored.key = Some(text),
            "failures" => stored.failures = text.parse().unwrap_or(0),
            "next_try_ms" => stored.next_try_ms = text.parse().unwrap_or(0),
            _ => {}
        }
    }
    Ok(stored)
}

/// The fleet's account for this directory, written to the state directory where the
/// order reads it.
async fn account_from_fleet(cluster: &Cluster, settings: &AcmeSettings) {
    let Ok(Some(json)) = cluster
        .hget("acme", "acme:account", &settings.directory)
        .await
    else {
        return;
    };
    let store = settings.store();
    if store.read_account().ok().flatten().as_deref() != Some(&json[..])
        && let Err(e) = store.write_account(&json)
    {
        tracing::warn!(error = %e, "ACME: the fleet's account could not be written to the state directory");
    }
}

/// The account the order used, for the fleet (when it has none for this directory).
async fn account_to_fleet(cluster: &Cluster, lease: &Lease, settings: &AcmeSettings) {
    let Ok(Some(json)) = settings.store().read_account() else {
        return;
    };
    if matches!(
        cluster.hget("acme", "acme:account", &settings.directory).await,
        Ok(Some(stored)) if stored == json
    ) {
        return;
    }
    let _ = lease
        .hset_fenced("acme:account", vec![(settings.directory.clone(), json)])
        .await;
}

/// Publishes the holder's answers for the other instances until aborted.
async fn publish_answers(cluster: Cluster, challenges: Arc<Challenges>) {
    let mut published = Answers::default();
    loop {
        let answers = challenges.answers();
        if answers != published {
            let fields = answers
                .http01
                .iter()
                .map(|(t, k)| (format!("http:{t}"), k.clone().into_bytes()))
                .chain(
                    answers
                        .alpn
                        .iter()
                        .map(|(i, d)| (format!("alpn:{i}"), d.clone())),
                )
                .collect();
            if cluster
                .hset_expiring("acme", ANSWERS, fields, ANSWERS_TTL)
                .await
                .is_ok()
            {
                published = answers;
            }
        }
        tokio::time::sleep(ANSWERS_POLL / 2).await;
    }
}

/// Sets up the answers another instance published, and forgets them once they are gone.
async fn mirror_answers(cluster: Cluster, challenges: Arc<Challenges>) {
    let provider = crate::provider::provider();
    loop {
        if let Ok(fields) = cluster.hgetall("acme", ANSWERS).await {
            let mut answers = Answers::default();
            for (field, value) in fields {
                if let Some(token) = field.strip_prefix("http:") {
                    answers.http01.push((
                        token.to_owned(),
                        String::from_utf8_lossy(&value).into_owned(),
                    ));
                } else if let Some(identifier) = field.strip_prefix("alpn:") {
                    answers.alpn.push((identifier.to_owned(), value));
                }
            }
            if answers == Answers::default() {
                // Another instance's order is over; this instance's own answers are its
                // order's to clear.
                if !challenges.is_empty() && !challenges.is_ordering() {
                    challenges.clear();
                }
            } else if let Err(e) = challenges.add(&answers, &provider) {
                tracing::warn!(error = %e, "ACME: the fleet's challenge answers could not be set up");
            }
        }
        tokio::time::sleep(ANSWERS_POLL).await;
    }
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
