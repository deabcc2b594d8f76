//! The servers under test: their capability table, their config templates and how each is
//! started.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use clap::ValueEnum;
use serde::Serialize;

use crate::harness::scenario::{Feature, Scenario};
use crate::harness::tools;

/// A server under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Server {
    /// This workspace's `scb` binary.
    #[value(name = "scb")]
    Scb,
    /// The same binary with a `[metrics]` table, as production runs it: Prometheus
    /// counters and histograms on every request, scraped from a listener of its own.
    #[value(name = "scb-metrics")]
    ScbMetrics,
    /// nginx from the distribution, tuned the way its users tune it.
    #[value(name = "nginx")]
    Nginx,
    /// The same nginx with its open-file cache on (`open_file_cache max=10000
    /// inactive=60s; open_file_cache_valid 1s; open_file_cache_min_uses 1;`), everything
    /// else as `nginx`: the peer for scb's own open-file cache.
    #[value(name = "nginx-tuned")]
    NginxTuned,
    /// HAProxy from the distribution, for `respond` and `proxy` (it serves no files).
    #[value(name = "haproxy")]
    Haproxy,
    /// Caddy from the distribution.
    #[value(name = "caddy")]
    Caddy,
    /// The axum 0.8 + tower-http `ServeDir` app in `bench/src/bin/axum-servedir.rs`.
    #[value(name = "axum-servedir")]
    AxumServedir,
}

/// What a server can serve today. A scenario whose features a server lacks is reported as
/// "not supported yet", never measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Capabilities {
    /// A fixed response (`/respond`).
    pub(crate) respond: bool,
    /// Files from the document root.
    pub(crate) static_files: bool,
    /// Reverse proxy to the upstream.
    pub(crate) proxy: bool,
    /// Reverse proxy to the upstream over TLS.
    pub(crate) proxy_tls: bool,
    /// Reverse proxy to the upstream over HTTP/2 in the clear.
    pub(crate) proxy_h2c: bool,
    /// TLS 1.3 + ALPN h2.
    pub(crate) tls_h2: bool,
    /// A response cache in front of the proxy.
    pub(crate) proxy_cache: bool,
    /// HTTP/3 on the TLS port.
    pub(crate) http3: bool,
    /// PHP through php-fpm over FastCGI, a connection per request.
    pub(crate) fastcgi: bool,
    /// The same through connections kept open (`FCGI_KEEP_CONN`).
    pub(crate) fastcgi_keep_conn: bool,
}

impl Capabilities {
    const ALL: Capabilities = Capabilities {
        respond: true,
        static_files: true,
        proxy: true,
        proxy_tls: true,
        proxy_h2c: true,
        tls_h2: true,
        proxy_cache: true,
        http3: true,
        fastcgi: true,
        fastcgi_keep_conn: true,
    };
    const NONE: Capabilities = Capabilities {
        respond: false,
        static_files: false,
        proxy: false,
        proxy_tls: false,
        proxy_h2c: false,
        tls_h2: false,
        proxy_cache: false,
        http3: false,
        fastcgi: false,
        fastcgi_keep_conn: false,
    };
    /// Everything but the HTTPS and h2c upstreams, a cache and FastCGI: not configured for
    /// these peers yet (Caddy 2.6 has no cache without a plugin, tower-http none at all,
    /// nor FastCGI).
    const ALL_BUT_PROXY_TLS_H2C: Capabilities = Capabilities {
        proxy_tls: false,
        proxy_h2c: false,
        proxy_cache: false,
        http3: false,
        fastcgi: false,
        fastcgi_keep_conn: false,
        ..Capabilities::ALL
    };
    /// nginx 1.22 (Debian's): HTTP/3 came in 1.25.
    const ALL_BUT_HTTP3: Capabilities = Capabilities {
        http3: false,
        ..Capabilities::ALL
    };

