//! A real DNS server for the DNS-01 tests: Debian's BIND (`named`, with `tsig-keygen` and
//! `dig` beside it), serving the zone `example.test` on a port of its own, updates allowed
//! to the TSIG key `scb`. Killed on drop.
//!
//! `Bind::start` is `None` when the tools are missing (the test is skipped with a line
//! saying so), unless SCB_REQUIRE_TOOLS says the tests must run.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::TIMEOUT;

/// The zone served, as scb's `zone` key writes it.
pub(crate) const ZONE: &str = "example.test.";

pub(crate) struct Bind {
    child: Child,
    dir: PathBuf,
    /// Where it answers, UDP and TCP.
    pub(crate) addr: SocketAddr,
    /// `tsig-keygen`'s output for the key `scb`, which may update the zone.
    pub(crate) key_file: PathBuf,
}

/// Runs one of BIND's tools; `None` (after the skip line) when it is not installed.
fn tool(program: &str, args: &[&str]) -> Option<Output> {
    match Command::new(program).args(args).output() {
        Ok(out) => Some(out),
        Err(e) => {
            assert!(
                std::env::var_os("SCB_REQUIRE_TOOLS").is_none(),
                "`{program}` is not on PATH ({e}), and SCB_REQUIRE_TOOLS says these tests must run"
            );
            #[allow(clippy::print_stderr, reason = "the skip is reported, not silent")]
            {
                eprintln!(
                    "skipped: `{program}` is not installed (apt-get install bind9 bind9-dnsutils)"
                );
            }
            None
        }
    }
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

/// A TSIG key file for `scb` as `tsig-keygen` writes it, with a fresh secret.
pub(crate) fn keygen(path: &Path) -> Option<()> {
    let out = tool("tsig-keygen", &["-a", "hmac-sha256", "scb"])?;
    assert!(out.status.success(), "{out:?}");
    std::fs::write(path, out.stdout).unwrap();
    Some(())
}

impl Bind {
    /// Starts `named` in `dir/bind` with the zone's apex and every name under it at
    /// 127.0.0.1, and waits until it answers.
    pub(crate) fn start(dir: &Path) -> Option<Self> {
        tool("dig", &["-v"])?;
        let dir = dir.join("bind");
        std::fs::create_dir_all(&dir).unwrap();
        let key_file = dir.join("tsig.key");
        keygen(&key_file)?;
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
            "$TTL 60\n@ IN SOA ns.example.test. hostmaster.example.test. ( 1 60 60 600 60 )\n\
             @ IN NS ns.example.test.\nns IN A 127.0.0.1\n@ IN A 127.0.0.1\n* IN A 127.0.0.1\n",
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
                assert!(
                    std::env::var_os("SCB_REQUIRE_TOOLS").is_none(),
                    "`named` is not on PATH ({e}), and SCB_REQUIRE_TOOLS says these tests must run"
                );
                #[allow(clippy::print_stderr, reason = "the skip is reported, not silent")]
                {
                    eprintln!("skipped: `named` is not installed (apt-get install bind9)");
                }
                return None;
            }
        };
        let bind = Self {
            child,
            dir,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            key_file,
        };
        let deadline = Instant::now() + TIMEOUT;
        while bind.dig(&["SOA", "example.test"]).is_empty() {
            let log = std::fs::read_to_string(bind.dir.join("named.log")).unwrap_or_default();
            assert!(Instant::now() < deadline, "named did not start:\n{log}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(bind)
    }

    /// `dig +short` at this server: the answer's lines.
    fn dig(&self, query: &[&str]) -> Vec<String> {
        let out = Command::new("dig")
            .args(["@127.0.0.1", "-p", &self.addr.port().to_string()])
            .args(["+short", "+norec", "+time=2", "+tries=1"])
            .args(query)
            .output()
            .unwrap();
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with(';'))
            .map(str::to_owned)
            .collect()
    }

    /// The TXT values at `name`.
    pub(crate) fn txt(&self, name: &str) -> Vec<String> {
        self.dig(&["TXT", name])
    }

    /// The `dns` table of an `acme` table publishing in this zone with `key_file`, and
    /// `extra` keys beside `rfc2136`. The NS set is not waited for: its server
    /// (ns.example.test, 127.0.0.1) would be asked on port 53, and this one listens
    /// elsewhere.
    pub(crate) fn dns_table(&self, key_file: &Path, extra: &str) -> String {
        format!(
            "dns = {{ rfc2136 = {{ server = \"{}\", zone = \"{ZONE}\", tsig_key = \"scb\", \
             tsig_secret_file = {key_file:?} }}, check_nameservers = false, \
             propagation_interval = \"100ms\"{extra} }}",
            self.addr
        )
    }
}

impl Drop for Bind {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
