//! The key file's formats and the names records go to; then publishing, propagation and
//! removal against a real BIND (`named` and `tsig-keygen`, Debian's `bind9`), started per
//! test with a zone of its own and a TSIG key.
//!
//! Without `named` on PATH the BIND tests are skipped, unless SCB_REQUIRE_TOOLS says they
//! must run.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::*;

const ZONE: &str = "example.test.";

fn name(text: &str) -> Name {
    dns_name(text).unwrap()
}

#[test]
fn a_bare_base64_secret_is_taken_whole_with_the_configured_algorithm() {
    let (algorithm, secret) = parse_secret("  c2VjcmV0\n", &name("scb."), None).unwrap();
    assert_eq!(
        (algorithm, secret.as_slice()),
        (TsigAlgorithm::HmacSha256, &b"secret"[..])
    );
    let (algorithm, _) =
        parse_secret("c2VjcmV0", &name("scb."), Some(TsigAlgorithm::HmacSha512)).unwrap();
    assert_eq!(algorithm, TsigAlgorithm::HmacSha512);
    // Padding may be left out.
    let (_, secret) = parse_secret("c2VjcmV0MQ", &name("scb."), None).unwrap();
    assert_eq!(secret, b"secret1");
}

#[test]
fn tsig_keygen_output_gives_the_named_keys_algorithm_and_secret() {
    let file = "# made by tsig-keygen\n\
                key \"other\" {\n\talgorithm hmac-sha512;\n\tsecret \"b3RoZXI=\";\n};\n\
                /* the one scb uses */\n\
                key \"scb\" {\n\talgorithm hmac-sha384;\n\tsecret \"c2VjcmV0\";\n};\n\
                zone \"example.test\" { allow-update { key \"scb\"; }; };\n";
    let (algorithm, secret) = parse_secret(file, &name("SCB"), None).unwrap();
    assert_eq!(
        (algorithm, secret.as_slice()),
        (TsigAlgorithm::HmacSha384, &b"secret"[..])
    );
    let (algorithm, secret) = parse_secret(file, &name("other."), None).unwrap();
    assert_eq!(
        (algorithm, secret.as_slice()),
        (TsigAlgorithm::HmacSha512, &b"other"[..])
    );
    assert_eq!(
        key_clauses(file).len(),
        2,
        "allow-update's `key` is no clause"
    );
}

#[test]
fn a_key_file_that_does_not_fit_says_why_without_the_secret() {
    let keygen = "key \"scb\" { algorithm hmac-sha256; secret \"c2VjcmV0\"; };";
    let cases = [
        (
            keygen,
            "nobody",
            None,
            "has no key \"nobody\" (it has \"scb\")",
        ),
        (
            keygen,
            "scb",
            Some(TsigAlgorithm::HmacSha512),
            "is hmac-sha256 there, not the configured hmac-sha512",
        ),
        (
            "key \"scb\" { algorithm hmac-md5; secret \"c2VjcmV0\"; };",
            "scb",
            None,
            "unknown TSIG algorithm \"hmac-md5\"",
        ),
        (
            "key \"scb\" { algorithm hmac-sha256; };",
            "scb",
            None,
            "has no secret",
        ),
        ("not base64 at all!", "scb", None, "not base64"),
        (
            "key \"scb\" { secret \"!!!\"; };",
            "scb",
            None,
            "not base64",
        ),
        ("\n\n", "scb", None, "is empty"),
    ];
    for (text, key, algorithm, want) in cases {
        let got = parse_secret(text, &name(key), algorithm).unwrap_err();
        assert!(got.contains(want), "{text:?}: got {got:?}, want {want:?}");
        assert!(!got.contains("c2VjcmV0"), "the secret shown: {got}");
    }
}