    /// Whether every feature the scenario requires is here.
    pub(crate) fn serves(self, scenario: Scenario) -> bool {
        scenario.requires().iter().all(|feature| match feature {
            Feature::Respond => self.respond,
            Feature::StaticFiles => self.static_files,
            Feature::Proxy => self.proxy,
            Feature::ProxyTls => self.proxy_tls,
            Feature::ProxyH2c => self.proxy_h2c,
            Feature::TlsH2 => self.tls_h2,
            Feature::ProxyCache => self.proxy_cache,
            Feature::Http3 => self.http3,
            Feature::FastCgi => self.fastcgi,
            Feature::FastCgiKeepConn => self.fastcgi_keep_conn,
        })
    }
}

/// The capability table. Each scb issue that lands a layer flips its entry here, and its
/// scenarios are measured from then on.
const CAPABILITIES: [(Server, Capabilities); 7] = [
    (
        Server::Scb,
        Capabilities {
            respond: true,
            static_files: true, // issue 4: scb-static
            proxy: true,        // issue 5: scb-proxy
            proxy_tls: true,    // issue 16: https upstreams
            proxy_h2c: true,    // issue 16: HTTP/2 upstreams
            tls_h2: true,       // issue 6: scb-tls
            proxy_cache: true,  // issue 27: scb-proxy's cache
            http3: true,        // issue 28: QUIC listeners
            fastcgi: true,      // issue 29: fastcgi routes
            fastcgi_keep_conn: true,
        },
    ),
    (Server::ScbMetrics, Capabilities::ALL),
    (Server::Nginx, Capabilities::ALL_BUT_HTTP3),
    (Server::NginxTuned, Capabilities::ALL_BUT_HTTP3),
    (
        Server::Haproxy,
        Capabilities {
            respond: true,
            proxy: true,
            ..Capabilities::NONE
        },
    ),
    // Caddy serves HTTP/3 by default; the harness turns it on for the h3 rows only.
    // `php_fastcgi` dials php-fpm per request: Caddy 2.6's FastCGI transport has no
    // setting that keeps connections (FCGI_KEEP_CONN).
    (
        Server::Caddy,
        Capabilities {
            http3: true,
            fastcgi: true,
            ..Capabilities::ALL_BUT_PROXY_TLS_H2C
        },
    ),
    (Server::AxumServedir, Capabilities::ALL_BUT_PROXY_TLS_H2C),
];

/// Everything a server's command line and config template are made from.
#[derive(Debug)]
pub(crate) struct LaunchInput<'a> {
    /// The rendered config file, for servers that read one.
    pub(crate) config: Option<&'a Path>,
    /// The server's own binary, for servers built from this workspace.
    pub(crate) binary: Option<&'a Path>,
    /// Plain HTTP/1.1 port on 127.0.0.1.
    pub(crate) http_port: u16,
    /// TLS port on 127.0.0.1.
    pub(crate) tls_port: u16,
    /// The upstream nginx, `host:port`.
    pub(crate) upstream: &'a str,
    /// Document root.
    pub(crate) docroot: &'a Path,
    /// PEM certificate chain.
    pub(crate) cert: &'a Path,
    /// PEM private key.
    pub(crate) key: &'a Path,
    /// Worker count.
    pub(crate) workers: usize,
    /// This server's own working directory (logs, pid files, Caddy's data dirs).
    pub(crate) workdir: &'a Path,
}

/// A program, its arguments and extra environment.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    /// The program.
    pub(crate) program: PathBuf,
    /// Its arguments.
    pub(crate) args: Vec<OsString>,
    /// Variables added to the inherited environment.
    pub(crate) env: Vec<(OsString, OsString)>,
}

impl Server {
    /// Every server, in the default table order.
    pub(crate) const ALL: [Server; 7] = [
        Server::Scb,
        Server::ScbMetrics,
        Server::Nginx,
        Server::NginxTuned,
        Server::Haproxy,
        Server::Caddy,
        Server::AxumServedir,
    ];

