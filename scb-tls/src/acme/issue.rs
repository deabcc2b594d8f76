//! One certificate order, from the account to the stored files.

use std::net::IpAddr;
use std::time::Duration;

use instant_acme::{
    Account, AccountCredentials, AuthorizationState, AuthorizationStatus, ChallengeType,
    Identifier, NewAccount, NewOrder, Order, OrderStatus, RetryPolicy,
};

use super::dns01::Published;
use super::{AcmeChallenge, AcmeError, AcmeSettings, Challenges, client};

/// How long the CA may take to verify the challenges and to issue, polled with backoff.
fn polling() -> RetryPolicy {
    RetryPolicy::new()
        .initial_delay(Duration::from_millis(250))
        .backoff(1.5)
        .timeout(Duration::from_secs(90))
}

/// Orders a certificate for `settings.domains`, answers its challenges through
/// `challenges` (or, for DNS-01, TXT records in the zone), and stores the certificate and
/// its key in the state directory.
pub(crate) async fn obtain(
    settings: &AcmeSettings,
    challenges: &Challenges,
) -> Result<(), AcmeError> {
    let account = account(settings).await?;
    let identifiers: Vec<Identifier> = settings
        .domains
        .iter()
        .map(|name| match name.parse::<IpAddr>() {
            Ok(ip) => Identifier::Ip(ip),
            Err(_) => Identifier::Dns(name.clone()),
        })
        .collect();
    let mut order = account.new_order(&NewOrder::new(&identifiers)).await?;
    // Whatever happens from here, the answers go when the order is done with them.
    let _answers = Cleared(challenges);
    let mut records = match &settings.challenge {
        AcmeChallenge::Dns01(dns) => Some(Published::new(dns)),
        _ => None,
    };
    let outcome = answer_and_finish(&mut order, settings, challenges, records.as_mut()).await;
    // The CA is done looking, one way or the other.
    if let Some(records) = records {
        let names = records.names();
        if let Err(e) = records.remove().await {
            tracing::warn!(records = %names, error = %e, "ACME: could not remove the DNS-01 records; they may stay in the zone");
        }
    }
    outcome
}

/// Sets up every challenge's answer, tells the CA they are ready, and finalizes the order.
///
/// Two passes over the authorizations: the answers first (for DNS-01, the records
/// published and then waited for until the zone's servers have them), the CA told only
/// after. A CA told about one name's challenge while the next one's record is still
/// going out would validate too early.
async fn answer_and_finish(
    order: &mut Order,
    settings: &AcmeSettings,
    challenges: &Challenges,
    mut records: Option<&mut Published>,
) -> Result<(), AcmeError> {
    let name = settings.challenge.name();
    let kind = match &settings.challenge {
        AcmeChallenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
        AcmeChallenge::Http01 => ChallengeType::Http01,
        AcmeChallenge::Dns01(_) => ChallengeType::Dns01,
    };
    let provider = crate::provider::provider();
    let mut authorizations = order.authorizations();
    while let Some(authorization) = authorizations.next().await {
        let mut authorization = authorization?;
        if !needs_answer(&authorization)? {
            continue;
        }
        // The name without a wildcard's `*.`: what TLS-ALPN-01's certificate names, and
        // where DNS-01's record goes (RFC 8555 §8.4).
        let identifier = identifier_text(authorization.identifier().identifier);
        // With it, for the log: a wildcard's authorization offers DNS-01 only.
        let shown = authorization.identifier().to_string();
        let challenge = authorization
            .challenge(kind.clone())
            .ok_or(AcmeError::NotOffered {
                challenge: name,
                name: shown,
            })?;
        let key_authorization = challenge.key_authorization();
        match (&settings.challenge, records.as_deref_mut()) {
            (AcmeChallenge::Http01, _) => challenges.put_http01(
                challenge.token.clone(),
                key_authorization.as_str().to_owned(),
            ),
            (AcmeChallenge::TlsAlpn01, _) => {
                challenges.put_alpn(&identifier, key_authorization.digest().as_ref(), &provider)?;
            }
            // The identifier without a wildcard's `*.`: the record's name is the same.
            (AcmeChallenge::Dns01(_), Some(records)) => {
                records
                    .add(&identifier, &key_authorization.dns_value())
                    .await?;
            }
            (AcmeChallenge::Dns01(_), None) => {
                return Err(AcmeError::Other("DNS-01 without its records".into()));
            }
        }
    }
    if let Some(records) = records.as_deref()
        && !records.is_empty()
    {
        tracing::info!(records = %records.names(), "ACME: DNS-01 records added; waiting until the zone's servers have them");
        records.propagated().await?;
    }
    // In a fleet, the other instances set the answers up too before the CA may come.
    if !settings.answer_delay.is_zero() {
        tokio::time::sleep(settings.answer_delay).await;
    }
    // The authorizations were fetched above; this pass reads them from the order.
    let mut authorizations = order.authorizations();
    while let Some(authorization) = authorizations.next().await {
        let mut authorization = authorization?;
        if !needs_answer(&authorization)? {
            continue;
        }
        if let Some(mut challenge) = authorization.challenge(kind.clone()) {
            // A CA that validates at once (pebble may) answers this very request with
            // its verdict.
            challenge
                .set_ready()
                .await
                .map_err(|e| verdict(e, name, settings))?;
        }
    }
    let status = order
        .poll_ready(&polling())
        .await
        // The CA's verdict on a challenge comes back as an error of the order.
        .map_err(|e| verdict(e, name, settings))?;
    if status != OrderStatus::Ready {
        return Err(why_invalid(order, name).await);
    }
    let key_pem = order.finalize().await?;
    let chain_pem = order.poll_certificate(&polling()).await?;
    settings.store().write_certificate(&chain_pem, &key_pem)
}

