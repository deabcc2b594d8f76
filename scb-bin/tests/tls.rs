//! `scb run` with a TLS listener: HTTPS served with HSTS, plain HTTP redirected, certificates
//! checked at `scb check`, and reloaded by `scb reload` while open connections keep theirs.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use scb_tls::rustls;
use support::tls::{client, connect, peer_der, request};
use support::{Server, check, get, scb};

/// A self-signed certificate for `localhost`, written as PEM files under `dir`.
struct Cert {
    der: Vec<u8>,
    cert: PathBuf,
    key: PathBuf,
}

fn make_cert(dir: &Path, name: &str, expired: bool) -> Cert {
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    if expired {
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    }
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let cert_path = dir.join(format!("{name}.pem"));
    let key_path = dir.join(format!("{name}.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    Cert {
        der: cert.der().to_vec(),
        cert: cert_path,
        key: key_path,
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("scb-bin-tls-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_tls_listener_serves_https_redirects_plain_http_and_reloads() {
    let dir = temp_dir("serve");
    let first = make_cert(&dir, "first", false);
    let live_cert = dir.join("live.pem");
    let live_key = dir.join("live.key");
    std::fs::copy(&first.cert, &live_cert).unwrap();
    std::fs::copy(&first.key, &live_key).unwrap();
    let pid_file = dir.join("scb.pid");
    let config = format!(
        "[server]\nworkers = 1\npid_file = {pid:?}\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\nredirect_https = true\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\n\
         tls = {{ cert = {cert:?}, key = {key:?}, hsts = \"max-age=600\" }}\n\
         [[route]]\npath = \"/hello\"\nrespond = {{ body = \"hello\" }}\n",
        pid = pid_file.display().to_string(),
        cert = live_cert.display().to_string(),
        key = live_key.display().to_string(),
    );
    let server = Server::start(&config);
    let (plain, secure) = (server.addrs[0], server.addrs[1]);

    // Plain HTTP: a redirect to the TLS listener's port, without HSTS.
    let res = get(plain, "/hello?x=1");
    assert_eq!(res.status, 308);
    assert_eq!(
        res.header("location"),
        Some(format!("https://test:{}/hello?x=1", secure.port()).as_str())
    );
    assert_eq!(res.header("strict-transport-security"), None);

    // HTTPS: the response, with HSTS, from the first certificate.
    let trusts_first = client(&[&first.der]);
    let mut old = connect(secure, &trusts_first);
    let text = request(&mut old, "/hello");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.contains("strict-transport-security: max-age=600"),
        "{text}"
    );
    assert!(text.ends_with("hello"), "{text}");
    assert_eq!(peer_der(&old), first.der);

    // New files, then `scb reload`: new connections get the new certificate...
    let second = make_cert(&dir, "second", false);
    std::fs::copy(&second.cert, &live_cert).unwrap();
    std::fs::copy(&second.key, &live_key).unwrap();
    let config_file = support::config_file(&config);
    let out = scb()
        .args(["reload", "--config"])
        .arg(&config_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut server = server;
    server.wait_for_line(|l| l.contains("reloaded "));
    let trusts_both = client(&[&first.der, &second.der]);
    let mut new = connect(secure, &trusts_both);
    assert!(request(&mut new, "/hello").ends_with("hello"));
    assert_eq!(peer_der(&new), second.der);
    // ...and the connection opened before keeps working, on the certificate it had.
    assert!(request(&mut old, "/hello").ends_with("hello"));
    assert_eq!(peer_der(&old), first.der);

    // A broken file: the reload fails, is logged, and the second certificate stays.
    std::fs::write(&live_cert, "not a certificate").unwrap();
    let out = scb()
        .args(["reload", "--config"])
        .arg(&config_file)
        .output()
        .unwrap();
    // `scb reload` checks the config first, so it refuses the broken file itself.
    assert!(!out.status.success());
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(
            std::fs::read_to_string(&pid_file)
                .unwrap()
                .trim()
                .parse()
                .unwrap(),
        )
        .unwrap(),
        rustix::process::Signal::HUP,
    )
    .unwrap();
    server.wait_for_line(|l| l.contains("reload failed"));
    let mut after = connect(secure, &trusts_both);
    assert!(request(&mut after, "/hello").ends_with("hello"));
    assert_eq!(peer_der(&after), second.der);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_names_the_certificate_file_that_is_missing_expired_or_mismatched() {
    let dir = temp_dir("check");
    let good = make_cert(&dir, "good", false);
    let expired = make_cert(&dir, "expired", true);
    let other = make_cert(&dir, "other", false);
    let cases = [
        (dir.join("absent.pem"), good.key.clone(), "absent.pem"),
        (expired.cert, expired.key, "expired.pem"),
        (good.cert.clone(), other.key, "good.pem"),
    ];
    for (cert, key, named) in cases {
        let config = format!(
            "[[listen]]\naddr = \"127.0.0.1:0\"\ntls = {{ cert = {:?}, key = {:?} }}\n",
            cert.display().to_string(),
            key.display().to_string()
        );
        let out = check(&config);
        assert!(!out.status.success(), "{config}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("listen[0].tls"), "{stderr}");
        assert!(stderr.contains(named), "{named}: {stderr}");
    }
    let config = format!(
        "[[listen]]\naddr = \"127.0.0.1:0\"\ntls = {{ cert = {:?}, key = {:?} }}\n",
        good.cert.display().to_string(),
        good.key.display().to_string()
    );
    assert!(check(&config).status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A CA for client certificates, written as `client-ca.pem` under `dir`, and a client
/// certificate it signed for `cn`.
fn client_pki(
    dir: &Path,
    cn: &str,
) -> (
    PathBuf,
    Vec<rustls::pki_types::CertificateDer<'static>>,
    rustls::pki_types::PrivateKeyDer<'static>,
) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "clients CA");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let ca_path = dir.join("client-ca.pem");
    std::fs::write(&ca_path, ca_cert.pem()).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![format!("{cn}.clients.test")]).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    let issuer = rcgen::Issuer::from_params(&ca, &ca_key);
    let cert = params.signed_by(&key, &issuer).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
    (ca_path, vec![cert.der().clone()], key)
}

/// An upstream that answers with the client-certificate fields it was sent.
fn cert_echo_upstream() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 8192];
            let n = stream.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
            let field = |name: &str| {
                head.lines()
                    .find_map(|l| l.strip_prefix(name).map(str::trim).map(str::to_owned))
                    .unwrap_or_else(|| "-".to_owned())
            };
            let body = format!(
                "subject={} san={}",
                field("x-client-cert-subject:"),
                field("x-client-cert-san:")
            );
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

#[test]
fn client_certificates_are_verified_and_forwarded_and_never_forged() {
    let dir = temp_dir("mtls");
    let server_cert = make_cert(&dir, "server", false);
    let (ca, chain, key) = client_pki(&dir, "alice");
    let upstream = cert_echo_upstream();
    let config = |auth: &str| {
        format!(
            "[server]\nworkers = 1\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
             tls = {{ cert = {cert:?}, key = {key:?}, client_ca = {ca:?}, client_auth = \"{auth}\" }}\n\
             [[route]]\nprefix = \"/\"\nproxy = {{ upstreams = [\"{upstream}\"], forward_client_cert = true }}\n",
            cert = server_cert.cert.display().to_string(),
            key = server_cert.key.display().to_string(),
            ca = ca.display().to_string(),
        )
    };
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(
            server_cert.der.clone(),
        ))
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let with_cert = Arc::new(builder.clone().with_client_auth_cert(chain, key).unwrap());
    let without = Arc::new(builder.with_no_client_auth());
    let forged = "GET / HTTP/1.1\r\nHost: localhost\r\nX-Client-Cert-Subject: CN=admin\r\n\
                  X-Client-Cert-San: admin.test\r\nConnection: close\r\n\r\n";

    let optional = Server::start(&config("optional"));
    let mut alice = connect(optional.addr(), &with_cert);
    let res = request(&mut alice, "/");
    assert!(
        res.ends_with("subject=cn=alice san=alice.clients.test"),
        "{res}"
    );
    // A client's own fields are dropped, with a certificate or without one.
    write!(alice, "{forged}").unwrap();
    let mut out = Vec::new();
    let _ = alice.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.contains("subject=cn=alice san=alice.clients.test"),
        "{text}"
    );
    let mut anonymous = connect(optional.addr(), &without);
    write!(anonymous, "{forged}").unwrap();
    let mut out = Vec::new();
    let _ = anonymous.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("subject=- san=-"), "{text}");

    let required = Server::start(&config("required"));
    assert!(request(&mut connect(required.addr(), &with_cert), "/").contains("subject=cn=alice"));
    // No certificate: the handshake fails and nothing is answered.
    let mut refused = connect(required.addr(), &without);
    let _ = write!(
        refused,
        "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    );
    let mut out = Vec::new();
    let read = refused.read_to_end(&mut out);
    assert!(
        read.is_err() || out.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&out)
    );

    let out = check(&config("sometimes"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("listen[0].tls.client_auth: expected \"required\" or \"optional\""),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn https_upstreams_are_verified_pooled_and_can_present_a_certificate() {
    let dir = temp_dir("https-upstream");
    let good = make_cert(&dir, "good", false);
    let expired = make_cert(&dir, "expired", false);
    let (ca, chain, key) = client_pki(&dir, "front");
    // The client certificate the front presents, as files.
    let front_cert = dir.join("front.pem");
    let front_key = dir.join("front.key");
    let pem = |label: &str, der: &[u8]| {
        use std::fmt::Write as _;
        let b64 = base64_encode(der);
        let mut out = format!("-----BEGIN {label}-----\n");
        for line in b64.as_bytes().chunks(64) {
            let _ = writeln!(out, "{}", std::str::from_utf8(line).unwrap());
        }
        let _ = writeln!(out, "-----END {label}-----");
        out
    };
    std::fs::write(&front_cert, pem("CERTIFICATE", &chain[0])).unwrap();
    std::fs::write(&front_key, pem("PRIVATE KEY", key.secret_der())).unwrap();

    // The back: TLS with `good` (for localhost), client certificates required from the
    // clients CA, the verified subject echoed by an upstream behind it.
    let echo = cert_echo_upstream();
    let back = Server::start(&format!(
        "[server]\nworkers = 1\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
         tls = {{ cert = {cert:?}, key = {key:?}, client_ca = {ca:?} }}\n\
         [[route]]\nprefix = \"/\"\nproxy = {{ upstreams = [\"{echo}\"], forward_client_cert = true }}\n",
        cert = good.cert.display().to_string(),
        key = good.key.display().to_string(),
        ca = ca.display().to_string(),
    ));
    // Between the two, a TCP relay that counts the connections the front opens.
    let (relay, opened) = counting_relay(back.addr());
    let port = relay.port();
    let front = |keys: &str| {
        Server::start(&format!(
            "[server]\nworkers = 1\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
             [[route]]\nprefix = \"/\"\nproxy = {{ upstreams = [\"https://localhost:{port}\"]{keys} }}\n"
        ))
    };
    let files = |s: &str| {
        format!(
            ", client_cert = {:?}, client_key = {:?}{s}",
            front_cert.display().to_string(),
            front_key.display().to_string()
        )
    };

    // Verified against the back's certificate, presenting the front's own: the back's
    // upstream sees the front as the client certificate's subject.
    let verified = front(&files(&format!(
        ", ca_file = {:?}",
        good.cert.display().to_string()
    )));
    let before = opened.load(std::sync::atomic::Ordering::SeqCst);
    for _ in 0..3 {
        let res = get(verified.addr(), "/x");
        assert_eq!(res.status, 200);
        assert_eq!(res.text(), "subject=cn=front san=front.clients.test");
    }
    // One TLS connection carried the three requests: pooled like a plain one.
    assert_eq!(opened.load(std::sync::atomic::Ordering::SeqCst) - before, 1);
    // The system's roots do not know the back's self-signed certificate, another CA file
    // does not either: 502, and the handshake's refusal is logged.
    let untrusted = front(&files(""));
    assert_eq!(get(untrusted.addr(), "/x").status, 502);
    let wrong_ca = front(&files(&format!(
        ", ca_file = {:?}",
        expired.cert.display().to_string()
    )));
    assert_eq!(get(wrong_ca.addr(), "/x").status, 502);
    // Without a certificate of its own, the back refuses the front: 502 too.
    let anonymous = front(&format!(
        ", ca_file = {:?}",
        good.cert.display().to_string()
    ));
    assert_eq!(get(anonymous.addr(), "/x").status, 502);
    // insecure_skip_verify takes any certificate (and says so in the log).
    let skipping = front(&files(", insecure_skip_verify = true"));
    assert_eq!(get(skipping.addr(), "/x").status, 200);
    assert!(
        skipping.log.iter().any(|l| l.contains("NOT verified")),
        "{:?}",
        skipping.log
    );

    let out = check(
        "[[listen]]\naddr = \"127.0.0.1:0\"\n[[route]]\nprefix = \"/\"\n\
         proxy = { upstreams = [\"https://localhost:1\"], ca_file = \"/nonexistent/ca.pem\" }\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("route[0].proxy.ca_file: upstream TLS: /nonexistent/ca.pem"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// What `openssl req -x509` makes for an internal upstream: a self-signed certificate
/// for its own name, marked as a CA. webpki never takes it as the certificate a server
/// presents, so as a `ca_file` it can only fail; `check` says so and gives the pin, and
/// the pin trusts exactly it.
#[test]
fn a_self_signed_upstream_is_trusted_by_its_pin_and_check_says_so() {
    let dir = temp_dir("pin");
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    let cert_path = dir.join("upstream.pem");
    let key_path = dir.join("upstream.key");
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    let pin = scb_proxy::CertificatePin::of(cert.der()).to_string();
    let other = make_cert(&dir, "other", false);
    let other_pin = scb_proxy::CertificatePin::of(&other.der).to_string();

    let back = Server::start(&format!(
        "[server]\nworkers = 1\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
         tls = {{ cert = {cert:?}, key = {key:?} }}\n\
         [[route]]\nprefix = \"/\"\nrespond = {{ status = 200, body = \"internal\" }}\n",
        cert = cert_path.display().to_string(),
        key = key_path.display().to_string(),
    ));
    let port = back.addr().port();
    let front_config = |keys: &str| {
        format!(
            "[server]\nworkers = 1\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
             [[route]]\nprefix = \"/\"\nproxy = {{ upstreams = [\"https://localhost:{port}\"]{keys} }}\n"
        )
    };

    // As a CA file: refused at check, naming the key, why, and the line to write instead.
    let ca_file = front_config(&format!(
        ", ca_file = {:?}",
        cert_path.display().to_string()
    ));
    let out = check(&ca_file);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("route[0].proxy.ca_file"), "{stderr}");
    assert!(stderr.contains("self-signed"), "{stderr}");
    assert!(stderr.contains(&format!("pin = \"{pin}\"")), "{stderr}");

    // Pinned: served, over and over; the pin may be written without colons, in lower case.
    let pinned = Server::start(&front_config(&format!(", pin = {pin:?}")));
    for _ in 0..3 {
        let res = get(pinned.addr(), "/");
        assert_eq!(res.status, 200);
        assert_eq!(res.text(), "internal");
    }
    let bare = pin.replace(':', "").to_lowercase();
    let listed = Server::start(&front_config(&format!(", pin = [{other_pin:?}, {bare:?}]")));
    assert_eq!(get(listed.addr(), "/").status, 200);
    // Another certificate's pin: refused, as any untrusted certificate is.
    let wrong = Server::start(&front_config(&format!(", pin = {other_pin:?}")));
    assert_eq!(get(wrong.addr(), "/").status, 502);

    // A pin that is not one, a pin beside a CA file, and an empty list: check says where.
    let out = check(&front_config(", pin = [\"AB:CD\"]"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("route[0].proxy.pin: not a SHA-256"),
        "{stderr}"
    );
    let out = check(&front_config(&format!(
        ", pin = {pin:?}, ca_file = {:?}",
        other.cert.display().to_string()
    )));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("route[0].proxy.pin: upstream TLS: `pin`"),
        "{stderr}"
    );
    let out = check(&front_config(", pin = []"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("route[0].proxy.pin: an empty list"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A TCP relay to `target`, and how many connections it has accepted.
fn counting_relay(target: SocketAddr) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let opened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&opened);
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let Ok(server) = TcpStream::connect(target) else {
                continue;
            };
            let pipe = |mut from: TcpStream, mut to: TcpStream| {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(std::net::Shutdown::Write);
                })
            };
            pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
            pipe(server, client);
        }
    });
    (addr, opened)
}

fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, &b| (n << 8) | u32::from(b)) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            out.push(if i <= chunk.len() {
                char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize])
            } else {
                '='
            });
        }
    }
    out
}
