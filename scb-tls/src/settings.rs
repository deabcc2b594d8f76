//! [`TlsSettings`]: which certificate files to serve, and what to offer in ALPN.

use std::path::{Path, PathBuf};

use rustls::crypto::CryptoProvider;

use crate::TlsError;
use crate::certs::{self, CertFiles, Loaded};

/// The application protocols offered in ALPN.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Alpn {
    /// `h2`, then `http/1.1`: HTTP/2 for every client that offers it.
    #[default]
    H2AndHttp1,
    /// `http/1.1` only. A client that offers only `h2` is refused (RFC 7301
    /// `no_application_protocol`); one that sends no ALPN speaks HTTP/1.1 either way.
    Http1Only,
}

/// The number of TLS sessions the server-side cache keeps, per [`TlsAcceptor`](crate::TlsAcceptor)
/// (one per process in scb). Clients that take session tickets (all browsers) never use
/// it; it serves TLS 1.2 clients that resume by session id only. An entry is a few hundred
/// bytes, so 4096 bound it to about 1-2 MiB.
const SESSION_CACHE: usize = 4096;

/// What a [`TlsAcceptor`](crate::TlsAcceptor) serves.
///
/// ```
/// use scb_tls::{Alpn, CertFiles, TlsSettings};
///
/// let settings = TlsSettings::new([
///     CertFiles::new("/etc/scb/example.com.pem", "/etc/scb/example.com.key"),
///     CertFiles::new("/etc/scb/example.org.pem", "/etc/scb/example.org.key"),
/// ])
/// .cert(CertFiles::new("/etc/scb/example.net.pem", "/etc/scb/example.net.key"))
/// .alpn(Alpn::Http1Only);
/// assert_eq!(settings.certs().len(), 3);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    certs: Vec<CertFiles>,
    pub(crate) alpn: Alpn,
    pub(crate) session_cache: usize,
    pub(crate) client_auth: Option<ClientAuth>,
    pub(crate) acme: Option<crate::AcmeSettings>,
    pub(crate) on_demand: Option<crate::acme::OnDemandSettings>,
    pub(crate) tickets: Option<SharedKeys>,
}

/// The process's ticket keys, compared by identity: two settings with the same keys are
/// the same settings.
#[derive(Clone, Debug)]
pub(crate) struct SharedKeys(pub(crate) std::sync::Arc<crate::TicketKeys>);

impl PartialEq for SharedKeys {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedKeys {}

/// Client certificates (mutual TLS): which CA signs them and whether one is required.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientAuth {
    pub(crate) ca: PathBuf,
    pub(crate) required: bool,
}

impl ClientAuth {
    /// Every client must present a certificate issued by a CA in the PEM file `ca`; a
    /// handshake without one fails.
    pub fn required(ca: impl Into<PathBuf>) -> Self {
        Self {
            ca: ca.into(),
            required: true,
        }
    }

    /// A client may present a certificate issued by a CA in `ca` (a bad one fails the
    /// handshake); one without still gets in, and its requests carry no certificate.
    pub fn optional(ca: impl Into<PathBuf>) -> Self {
        Self {
            ca: ca.into(),
            required: false,
        }
    }

    /// The CA file.
    pub fn ca(&self) -> &Path {
        &self.ca
    }

    /// Whether a certificate is required.
    pub fn is_required(&self) -> bool {
        self.required
    }
}

impl TlsSettings {
    /// Loads every certificate of these settings, in order; fails on the first bad one.
    pub(crate) fn load_certs(&self, provider: &CryptoProvider) -> Result<Vec<Loaded>, TlsError> {
        if let Some(acme) = &self.acme {
            // What ACME stored, if it still loads: an expired, broken or missing certificate
            // is the same as none (the renewal task orders one), never an error at start-up.
            let store = acme.store();
            if !store.has_certificate() {
                return Ok(Vec::new());
            }
            return match certs::load_files(&store.files(), provider) {
                Ok(loaded) => Ok(vec![loaded]),
                Err(e) => {
                    tracing::warn!(error = %e, "ACME: the stored certificate is not usable; a new one will be ordered");
                    Ok(Vec::new())
                }
            };
        }
        if self.on_demand.is_some() {
            // Each name's certificate is the on-demand state's, loaded and obtained there.
            return Ok(Vec::new());
        }
        if self.certs.is_empty() {
            return Err(TlsError::NoCertificates);
        }
        self.certs
            .iter()
            .map(|files| certs::load_files(files, provider))
            .collect()
    }