#[test]
fn algorithms_are_read_by_their_bind_names() {
    for (text, want) in [
        ("hmac-sha256", TsigAlgorithm::HmacSha256),
        ("HMAC-SHA384.", TsigAlgorithm::HmacSha384),
        ("hmac-sha512", TsigAlgorithm::HmacSha512),
    ] {
        assert_eq!(text.parse::<TsigAlgorithm>().unwrap(), want);
    }
    for refused in ["hmac-md5", "hmac-sha1", "hmac-sha224", "sha256", ""] {
        let err = refused.parse::<TsigAlgorithm>().unwrap_err();
        assert!(
            err.to_string().contains("expected \"hmac-sha256\""),
            "{err}"
        );
    }
}

#[test]
fn a_wildcard_and_its_base_name_share_one_record_inside_the_zone() {
    let zone = name(ZONE);
    let at = |domain: &str| record_name(&zone, domain).map(|n| n.to_ascii());
    assert_eq!(
        at("*.example.test").unwrap(),
        "_acme-challenge.example.test."
    );
    assert_eq!(at("example.test").unwrap(), "_acme-challenge.example.test.");
    assert_eq!(
        at("a.b.example.test").unwrap(),
        "_acme-challenge.a.b.example.test."
    );
    let err = at("example.org").unwrap_err();
    assert!(
        matches!(&err, Dns01Error::OutsideZone { record, zone }
            if record == "_acme-challenge.example.org." && zone == ZONE),
        "{err:?}"
    );
    // A name that merely ends like the zone is outside it.
    assert!(at("notexample.test").is_err());
}

