//! Automatic HTTPS against Let's Encrypt's test CA, `pebble` (Debian's package; `.ci/run`
//! installs it): a certificate issued through TLS-ALPN-01 (and served to QUIC handshakes too),
//! through HTTP-01, and through DNS-01 for a wildcard and its base name (records published
//! in a real BIND, `named`, which pebble resolves through), served from
//! the state directory after a restart with the CA gone, renewed while a connection stays
//! open, and the failures (a challenge the CA cannot verify, a CA that is down, silent or
//! answering garbage) logged, counted and answered by clean handshake failures.
//!
//! Without `pebble` (or, for DNS-01, `named`, `tsig-keygen` and `dig`) on PATH the tests
//! are skipped, unless SCB_REQUIRE_TOOLS says they must run.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use scb_tls::rustls;
use support::bind::{self, Bind};
use support::tls::{Tls, client, handshake as connect, peer_der, request};
use support::{Server, TIMEOUT, check, get, metric};

/// A free port on 127.0.0.1, for a listener the CA must be told about before it starts.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("scb-bin-acme-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A running pebble, killed on drop.
struct Pebble {
    child: Child,
    /// The ACME directory URL.
    directory: String,
    management: SocketAddr,
    /// The CA of pebble's own HTTPS certificate (for `ca_root`).
    ca_root: PathBuf,
    ca_der: Vec<u8>,
    /// Where pebble logs (its orders and issued certificates among the rest).
    log: PathBuf,
}

impl Pebble {
    /// Starts pebble validating TLS-ALPN-01 on `tls_port` and HTTP-01 on `http_port` of
    /// 127.0.0.1, issuing certificates valid for `validity` (seconds). `None` when pebble
    /// is not installed (and the test may be skipped).
    fn start(dir: &Path, tls_port: u16, http_port: u16, validity: u64) -> Option<Self> {
        Self::start_resolving(dir, tls_port, http_port, validity, None)
    }