/// An error of the CA while it validates a challenge: its problem document is the
/// verdict on the challenge (the reason a person needs: "connection refused", "wrong
/// certificate"); anything else (the CA unreachable) stays what it was.
fn verdict(e: instant_acme::Error, challenge: &'static str, settings: &AcmeSettings) -> AcmeError {
    match e {
        instant_acme::Error::Api(problem) => AcmeError::Challenge {
            challenge,
            name: settings.domains.join(", "),
            reason: problem
                .detail
                .or(problem.r#type)
                .unwrap_or_else(|| "no reason given".into()),
        },
        e => e.into(),
    }
}

/// Whether an authorization still needs its challenge answered: a pending one does, a
/// valid one (reused from an earlier order of the same account) does not, and any other
/// status fails the order.
fn needs_answer(authorization: &AuthorizationState) -> Result<bool, AcmeError> {
    match authorization.status {
        AuthorizationStatus::Pending => Ok(true),
        AuthorizationStatus::Valid => Ok(false),
        status => Err(AcmeError::Other(format!(
            "authorization for {} is {status:?}",
            authorization.identifier()
        ))),
    }
}

/// Clears the challenge answers when dropped.
struct Cleared<'a>(&'a Challenges);

impl Drop for Cleared<'_> {
    fn drop(&mut self) {
        self.0.clear();
    }
}

fn identifier_text(identifier: &Identifier) -> String {
    match identifier {
        Identifier::Dns(name) => name.clone(),
        Identifier::Ip(ip) => ip.to_string(),
        other => format!("{other:?}"),
    }
}

/// The CA's reason an order went invalid: the first failed challenge's error.
async fn why_invalid(order: &mut Order, challenge: &'static str) -> AcmeError {
    let mut authorizations = order.authorizations();
    while let Some(Ok(authorization)) = authorizations.next().await {
        let name = identifier_text(authorization.identifier().identifier);
        for c in &authorization.challenges {
            if let Some(problem) = &c.error {
                return AcmeError::Challenge {
                    challenge,
                    name,
                    reason: problem
                        .detail
                        .clone()
                        .or_else(|| problem.r#type.clone())
                        .unwrap_or_else(|| "no reason given".into()),
                };
            }
        }
    }
    AcmeError::Other("the order became invalid; the CA gave no reason".into())
}

/// The account: the stored one when it still works with this directory, else a new one
/// (stored for the next time).
async fn account(settings: &AcmeSettings) -> Result<Account, AcmeError> {
    let store = settings.store();
    let http = || client::directory_client(settings.ca_root.as_deref(), settings.timeout);
    if let Some(json) = store.read_account()? {
        let same_directory = serde_json::from_slice::<serde_json::Value>(&json)
            .ok()
            .and_then(|v| {
                v.get("directory")
                    .and_then(|d| d.as_str().map(str::to_owned))
            })
            .is_some_and(|d| d == settings.directory);
        if same_directory
            && let Ok(credentials) = serde_json::from_slice::<AccountCredentials>(&json)
        {
            match Account::builder_with_http(http()?)
                .from_credentials(credentials)
                .await
            {
                Ok(account) => return Ok(account),
                Err(e) => tracing::warn!(
                    error = %e,
                    "ACME: the stored account does not work with the CA; registering a new one"
                ),
            }
        }
    }
    let contact = settings.email.as_ref().map(|e| format!("mailto:{e}"));
    let contacts: Vec<&str> = contact.iter().map(String::as_str).collect();
    let (account, credentials) = Account::builder_with_http(http()?)
        .create(
            &NewAccount {
                contact: &contacts,
                terms_of_service_agreed: true,
                only_return_existing: false,
            },
            settings.directory.clone(),
            None,
        )
        .await?;
    let json =
        serde_json::to_vec_pretty(&credentials).map_err(|e| AcmeError::Other(e.to_string()))?;
    store.write_account(&json)?;
    Ok(account)
}