    /// The server's name in flags and reports.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Server::Scb => "scb",
            Server::ScbMetrics => "scb-metrics",
            Server::Nginx => "nginx",
            Server::NginxTuned => "nginx-tuned",
            Server::Haproxy => "haproxy",
            Server::Caddy => "caddy",
            Server::AxumServedir => "axum-servedir",
        }
    }

    /// This server's row of the capability table (a server without a row serves nothing:
    /// nothing is measured that the table does not claim).
    pub(crate) fn capabilities(self) -> Capabilities {
        CAPABILITIES
            .iter()
            .find(|(server, _)| *server == self)
            .map_or(Capabilities::NONE, |(_, caps)| *caps)
    }

    /// Whether this server can serve the scenario today.
    pub(crate) fn supports(self, scenario: Scenario) -> bool {
        self.capabilities().serves(scenario)
    }

    /// What `{{OPEN_FILE_CACHE}}` in nginx's template becomes for this server: nothing
    /// for nginx-tuned, whose open-file cache line then counts, and a comment marker for
    /// everyone else.
    pub(crate) const fn nginx_open_file_cache(self) -> &'static str {
        match self {
            Server::NginxTuned => "",
            _ => "# ",
        }
    }

    /// What `{{METRICS}}` in scb's template becomes: the `[metrics]` table, written as
    /// one top-level line (it is also rendered into the template's header comment), on a
    /// port of the system's choosing for `scb-metrics`; nothing for everyone else.
    pub(crate) const fn scb_metrics(self) -> &'static str {
        match self {
            Server::ScbMetrics => "metrics = { listen = \"127.0.0.1:0\" }",
            _ => "",
        }
    }

    /// The config template's file name in the configs directory, if the server reads one.
    pub(crate) const fn config_template(self) -> Option<&'static str> {
        match self {
            Server::Scb | Server::ScbMetrics => Some("scb.toml"),
            Server::Nginx | Server::NginxTuned => Some("nginx.conf"),
            Server::Haproxy => Some("haproxy.cfg"),
            Server::Caddy => Some("Caddyfile"),
            Server::AxumServedir => None,
        }
    }

    /// How to start the server in the foreground.
    ///
    /// # Errors
    ///
    /// When a config or binary the server needs is missing from `input`.
    pub(crate) fn launch(self, input: &LaunchInput<'_>) -> anyhow::Result<Launch> {
        let config = || {
            input
                .config
                .ok_or_else(|| anyhow::anyhow!("{self}: no rendered config"))
        };
        let binary = || {
            input
                .binary
                .ok_or_else(|| anyhow::anyhow!("{self}: no binary given"))
        };
        let os = |s: &str| OsString::from(s);
        Ok(match self {
            Server::Scb | Server::ScbMetrics => Launch {
                program: binary()?.to_path_buf(),
                args: vec![os("run"), os("--config"), config()?.into()],
                env: vec![],
            },
            // `-e stderr`: errors before the config's own error_log is read (a bad config,
            // a port in use) land in this server's log file, not in /var/log/nginx.
            Server::Nginx | Server::NginxTuned => nginx_launch(config()?),
            // `-db`: in the foreground, no daemon, logs (there are none) on stderr.
            Server::Haproxy => Launch {
                program: tools::program("haproxy"),
                args: vec![os("-db"), os("-f"), config()?.into()],
                env: vec![],
            },
            Server::Caddy => Launch {
                program: tools::program("caddy"),
                args: vec![
                    os("run"),
                    os("--config"),
                    config()?.into(),
                    os("--adapter"),
                    os("caddyfile"),
                ],
                env: vec![
                    (os("GOMAXPROCS"), os(&input.workers.to_string())),
                    // Caddy keeps certificates and autosaved configs under these; keep
                    // them in the run's work dir rather than in $HOME.
                    (os("XDG_DATA_HOME"), input.workdir.join("xdg-data").into()),
                    (
                        os("XDG_CONFIG_HOME"),
                        input.workdir.join("xdg-config").into(),
                    ),
                ],
            },
            Server::AxumServedir => {
                let addr = |port: u16| os(&format!("127.0.0.1:{port}"));
                Launch {
                    program: binary()?.to_path_buf(),
                    args: vec![
                        os("--http"),
                        addr(input.http_port),
                        os("--tls"),
                        addr(input.tls_port),
                        os("--root"),
                        input.docroot.into(),
                        os("--upstream"),
                        os(input.upstream),
                        os("--cert"),
                        input.cert.into(),
                        os("--key"),
                        input.key.into(),
                        os("--workers"),
                        os(&input.workers.to_string()),
                    ],
                    env: vec![],
                }
            }
        })
    }
}