#[test]
fn zones_are_absolute_with_or_without_the_final_dot() {
    let key = TsigKey::new("scb", TsigAlgorithm::HmacSha256, b"k".to_vec()).unwrap();
    let server: SocketAddr = "127.0.0.1:53".parse().unwrap();
    let dotted = Rfc2136::new(server, "example.test.", key.clone()).unwrap();
    let bare = Rfc2136::new(server, "Example.Test", key.clone()).unwrap();
    assert_eq!(dotted, bare);
    assert_eq!(dotted.zone(), ZONE);
    for bad in ["", ".", "exa mple.test", "a..b"] {
        assert!(
            matches!(
                Rfc2136::new(server, bad, key.clone()),
                Err(Dns01Error::Name { .. })
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn debug_never_shows_the_secret() {
    let key = TsigKey::new("scb", TsigAlgorithm::HmacSha256, b"hunter2-secret".to_vec()).unwrap();
    let dns = Dns01::new(Rfc2136::new("127.0.0.1:53".parse().unwrap(), ZONE, key).unwrap());
    let shown = format!(
        "{:?}",
        crate::AcmeSettings::new(["example.test"], "/x")
            .challenge(crate::AcmeChallenge::Dns01(dns))
    );
    assert!(
        shown.contains("scb.") && shown.contains("<redacted>"),
        "{shown}"
    );
    assert!(
        !shown.contains("hunter2") && !shown.contains("104, 117"),
        "{shown}"
    );
}

/// A free port on 127.0.0.1 for both UDP and TCP.
fn free_port() -> u16 {
    loop {
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Says a test is skipped for want of `tool`, unless SCB_REQUIRE_TOOLS says it must run.
fn skipped(tool: &str, why: &dyn std::fmt::Debug) {
    assert!(
        std::env::var_os("SCB_REQUIRE_TOOLS").is_none(),
        "`{tool}` (Debian's bind9) did not run ({why:?}), and SCB_REQUIRE_TOOLS says these tests must run"
    );
    #[allow(clippy::print_stderr, reason = "the skip is reported, not silent")]
    {
        eprintln!("skipped: `{tool}` did not run ({why:?}); apt-get install bind9");
    }
}

/// A running `named` serving `example.test` (updates allowed to the key `scb`; the key
/// `reader` is known but may not update), killed on drop.
struct Bind {
    child: Child,
    dir: PathBuf,
    addr: SocketAddr,
    /// `tsig-keygen`'s file for `scb`.
    key_file: PathBuf,
}

impl Bind {
    /// Starts one in a directory of its own; `extra` goes at the end of the zone file.
    /// `None` when `named` is not installed (and the test may be skipped).
    fn start(test: &str, extra: &str) -> Option<Self> {
        let mut keys = String::new();
        for key in ["scb", "reader"] {
            match Command::new("tsig-keygen")
                .args(["-a", "hmac-sha256", key])
                .output()
            {
                Ok(out) if out.status.success() => {
                    keys.push_str(&String::from_utf8(out.stdout).unwrap());
                }
                other => {
                    skipped("tsig-keygen", &other);
                    return None;
                }
            }
        }
        // Made once the tools are known to be there: a skipped test leaves nothing behind.
        let dir = std::env::temp_dir().join(format!("scb-tls-dns01-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let key_file = dir.join("tsig.key");
        std::fs::write(&key_file, &keys).unwrap();
        let port = free_port();
        let d = dir.display();
        std::fs::write(
            dir.join("named.conf"),
            format!(
                "include \"{d}/tsig.key\";\n\
                 options {{ directory \"{d}\"; pid-file \"{d}/named.pid\"; \
                 session-keyfile \"{d}/session.key\"; managed-keys-directory \"{d}\";\n\
                 listen-on port {port} {{ 127.0.0.1; }}; listen-on-v6 {{ none; }};\n\
                 recursion no; dnssec-validation no; notify no; }};\n\
                 controls {{ }};\n\
                 zone \"example.test\" {{ type primary; file \"{d}/example.test.zone\"; \
                 allow-update {{ key \"scb\"; }}; }};\n"
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("example.test.zone"),
            format!(
                "$TTL 60\n@ IN SOA ns.example.test. hostmaster.example.test. ( 1 60 60 600 60 )\n\
                 @ IN NS ns.example.test.\nns IN A 127.0.0.1\n@ IN A 127.0.0.1\n{extra}"
            ),
        )
        .unwrap();
        let child = match Command::new("named")
            .args(["-g", "-4", "-c"])
            .arg(dir.join("named.conf"))
            .args(["-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("named.log")).unwrap())
            .spawn()
        {
            Ok(child) => child,
            Err(e) => {
                skipped("named", &e);
                return None;
            }
        };
        Some(Self {
            child,
            dir,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            key_file,
        })
    }

    /// Waits until the zone is served.
    async fn ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(answer) = ask(
                self.addr,
                DnsTransport::Udp,
                &name(ZONE),
                RecordType::SOA,
                None,
            )
            .await
                && answer.metadata.authoritative
            {
                return;
            }
            let log = std::fs::read_to_string(self.dir.join("named.log")).unwrap_or_default();
            assert!(Instant::now() < deadline, "named did not start:\n{log}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The key `scb` as the server has it.
    fn key(&self) -> TsigKey {
        TsigKey::from_file("scb", None, &self.key_file).unwrap()
    }

    /// DNS-01 through this server, the NS set asked on its port.
    fn dns01(&self, key: TsigKey) -> Dns01 {
        Dns01::new(Rfc2136::new(self.addr, ZONE, key).unwrap())
            .propagation_interval(Duration::from_millis(100))
            .nameserver_port(self.addr.port())
    }

    /// The TXT values at `record`, if the answer is authoritative.
    async fn txt(&self, record: &str) -> Vec<String> {
        let answer = ask(
            self.addr,
            DnsTransport::Udp,
            &name(record),
            RecordType::TXT,
            None,
        )
        .await
        .unwrap();
        assert!(answer.metadata.authoritative);
        let mut values: Vec<String> = answer
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::TXT(txt) => Some(String::from_utf8(txt.txt_data.concat()).unwrap()),
                _ => None,
            })
            .collect();
        values.sort();
        values
    }
}

impl Drop for Bind {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A key of `key_file`'s name with another secret.
fn wrong_secret() -> TsigKey {
    TsigKey::new("scb", TsigAlgorithm::HmacSha256, b"not the secret".to_vec()).unwrap()
}

#[tokio::test]
async fn records_are_added_seen_with_authority_at_every_nameserver_and_removed_by_value() {
    let Some(bind) = Bind::start("publish", "") else {
        return;
    };
    bind.ready().await;
    let dns = bind.dns01(bind.key());
    // Someone else's value at the same name, which must outlive ours.
    let mut theirs = Published::new(&dns);
    theirs.add("example.test", "someone-else").await.unwrap();

    let mut ours = Published::new(&dns);
    // A wildcard and its base name: two values at one name, neither refused as a duplicate.
    ours.add("example.test", "wildcard-value").await.unwrap();
    ours.add("example.test", "apex-value").await.unwrap();
    ours.add("www.example.test", "www-value").await.unwrap();
    assert_eq!(
        ours.names(),
        "_acme-challenge.example.test., _acme-challenge.www.example.test."
    );
    // The configured server and the NS set (ns.example.test, by its glue).
    ours.propagated().await.unwrap();
    assert_eq!(
        bind.txt("_acme-challenge.example.test.").await,
        ["apex-value", "someone-else", "wildcard-value"]
    );
    assert_eq!(
        bind.txt("_acme-challenge.www.example.test.").await,
        ["www-value"]
    );

    ours.remove().await.unwrap();
    assert_eq!(
        bind.txt("_acme-challenge.example.test.").await,
        ["someone-else"]
    );
    assert!(
        bind.txt("_acme-challenge.www.example.test.")
            .await
            .is_empty()
    );
    theirs.remove().await.unwrap();
    assert!(bind.txt("_acme-challenge.example.test.").await.is_empty());
    assert!(
        bind.dir.join("example.test.zone.jnl").exists(),
        "updated through the journal"
    );
}

#[tokio::test]
async fn updates_go_over_tcp_when_asked() {
    let Some(bind) = Bind::start("tcp", "") else {
        return;
    };
    bind.ready().await;
    let dns = Dns01::new(
        Rfc2136::new(bind.addr, ZONE, bind.key())
            .unwrap()
            .transport(DnsTransport::Tcp),
    )
    .check_nameservers(false);
    let mut records = Published::new(&dns);
    records.add("*.example.test", "over-tcp").await.unwrap();
    records.propagated().await.unwrap();
    assert_eq!(
        bind.txt("_acme-challenge.example.test.").await,
        ["over-tcp"]
    );
    records.remove().await.unwrap();
    assert!(bind.txt("_acme-challenge.example.test.").await.is_empty());
}

#[tokio::test]
async fn an_abandoned_order_removes_its_records_from_a_task_of_their_own() {
    let Some(bind) = Bind::start("abandoned", "") else {
        return;
    };
    bind.ready().await;
    let dns = bind.dns01(bind.key());
    let mut records = Published::new(&dns);
    records.add("example.test", "abandoned").await.unwrap();
    assert_eq!(
        bind.txt("_acme-challenge.example.test.").await,
        ["abandoned"]
    );
    drop(records);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !bind.txt("_acme-challenge.example.test.").await.is_empty() {
        assert!(Instant::now() < deadline, "the record stayed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_wrong_secret_or_an_unknown_key_is_a_refused_signature() {
    let Some(bind) = Bind::start("badsig", "") else {
        return;
    };
    bind.ready().await;
    let unknown = TsigKey::new("nobody", TsigAlgorithm::HmacSha256, b"x".to_vec()).unwrap();
    let other_algorithm = TsigKey::from_file("scb", None, &bind.key_file)
        .map(|k| TsigKey {
            algorithm: TsigAlgorithm::HmacSha512,
            ..k
        })
        .unwrap();
    for key in [wrong_secret(), unknown, other_algorithm] {
        let key_name = key.name();
        let mut records = Published::new(&bind.dns01(key));
        let err = records.add("example.test", "value").await.unwrap_err();
        assert!(
            matches!(&err, Dns01Error::Signature { server, key, .. } if *server == bind.addr && *key == key_name),
            "{err:?}"
        );
        // Refused, so nothing to remove.
        assert!(records.is_empty());
        let text = err.to_string();
        assert!(
            text.contains(&format!("refused the TSIG signature of key {key_name:?}"))
                && text.ends_with("its answer carries no MAC"),
            "{text}"
        );
        drop(records);
    }
    assert!(bind.txt("_acme-challenge.example.test.").await.is_empty());
}

#[tokio::test]
async fn a_key_the_zone_does_not_allow_and_an_unsigned_update_are_refused() {
    let Some(bind) = Bind::start("refused", "") else {
        return;
    };
    bind.ready().await;
    let reader = TsigKey::from_file("reader", None, &bind.key_file).unwrap();
    let mut records = Published::new(&bind.dns01(reader));
    let err = records.add("example.test", "value").await.unwrap_err();
    assert!(
        matches!(
            err,
            Dns01Error::Update {
                rcode: 5,
                action: "add",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("REFUSED (the server does not let this key update"),
        "{err}"
    );
    drop(records);

    // Without TSIG at all: the zone's `allow-update` is what the key gets past.
    let mut unsigned = client(bind.addr, DnsTransport::Udp, None, DNS_TIMEOUT)
        .await
        .unwrap();
    let record = Record::from_rdata(
        name("_acme-challenge.example.test."),
        60,
        RData::TXT(TXT::new(vec!["unsigned".into()])),
    );
    let answer = unsigned.append(record, name(ZONE), false).await.unwrap();
    assert_eq!(answer.metadata.response_code, ResponseCode::Refused);
    assert!(bind.txt("_acme-challenge.example.test.").await.is_empty());
}

#[tokio::test]
async fn a_zone_the_server_does_not_serve_is_not_authoritative() {
    let Some(bind) = Bind::start("notauth", "") else {
        return;
    };
    bind.ready().await;
    let dns = Dns01::new(Rfc2136::new(bind.addr, "other.test.", bind.key()).unwrap());
    let mut records = Published::new(&dns);
    let err = records.add("other.test", "value").await.unwrap_err();
    assert!(
        matches!(err, Dns01Error::Update { rcode: 9, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("NOTAUTH"), "{err}");
}

#[tokio::test]
async fn a_nameserver_without_the_records_holds_the_wait_until_the_timeout_naming_it() {
    // A second nameserver, at an address where no server listens.
    let Some(bind) = Bind::start("lagging", "@ IN NS ns2.example.test.\nns2 IN A 127.0.0.2\n")
    else {
        return;
    };
    bind.ready().await;
    let dns = bind
        .dns01(bind.key())
        .propagation_timeout(Duration::from_millis(500));
    let mut records = Published::new(&dns);
    records.add("example.test", "value").await.unwrap();
    let started = Instant::now();
    let err = records.propagated().await.unwrap_err();
    // The silent server's queries are cut at the deadline, not at DNS_TIMEOUT.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let Dns01Error::NotPropagated { waiting, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert!(
        waiting[0].starts_with("_acme-challenge.example.test. at ns2.example.test. (127.0.0.2:")
            && waiting[0].contains("did not answer"),
        "{waiting:?}"
    );
    assert!(
        err.to_string()
            .contains("not visible everywhere after 0.5s"),
        "{err}"
    );
    records.remove().await.unwrap();

    // Without the NS set, the configured server has the last word.
    let dns = dns.check_nameservers(false);
    let mut records = Published::new(&dns);
    records.add("example.test", "value").await.unwrap();
    records.propagated().await.unwrap();
    records.remove().await.unwrap();
}

#[tokio::test]
async fn a_server_that_is_down_is_unreachable() {
    let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let key = TsigKey::new("scb", TsigAlgorithm::HmacSha256, b"k".to_vec()).unwrap();
    for transport in [DnsTransport::Udp, DnsTransport::Tcp] {
        let dns = Dns01::new(
            Rfc2136::new(addr, ZONE, key.clone())
                .unwrap()
                .transport(transport),
        );
        let mut records = Published::new(&dns);
        let err = records.add("example.test", "value").await.unwrap_err();
        assert!(
            matches!(&err, Dns01Error::Unreachable { server, .. } if *server == addr),
            "{transport:?}: {err:?}"
        );
        // Over UDP the update may have arrived and its answer been lost: the removal
        // tries it (and fails the same way). Over TCP it never left.
        match transport {
            DnsTransport::Udp => assert_eq!(records.names(), "_acme-challenge.example.test."),
            _ => assert!(records.is_empty()),
        }
        drop(records);
    }
}