    /// Settings serving `certs` (more can be added with [`cert`](Self::cert)); the first is
    /// the default certificate. Loading fails with [`TlsError::NoCertificates`](crate::TlsError::NoCertificates) if there
    /// is none.
    pub fn new(certs: impl IntoIterator<Item = CertFiles>) -> Self {
        Self {
            certs: certs.into_iter().collect(),
            alpn: Alpn::default(),
            session_cache: SESSION_CACHE,
            client_auth: None,
            acme: None,
            on_demand: None,
            tickets: None,
        }
    }

    /// Settings serving the certificate ACME obtains for `acme` (see [`crate::acme`]):
    /// the one stored in its state directory, if any and still valid; until then no
    /// certificate, and handshakes fail. [`TlsAcceptor::acme_task`](crate::TlsAcceptor::acme_task)
    /// obtains and renews it.
    pub fn acme(acme: crate::AcmeSettings) -> Self {
        Self {
            acme: Some(acme),
            ..Self::new([])
        }
    }

    /// Settings for a listener whose certificates are obtained on demand, one per name
    /// clients ask for and the `ask` URL allows (see [`crate::acme::on_demand`]).
    /// Certificates issued before are loaded from the state directory; a handshake for a
    /// new name waits for its certificate.
    pub fn on_demand(settings: crate::acme::OnDemandSettings) -> Self {
        Self {
            on_demand: Some(settings),
            ..Self::new([])
        }
    }

    /// The on-demand settings, for an on-demand listener.
    pub fn on_demand_settings(&self) -> Option<&crate::acme::OnDemandSettings> {
        self.on_demand.as_ref()
    }

    /// The ACME settings, for a listener whose certificate ACME obtains.
    pub fn acme_settings(&self) -> Option<&crate::AcmeSettings> {
        self.acme.as_ref()
    }

    /// The keys that encrypt session tickets: give every listener of the process the
    /// same ones (and with [`TicketKeys::shared`](crate::TicketKeys), every instance of a
    /// fleet) so that a ticket resumes wherever the client's next connection lands.
    /// Defaults to keys of this listener's own ([`TicketKeys::local`](crate::TicketKeys::local), rotated every 6 hours).
    #[must_use]
    pub fn ticket_keys(mut self, keys: std::sync::Arc<crate::TicketKeys>) -> Self {
        self.tickets = Some(SharedKeys(keys));
        self
    }

    /// Adds a certificate after those already listed.
    ///
    /// A client is served the certificate whose subject alternative names (DNS names;
    /// `*.example.com` matches exactly one label) match the name it sent in SNI; an exact
    /// name wins over a wildcard, and among certificates with the same name the first one
    /// listed whose key type the client accepts (e.g. ECDSA and RSA for the same names). A
    /// client that sends no SNI (one connecting by IP address) or a name no certificate
    /// has gets the first certificate added, like nginx's default server.
    pub fn cert(mut self, files: CertFiles) -> Self {
        self.certs.push(files);
        self
    }

    /// The protocols offered in ALPN. Defaults to [`Alpn::H2AndHttp1`].
    pub fn alpn(mut self, alpn: Alpn) -> Self {
        self.alpn = alpn;
        self
    }

    /// The number of sessions kept in the server-side session cache (0 turns it off;
    /// session tickets work either way). Defaults to 4096.
    pub fn session_cache(mut self, entries: usize) -> Self {
        self.session_cache = entries;
        self
    }

    /// Asks clients for certificates (mutual TLS). The verified subject and names of
    /// a client's certificate are in every request's extensions as a
    /// [`ClientCertificate`](scb_core::connection::ClientCertificate). Defaults to none:
    /// no client is asked.
    pub fn client_auth(mut self, auth: ClientAuth) -> Self {
        self.client_auth = Some(auth);
        self
    }

    /// The certificates, in the order they were added.
    pub fn certs(&self) -> &[CertFiles] {
        &self.certs
    }
}