/// nginx in the foreground (`daemon off` is in the config) on a rendered config.
pub(crate) fn nginx_launch(config: &Path) -> Launch {
    Launch {
        program: tools::program("nginx"),
        args: vec!["-e".into(), "stderr".into(), "-c".into(), config.into()],
        env: vec![],
    }
}

impl fmt::Display for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scb_serves_every_scenario() {
        assert!(Scenario::ALL.into_iter().all(|s| Server::Scb.supports(s)));
    }

    #[test]
    fn peers_serve_what_they_can_of_the_scenarios() {
        let unserved = |server: Server| -> Vec<Scenario> {
            Scenario::ALL
                .into_iter()
                .filter(|s| !server.supports(*s))
                .collect()
        };
        // nginx 1.22 has no HTTP/3.
        for server in [Server::Nginx, Server::NginxTuned] {
            assert_eq!(
                unserved(server),
                [Scenario::H3StaticSmall, Scenario::H3Respond],
                "{server}"
            );
        }
        let no_upstream_tls_h2c_or_cache = [
            Scenario::ProxyTls,
            Scenario::ProxyH2c,
            Scenario::ProxyCacheHit,
            Scenario::ProxyCache100k,
            Scenario::ProxyCache1m,
            Scenario::ProxyCacheMiss,
        ];
        let mut caddy = no_upstream_tls_h2c_or_cache.to_vec();
        caddy.push(Scenario::FastcgiHelloKeepconn);
        assert_eq!(unserved(Server::Caddy), caddy);
        let mut axum = no_upstream_tls_h2c_or_cache.to_vec();
        axum.extend([
            Scenario::H3StaticSmall,
            Scenario::H3Respond,
            Scenario::FastcgiHello,
            Scenario::FastcgiHelloKeepconn,
        ]);
        assert_eq!(unserved(Server::AxumServedir), axum);
    }

    #[test]
    fn tls_scenario_needs_both_static_files_and_tls() {
        let only_tls = Capabilities {
            respond: true,
            static_files: false,
            proxy: false,
            proxy_tls: false,
            proxy_h2c: false,
            tls_h2: true,
            proxy_cache: false,
            http3: false,
            fastcgi: false,
            fastcgi_keep_conn: false,
        };
        assert!(!only_tls.serves(Scenario::TlsH2StaticSmall));
    }

    #[test]
    fn every_server_has_a_table_row() {
        for server in Server::ALL {
            assert!(CAPABILITIES.iter().any(|(s, _)| *s == server));
        }
    }

    #[test]
    fn axum_servedir_gets_the_agreed_command_line() {
        let dir = Path::new("/w");
        let launch = Server::AxumServedir
            .launch(&LaunchInput {
                config: None,
                binary: Some(Path::new("/bin/axum-servedir")),
                http_port: 1,
                tls_port: 2,
                upstream: "127.0.0.1:3",
                docroot: Path::new("/w/docroot"),
                cert: Path::new("/w/cert.pem"),
                key: Path::new("/w/key.pem"),
                workers: 4,
                workdir: dir,
            })
            .unwrap();
        let args: Vec<_> = launch.args.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            args.join(" "),
            "--http 127.0.0.1:1 --tls 127.0.0.1:2 --root /w/docroot --upstream 127.0.0.1:3 \
             --cert /w/cert.pem --key /w/key.pem --workers 4"
        );
    }
}