    /// [`start`](Self::start), every name resolved through the DNS server `dns` if given
    /// (so it must serve them all: `localhost` too).
    fn start_resolving(
        dir: &Path,
        tls_port: u16,
        http_port: u16,
        validity: u64,
        dns: Option<SocketAddr>,
    ) -> Option<Self> {
        // Pebble's HTTPS certificate: a CA and a leaf (webpki refuses a CA as a leaf).
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::default();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = rcgen::CertifiedIssuer::self_signed(ca, ca_key).unwrap();
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let mut leaf =
            rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .unwrap();
        leaf.distinguished_name = rcgen::DistinguishedName::new();
        let leaf = leaf.signed_by(&leaf_key, &ca).unwrap();
        let ca_root = dir.join("pebble-ca.pem");
        std::fs::write(&ca_root, ca.pem()).unwrap();
        std::fs::write(dir.join("pebble.pem"), leaf.pem()).unwrap();
        std::fs::write(dir.join("pebble.key"), leaf_key.serialize_pem()).unwrap();

        let (api, management) = (free_port(), free_port());
        let config = dir.join("pebble.json");
        std::fs::write(
            &config,
            format!(
                r#"{{"pebble": {{
                    "listenAddress": "127.0.0.1:{api}",
                    "managementListenAddress": "127.0.0.1:{management}",
                    "certificate": "{}",
                    "privateKey": "{}",
                    "httpPort": {http_port},
                    "tlsPort": {tls_port},
                    "ocspResponderURL": "",
                    "externalAccountBindingRequired": false,
                    "certificateValidityPeriod": {validity}
                }}}}"#,
                dir.join("pebble.pem").display(),
                dir.join("pebble.key").display(),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("pebble.log")).unwrap();
        let mut command = Command::new("pebble");
        command.arg("-config").arg(&config);
        if let Some(dns) = dns {
            command.arg("-dnsserver").arg(dns.to_string());
        }
        let child = match command
            // No random sleep before validating, no nonces refused on purpose, no reused
            // authorizations: every run takes the same path.
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .env("PEBBLE_AUTHZREUSE", "0")
            // Its own log (orders, issued certificates) on stdout, Go's `http` errors on
            // stderr: both in one file.
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
        {
            Ok(child) => child,
            Err(e) => {
                assert!(
                    std::env::var_os("SCB_REQUIRE_TOOLS").is_none(),
                    "`pebble` is not on PATH ({e}), and SCB_REQUIRE_TOOLS says these tests must run"
                );
                return None;
            }
        };
        let pebble = Self {
            child,
            directory: format!("https://127.0.0.1:{api}/dir"),
            management: SocketAddr::from(([127, 0, 0, 1], management)),
            ca_root,
            ca_der: ca.der().to_vec(),
            log: dir.join("pebble.log"),
        };
        let deadline = Instant::now() + TIMEOUT;
        while TcpStream::connect(("127.0.0.1", api)).is_err() {
            assert!(Instant::now() < deadline, "pebble did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(pebble)
    }

    /// The root pebble issues under (made anew at each start), from its management API.
    fn issuing_root(&self) -> Vec<u8> {
        let config = client(&[&self.ca_der]);
        let mut tls = connect(self.management, "localhost", &config).unwrap();
        write!(
            tls,
            "GET /roots/0 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        let _ = tls.read_to_string(&mut answer);
        let pem = &answer[answer.find("-----BEGIN").expect("a PEM root")..];
        use rustls::pki_types::pem::PemObject as _;
        rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .to_vec()
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A keep-alive GET on `tls`, answered 200: the body.
fn body(tls: &mut Tls, path: &str) -> String {
    let answer = request(tls, path);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    answer.split_once("\r\n\r\n").unwrap().1.to_owned()
}

/// The config: an ACME listener on `tls_port` for the CA at `directory` (with
/// `acme_keys` added to its `acme` table), `extra` after it, and a route answering "hello".
fn config(
    tls_port: u16,
    (directory, ca_root): (&str, &Path),
    state: &Path,
    acme_keys: &str,
    extra: &str,
) -> String {
    format!(
        "[server]\nworkers = 1\n\
         [[listen]]\naddr = \"127.0.0.1:{tls_port}\"\n\
         tls = {{ acme = {{ domains = [\"localhost\"], email = \"ops@example.com\", \
         directory = \"{directory}\", ca_root = {ca_root:?}, state_dir = {state:?}{acme_keys} }} }}\n\
         {extra}\
         [[route]]\npath = \"/\"\nrespond = {{ body = \"hello\" }}\n"
    )
}

impl Pebble {
    fn ca(&self) -> (&str, &Path) {
        (&self.directory, &self.ca_root)
    }
}

fn issued(line: &str) -> bool {
    line.contains("ACME: certificate issued and serving")
}

#[test]
fn tls_alpn_01_issues_for_tcp_and_quic_and_a_restart_serves_the_stored_certificate_with_the_ca_down()
 {
    let dir = temp_dir("alpn");
    let tls_port = free_port();
    let Some(pebble) = Pebble::start(&dir, tls_port, free_port(), 3600) else {
        return;
    };
    let state = dir.join("state");
    // HTTP/3 beside it: QUIC handshakes get the ACME certificate too.
    let config = config(tls_port, pebble.ca(), &state, "", "http3 = true\n");
    let mut scb = Server::start(&config);
    scb.wait_for_line(issued);
    let root = pebble.issuing_root();
    let trusting = client(&[&root]);
    let addr = SocketAddr::from(([127, 0, 0, 1], tls_port));
    let mut tls = connect(addr, "localhost", &trusting).expect("the issued certificate verifies");
    assert_eq!(body(&mut tls, "/"), "hello");
    let served = peer_der(&tls);
    drop(tls);
    let over_quic = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let (_endpoint, mut send, presented) = support::quic::connect(addr, &[&root]).await;
            assert_eq!(
                support::quic::get(&mut send, "/").await,
                (200, "hello".to_owned())
            );
            presented
        });
    assert_eq!(over_quic, served);

    // The account and the certificate are on disk, readable by their owner only.
    use std::os::unix::fs::PermissionsExt as _;
    for file in ["account.json", "localhost.crt.pem", "localhost.key.pem"] {
        let mode = std::fs::metadata(state.join(file))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file}");
    }

    // Restart with the CA gone: the stored certificate is served at once, nothing ordered.
    scb.terminate();
    scb.wait();
    drop(pebble);
    let mut scb = Server::start(&config);
    scb.wait_for_line(|l| l.contains("ACME: certificate valid; renewal scheduled"));
    let mut tls = connect(addr, "localhost", &trusting).expect("the stored certificate");
    assert_eq!(body(&mut tls, "/"), "hello");
    assert_eq!(peer_der(&tls), served);
    assert!(
        !scb.log.iter().any(|l| l.contains("requesting one")),
        "{:?}",
        scb.log
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn http_01_issues_and_renewal_swaps_the_certificate_without_dropping_a_connection() {
    let dir = temp_dir("http01");
    let (tls_port, http_port) = (free_port(), free_port());
    // Short-lived certificates: renewal is due after two thirds of 9 s.
    let Some(pebble) = Pebble::start(&dir, free_port(), http_port, 9) else {
        return;
    };
    let state = dir.join("state");
    // Port 80 as sites run it: everything redirected to https, but the CA's validations
    // answered first.
    let plain = format!("[[listen]]\naddr = \"127.0.0.1:{http_port}\"\nredirect_https = true\n");
    let mut scb = Server::start(&config(
        tls_port,
        pebble.ca(),
        &state,
        ", challenge = \"http-01\"",
        &plain,
    ));
    scb.wait_for_line(issued);
    let trusting = client(&[&pebble.issuing_root()]);
    let addr = SocketAddr::from(([127, 0, 0, 1], tls_port));
    let mut open = connect(addr, "localhost", &trusting).unwrap();
    assert_eq!(body(&mut open, "/"), "hello");
    let first = peer_der(&open);

    // Renewed in place: new handshakes get the new certificate, the open connection
    // carries on with its own.
    scb.wait_for_line(issued);
    // A client of its own: a resumed session would report the certificate it began with.
    let root = pebble.issuing_root();
    let mut fresh = connect(addr, "localhost", &client(&[&root])).unwrap();
    assert_eq!(body(&mut fresh, "/"), "hello");
    assert_ne!(peer_der(&fresh), first, "a new certificate after renewal");
    assert_eq!(
        body(&mut open, "/"),
        "hello",
        "the open connection survived"
    );
    // The plain listener redirects the site; the challenge answers are gone, so their
    // path is redirected like any other.
    assert_eq!(get(scb.addrs[1], "/").status, 308);
    assert_eq!(
        get(scb.addrs[1], "/.well-known/acme-challenge/anything").status,
        308
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn failed_challenges_a_ca_down_and_a_ca_answering_garbage_fail_handshakes_cleanly_until_a_reload_fixes_it()
 {
    let dir = temp_dir("fail");
    let tls_port = free_port();
    // The CA validates TLS-ALPN-01 on a port where nothing listens.
    let Some(pebble) = Pebble::start(&dir, free_port(), free_port(), 3600) else {
        return;
    };
    let state = dir.join("state");
    let metrics = "[metrics]\nlisten = \"127.0.0.1:0\"\n";
    let mut scb = Server::start(&config(
        tls_port,
        pebble.ca(),
        &state,
        ", retry = \"100ms\"",
        metrics,
    ));
    // Three failures in a row: each logged with the CA's reason, each counted.
    for _ in 0..3 {
        let line = scb.wait_for_line(|l| l.contains("ACME: could not obtain a certificate"));
        assert!(
            line.contains("could not verify the tls-alpn-01 challenge"),
            "{line}"
        );
        assert!(line.contains("until one is issued"), "{line}");
    }
    let scrape = String::from_utf8(get(scb.metrics.unwrap(), "/metrics").body).unwrap();
    assert!(
        metric(&scrape, "scb_acme_failures_total").is_some_and(|n| n >= 3.0),
        "{scrape}"
    );
    // No certificate: the handshake fails, at once, with an alert; the server lives on.
    let addr = SocketAddr::from(([127, 0, 0, 1], tls_port));
    let anyone = client(&[&pebble.ca_der]);
    for _ in 0..3 {
        assert!(connect(addr, "localhost", &anyone).is_err());
    }
    assert!(!state.join("localhost.crt.pem").exists());

    // The CA down altogether: the same, with the connection error as the reason.
    scb.terminate();
    scb.wait();
    drop(pebble);
    let down = format!("https://127.0.0.1:{}/dir", free_port());
    let ca_root = dir.join("pebble-ca.pem");
    let mut scb = Server::start(&config(
        tls_port,
        (&down, &ca_root),
        &state,
        ", retry = \"100ms\"",
        "",
    ));
    for _ in 0..2 {
        scb.wait_for_line(|l| l.contains("ACME: could not obtain a certificate"));
    }
    assert!(connect(addr, "localhost", &anyone).is_err());

    // A CA that accepts and never answers: each try gives up after `timeout`.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("https://{}/dir", silent.local_addr().unwrap());
    scb.rewrite_config(&config(
        tls_port,
        (&silent_url, &ca_root),
        &state,
        ", retry = \"100ms\", timeout = \"300ms\"",
        "",
    ));
    scb.signal(rustix::process::Signal::HUP);
    scb.wait_for_line(|l| l.contains("reloaded"));
    for _ in 0..2 {
        let line = scb.wait_for_line(|l| l.contains("ACME: could not obtain a certificate"));
        assert!(line.contains("did not answer within 300ms"), "{line}");
    }
    drop(silent);

    // A CA answering garbage: pebble's management API, which is no ACME directory.
    let Some(pebble) = Pebble::start(&dir, tls_port, free_port(), 3600) else {
        return;
    };
    let garbage = format!("https://{}/roots/0", pebble.management);
    scb.rewrite_config(&config(
        tls_port,
        (&garbage, &pebble.ca_root),
        &state,
        ", retry = \"100ms\"",
        "",
    ));
    scb.signal(rustix::process::Signal::HUP);
    scb.wait_for_line(|l| l.contains("reloaded"));
    for _ in 0..2 {
        scb.wait_for_line(|l| l.contains("ACME: could not obtain a certificate"));
    }
    assert!(connect(addr, "localhost", &anyone).is_err());

    // Fixed by a reload, with no restart: the next try is issued and served.
    scb.rewrite_config(&config(
        tls_port,
        pebble.ca(),
        &state,
        ", retry = \"100ms\"",
        "",
    ));
    scb.signal(rustix::process::Signal::HUP);
    scb.wait_for_line(issued);
    let root = pebble.issuing_root();
    let mut tls = connect(addr, "localhost", &client(&[&root])).expect("issued after the reload");
    assert_eq!(body(&mut tls, "/"), "hello");
    let _ = std::fs::remove_dir_all(dir);
}

/// The config of a DNS-01 listener on `tls_port` for `*.example.test` and `example.test`,
/// its records published as `dns` (a `dns = { ... }` table) says, with `acme_keys` added
/// to its `acme` table and `extra` after it.
fn wildcard_config(
    tls_port: u16,
    (directory, ca_root): (&str, &Path),
    state: &Path,
    dns: &str,
    acme_keys: &str,
    extra: &str,
) -> String {
    format!(
        "[server]\nworkers = 1\n\
         [[listen]]\naddr = \"127.0.0.1:{tls_port}\"\n\
         tls = {{ acme = {{ domains = [\"*.example.test\", \"example.test\"], \
         email = \"ops@example.com\", directory = \"{directory}\", ca_root = {ca_root:?}, \
         state_dir = {state:?}, challenge = \"dns-01\", {dns}{acme_keys} }} }}\n\
         {extra}\
         [[route]]\npath = \"/\"\nrespond = {{ body = \"hello\" }}\n"
    )
}

const CHALLENGE_RECORD: &str = "_acme-challenge.example.test";

#[test]
fn dns_01_issues_one_certificate_for_a_wildcard_and_its_base_name_and_removes_its_records() {
    let dir = temp_dir("dns01");
    let Some(bind) = Bind::start(&dir) else {
        return;
    };
    // Every name the CA looks up (the TXT records among them) through that server.
    let Some(pebble) =
        Pebble::start_resolving(&dir, free_port(), free_port(), 3600, Some(bind.addr))
    else {
        return;
    };
    let (tls_port, state) = (free_port(), dir.join("state"));
    let mut scb = Server::start(&wildcard_config(
        tls_port,
        pebble.ca(),
        &state,
        &bind.dns_table(&bind.key_file, ""),
        "",
        "",
    ));
    scb.wait_for_line(issued);
    // Published, seen at the server, and removed before the certificate was installed.
    for step in [
        "ACME: DNS-01 records added",
        "ACME: DNS-01 records visible at the zone's servers",
        "ACME: DNS-01 records removed",
    ] {
        assert!(
            scb.log
                .iter()
                .any(|l| l.contains(step) && l.contains("_acme-challenge.example.test.")),
            "{step}: {:?}",
            scb.log
        );
    }
    assert_eq!(bind.txt(CHALLENGE_RECORD), Vec::<String>::new());

    // Served for a name under the wildcard and for the base name: one certificate.
    let trusting = client(&[&pebble.issuing_root()]);
    let addr = SocketAddr::from(([127, 0, 0, 1], tls_port));
    let mut served = Vec::new();
    for name in ["foo.example.test", "example.test"] {
        let mut tls = connect(addr, name, &trusting).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(body(&mut tls, "/"), "hello");
        served.push(peer_der(&tls));
    }
    assert_eq!(served[0], served[1]);
    // A wildcard covers one label only.
    assert!(connect(addr, "a.foo.example.test", &trusting).is_err());
    // Its names are exactly the two asked for; the files are named after the first
    // (`*` made `_`).
    let files = scb_tls::CertFiles::new(
        state.join("_.example.test.crt.pem"),
        state.join("_.example.test.key.pem"),
    );
    let stored = scb_tls::TlsAcceptor::new(scb_tls::TlsSettings::new([files])).unwrap();
    let info = &stored.certificates()[0];
    let mut names = info.names.clone();
    names.sort();
    assert_eq!(names, ["*.example.test", "example.test"]);
    use rustls::pki_types::pem::PemObject as _;
    let leaf = rustls::pki_types::CertificateDer::pem_file_iter(&info.cert)
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(
        leaf.to_vec(),
        served[0],
        "the stored certificate is the one served"
    );

    // One order, one certificate: the renewal loop finds the wildcard covered and waits
    // (were it not, it would order again at once).
    scb.wait_for_line(|l| l.contains("ACME: certificate valid; renewal scheduled"));
    let log = std::fs::read_to_string(&pebble.log).unwrap();
    assert_eq!(log.matches("Added order").count(), 1, "{log}");
    assert_eq!(log.matches("Issued certificate serial").count(), 1, "{log}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn dns_01_with_a_wrong_tsig_secret_fails_with_the_reason_and_retries_until_a_reload_brings_the_right_one()
 {
    let dir = temp_dir("dns01-badsig");
    let Some(bind) = Bind::start(&dir) else {
        return;
    };
    let Some(pebble) =
        Pebble::start_resolving(&dir, free_port(), free_port(), 3600, Some(bind.addr))
    else {
        return;
    };
    // The key's name, another secret.
    let wrong = dir.join("wrong.key");
    bind::keygen(&wrong).unwrap();
    let (tls_port, state) = (free_port(), dir.join("state"));
    let metrics = "[metrics]\nlisten = \"127.0.0.1:0\"\n";
    let mut scb = Server::start(&wildcard_config(
        tls_port,
        pebble.ca(),
        &state,
        &bind.dns_table(&wrong, ""),
        ", retry = \"100ms\"",
        metrics,
    ));
    for _ in 0..3 {
        let line = scb.wait_for_line(|l| l.contains("ACME: could not obtain a certificate"));
        assert!(
            line.contains(&format!(
                "DNS-01: the DNS server {} refused the TSIG signature of key \"scb\"",
                bind.addr
            )),
            "{line}"
        );
        assert!(line.contains("until one is issued"), "{line}");
    }
    let scrape = String::from_utf8(get(scb.metrics.unwrap(), "/metrics").body).unwrap();
    assert!(
        metric(&scrape, "scb_acme_failures_total").is_some_and(|n| n >= 3.0),
        "{scrape}"
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], tls_port));
    assert!(connect(addr, "example.test", &client(&[&pebble.ca_der])).is_err());
    assert_eq!(bind.txt(CHALLENGE_RECORD), Vec::<String>::new());

    // The right key by a reload, which reads the file again: issued without a restart.
    scb.rewrite_config(&wildcard_config(
        tls_port,
        pebble.ca(),
        &state,
        &bind.dns_table(&bind.key_file, ""),
        ", retry = \"100ms\"",
        metrics,
    ));
    scb.signal(rustix::process::Signal::HUP);
    scb.wait_for_line(|l| l.contains("reloaded"));
    scb.wait_for_line(issued);
    let trusting = client(&[&pebble.issuing_root()]);
    let mut tls = connect(addr, "www.example.test", &trusting).expect("issued after the reload");
    assert_eq!(body(&mut tls, "/"), "hello");
    assert_eq!(bind.txt(CHALLENGE_RECORD), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn acme_settings_are_checked_with_their_keys() {
    let listen = |acme: &str| {
        format!(
            "[[listen]]\naddr = \"127.0.0.1:0\"\ntls = {{ acme = {{ {acme} }} }}\n\
             [[route]]\npath = \"/\"\nrespond = {{ body = \"x\" }}\n"
        )
    };
    for (acme, key, why) in [
        (
            "domains = [], state_dir = \"/tmp/x\"",
            "tls.acme.domains",
            "at least one",
        ),
        (
            "domains = [\"*.example.com\"], state_dir = \"/tmp/x\"",
            "tls.acme.domains[0]",
            "a wildcard is proved through DNS only",
        ),
        (
            "domains = [\"example.com\"], state_dir = \"/tmp/x\", directory = \"http://ca/dir\"",
            "tls.acme.directory",
            "https://",
        ),
        (
            "domains = [\"example.com\"], state_dir = \"/tmp/x\", challenge = \"dns-01\"",
            "tls.acme.challenge",
            "dns-01 needs `dns = { rfc2136",
        ),
        (
            "domains = [\"example.com\"], state_dir = \"/tmp/x\", challenge = \"dns-02\"",
            "tls.acme.challenge",
            "\"tls-alpn-01\", \"http-01\" or \"dns-01\"",
        ),
        (
            "domains = [\"example.com\"]",
            "tls.acme.state_dir",
            "give a directory, or a [cluster]",
        ),
    ] {
        let out = check(&listen(acme));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{acme}");
        assert!(stderr.contains(key), "{key}: {stderr}");
        assert!(stderr.contains(why), "{why}: {stderr}");
    }
    let both = "[[listen]]\naddr = \"127.0.0.1:0\"\n\
                tls = { cert = \"a.pem\", key = \"a.key\", acme = { domains = [\"a.test\"], state_dir = \"/tmp/x\" } }\n\
                [[route]]\npath = \"/\"\nrespond = { body = \"x\" }\n";
    let out = check(both);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not both"));
    let fine = listen("domains = [\"example.com\", \"www.example.com\"], state_dir = \"/tmp/x\"");
    let out = check(&fine);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A PEM certificate for `localhost` that expired a day ago, and its key.
fn expired_certificate() -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2020, 2, 1);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

#[test]
fn a_fleet_orders_its_certificate_once_replacing_a_stale_one_and_every_instance_serves_it() {
    let Some(redis) = support::redis::Redis::start() else {
        return;
    };
    let dir = temp_dir("fleet");
    let tls_port = free_port();
    // The CA validates on 127.0.0.1: the first instance, whichever instance orders.
    let Some(pebble) = Pebble::start(&dir, tls_port, free_port(), 3600) else {
        return;
    };
    // What an earlier fleet left in Redis: expired. It is replaced, once, for everyone.
    let (chain, key) = expired_certificate();
    let seeded = Command::new("redis-cli")
        .args([
            "-p",
            &redis.port.to_string(),
            "HSET",
            "fleet:acme:cert:localhost",
        ])
        .args(["chain", &chain, "key", &key])
        .output()
        .expect("redis-cli (Debian: redis-tools)");
    assert!(seeded.status.success(), "{seeded:?}");
    let instance = |n: u8| {
        let (directory, ca_root) = pebble.ca();
        format!(
            "[server]\nworkers = 1\n\
             [cluster]\nredis = \"{url}\"\nkey_prefix = \"fleet:\"\n\
             [[listen]]\naddr = \"127.0.0.{n}:{tls_port}\"\n\
             tls = {{ acme = {{ domains = [\"localhost\"], email = \"ops@example.com\", \
             directory = \"{directory}\", ca_root = {ca_root:?}, state_dir = {state:?}, \
             retry = \"1s\" }} }}\n\
             [[route]]\npath = \"/\"\nrespond = {{ body = \"hello from {n}\" }}\n",
            url = redis.url(),
            state = dir.join(format!("state-{n}")),
        )
    };
    // The first instance (where the CA validates) starts last, so another one orders: the
    // answers it sets up must reach the first through the fleet's Redis.
    let mut fleet: Vec<(u8, Server)> = (1..=3)
        .rev()
        .map(|n| (n, Server::start(&instance(n))))
        .collect();
    for (_, scb) in &mut fleet {
        scb.wait_for_line(|l| issued(l) || l.contains("ACME: serving the fleet's certificate"));
    }
    let trusting = client(&[&pebble.issuing_root()]);
    let mut served = Vec::new();
    for n in 1..=3u8 {
        let addr = SocketAddr::from(([127, 0, 0, n], tls_port));
        let mut tls = connect(addr, "localhost", &trusting).expect("the fleet's certificate");
        assert_eq!(body(&mut tls, "/"), format!("hello from {n}"));
        served.push(peer_der(&tls));
    }
    assert!(
        served.windows(2).all(|w| w[0] == w[1]),
        "one certificate for the fleet"
    );
    let log = std::fs::read_to_string(&pebble.log).unwrap();
    let issued_count = log.matches("Issued certificate").count();
    assert_eq!(
        issued_count, 1,
        "pebble issued {issued_count} certificates:\n{log}"
    );
    // Exactly one instance ordered; the others took the fleet's.
    let ordered: Vec<u8> = fleet
        .iter()
        .filter(|(_, s)| s.log.iter().any(|l| issued(l)))
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(ordered.len(), 1, "instances that ordered: {ordered:?}");
    assert_ne!(
        ordered,
        [1],
        "the instance the CA validates on ordered itself"
    );
    drop(fleet);
    let _ = std::fs::remove_dir_all(dir);
}

/// An `ask` service: allows `shop-*` names, refuses every other, counting what it is asked.
fn ask_service() -> (SocketAddr, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::clone(&asked);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read_exact(&mut byte).is_ok() {
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let domain = head
                .split_whitespace()
                .nth(1)
                .and_then(|target| target.split_once("domain="))
                .map(|(_, d)| d.to_owned())
                .unwrap_or_default();
            seen.lock().unwrap().push(domain.clone());
            let status = if domain.starts_with("shop-") {
                "200 OK"
            } else {
                "403 Forbidden"
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    (addr, asked)
}

#[test]
fn on_demand_certificates_are_asked_for_ordered_while_the_handshake_waits_and_refusals_fail_fast() {
    let dir = temp_dir("on-demand");
    let Some(bind) = Bind::start(&dir) else {
        return;
    };
    // Every shop's name resolves to 127.0.0.1 (the zone's `*` record), where the CA
    // validates TLS-ALPN-01 on the on-demand listener itself.
    let tls_port = free_port();
    let Some(pebble) = Pebble::start_resolving(&dir, tls_port, free_port(), 3600, Some(bind.addr))
    else {
        return;
    };
    let (ask, asked) = ask_service();
    let (directory, ca_root) = pebble.ca();
    let state = dir.join("state");
    let config = format!(
        "[server]\nworkers = 2\n\
         [[listen]]\naddr = \"127.0.0.1:{tls_port}\"\n\
         tls = {{ on_demand = {{ ask = \"http://{ask}/allowed\", email = \"ops@example.com\", \
         directory = \"{directory}\", ca_root = {ca_root:?}, state_dir = {state:?}, \
         per_hour = 2 }} }}\n\
         [[route]]\npath = \"/\"\nrespond = {{ body = \"hello\" }}\n"
    );
    let mut scb = Server::start(&config);
    let trusting = client(&[&pebble.issuing_root()]);
    let addr = SocketAddr::from(([127, 0, 0, 1], tls_port));

    // An allowed name: the first handshake waits for its certificate and gets it.
    let mut tls =
        connect(addr, "shop-a.example.test", &trusting).expect("an on-demand certificate");
    assert_eq!(body(&mut tls, "/"), "hello");
    let first = peer_der(&tls);
    // The next handshake has it at once: the ask service is not asked again.
    let mut again = connect(addr, "shop-a.example.test", &trusting).unwrap();
    assert_eq!(body(&mut again, "/"), "hello");
    assert_eq!(peer_der(&again), first);
    assert_eq!(asked.lock().unwrap().as_slice(), ["shop-a.example.test"]);

    // A refused name fails fast, and is not asked about again for a while.
    let started = Instant::now();
    assert!(connect(addr, "evil.example.test", &trusting).is_err());
    assert!(connect(addr, "evil.example.test", &trusting).is_err());
    assert!(started.elapsed() < Duration::from_secs(5));
    let evil = asked
        .lock()
        .unwrap()
        .iter()
        .filter(|d| *d == "evil.example.test")
        .count();
    assert_eq!(evil, 1, "{:?}", asked.lock().unwrap());

    // The hour allows two orders (refused names do not count): shop-b is the second;
    // shop-c, allowed, fails fast without an order.
    let mut tls = connect(addr, "shop-b.example.test", &trusting).expect("the hour's second");
    assert_eq!(body(&mut tls, "/"), "hello");
    let started = Instant::now();
    assert!(connect(addr, "shop-c.example.test", &trusting).is_err());
    assert!(started.elapsed() < Duration::from_secs(5));
    scb.wait_for_line(|l| l.contains("this hour's orders are used up"));
    let issued_now = std::fs::read_to_string(&pebble.log)
        .unwrap()
        .matches("Issued certificate")
        .count();
    assert_eq!(issued_now, 2);

    // A restart serves what was issued, from the state directory, without asking.
    scb.terminate();
    scb.wait();
    let count = asked.lock().unwrap().len();
    let _scb = Server::start(&config);
    let mut tls = connect(addr, "shop-a.example.test", &trusting).unwrap();
    assert_eq!(body(&mut tls, "/"), "hello");
    assert_eq!(peer_der(&tls), first);
    assert_eq!(asked.lock().unwrap().len(), count);
    let log = std::fs::read_to_string(&pebble.log).unwrap();
    assert_eq!(log.matches("Issued certificate").count(), 2, "{log}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A fleet instance's config: an ACME listener on `127.0.0.N:tls_port`, with `[cluster]`
/// on `redis_port` when given.
fn fleet_config(
    n: u8,
    tls_port: u16,
    pebble: &Pebble,
    state: &Path,
    redis_port: Option<u16>,
) -> String {
    let (directory, ca_root) = pebble.ca();
    let cluster = redis_port.map_or(String::new(), |port| {
        format!("[cluster]\nredis = \"redis://127.0.0.1:{port}/0\"\nkey_prefix = \"faults:\"\n")
    });
    format!(
        "[server]\nworkers = 1\n{cluster}\
         [[listen]]\naddr = \"127.0.0.{n}:{tls_port}\"\n\
         tls = {{ acme = {{ domains = [\"localhost\"], email = \"ops@example.com\", \
         directory = \"{directory}\", ca_root = {ca_root:?}, state_dir = {state:?}, \
         retry = \"1s\" }} }}\n\
         [[route]]\npath = \"/\"\nrespond = {{ body = \"hello\" }}\n"
    )
}

#[test]
fn redis_down_at_start_orders_alone_then_fills_redis_and_a_reload_that_adds_the_cluster_takes_it_up()
 {
    let dir = temp_dir("fleet-faults");
    let tls_port = free_port();
    let Some(pebble) = Pebble::start(&dir, tls_port, free_port(), 3600) else {
        return;
    };
    let redis_port = free_port();
    // Redis is not there yet: the instance, which has no certificate, orders alone, says
    // so, and serves.
    let mut first = Server::start(&fleet_config(
        1,
        tls_port,
        &pebble,
        &dir.join("state-1"),
        Some(redis_port),
    ));
    first.wait_for_line(|l| l.contains("ordering alone"));
    first.wait_for_line(issued);
    // Redis comes (empty): the instance's own certificate goes there.
    let Some(redis) = support::redis::Redis::on(redis_port) else {
        return;
    };
    first.wait_for_line(|l| l.contains("this instance's certificate stored for the fleet"));
    // An instance without [cluster] and without a certificate (its own orders fail: the
    // CA validates on the first instance); a reload that adds [cluster] makes it serve the
    // fleet's, ordering nothing more.
    let mut second = Server::start(&fleet_config(
        2,
        tls_port,
        &pebble,
        &dir.join("state-2"),
        None,
    ));
    second.wait_for_line(|l| l.contains("ACME: could not obtain a certificate"));
    second.rewrite_config(&fleet_config(
        2,
        tls_port,
        &pebble,
        &dir.join("state-2"),
        Some(redis_port),
    ));
    second.signal(rustix::process::Signal::HUP);
    second.wait_for_line(|l| l.contains("ACME: serving the fleet's certificate"));
    let trusting = client(&[&pebble.issuing_root()]);
    let served: Vec<Vec<u8>> = [1u8, 2]
        .iter()
        .map(|n| {
            let addr = SocketAddr::from(([127, 0, 0, *n], tls_port));
            let mut tls = connect(addr, "localhost", &trusting).unwrap();
            assert_eq!(body(&mut tls, "/"), "hello");
            peer_der(&tls)
        })
        .collect();
    assert_eq!(served[0], served[1], "one certificate for the fleet");
    assert_eq!(
        std::fs::read_to_string(&pebble.log)
            .unwrap()
            .matches("Issued certificate")
            .count(),
        1
    );
    drop((first, second, redis));
    let _ = std::fs::remove_dir_all(dir);
}
