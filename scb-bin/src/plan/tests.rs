//! Configs from source text to `Plan`: what is accepted and how it is converted, and for
//! what is refused, the exact `file:line:col: key: message` that `scb check` prints.

use http::HeaderName;

use super::*;

const LISTEN: &str = "[[listen]]\naddr = \"127.0.0.1:8080\"\n";

/// The error for `source` as `scb check` prints it.
fn error(source: &str) -> String {
    let err = Plan::from_source(source).expect_err("config should be refused");
    err.locate(Path::new("scb.toml"), source).to_string()
}

fn plan(source: &str) -> Plan {
    Plan::from_source(source).unwrap_or_else(|e| panic!("{e:?}"))
}

#[test]
fn the_schema_from_the_issue_is_accepted_as_written() {
    let plan = plan(include_str!("../../config/example.toml"));
    assert_eq!(plan.routes().len(), 4);
    assert_eq!(&*plan.routes()[0].name, "hello");
    assert_eq!(
        *plan.routes()[0].matcher.path(),
        PathMatch::Exact("/respond".into())
    );
    assert_eq!(&*plan.routes()[1].name, "api");
    let Handler::Proxy { proxy, .. } = &plan.routes()[1].handler else {
        panic!("not a proxy: {:?}", plan.routes()[1].handler);
    };
    assert_eq!(proxy.upstreams().count(), 2);
    // The status page lists the proxy routes' upstreams and the cache figures.
    let sources = plan.status_sources();
    let routes: Vec<_> = sources.upstreams.iter().map(|(name, _)| &**name).collect();
    assert_eq!(routes, ["api", "api-catalog", "assets"]);
    assert!(sources.cache);
    // The cached API and the cached static origin.
    for (at, prefix) in [(2, "/api/catalog/"), (3, "/assets/")] {
        assert_eq!(
            *plan.routes()[at].matcher.path(),
            PathMatch::Prefix(prefix.into())
        );
        assert!(matches!(
            &plan.routes()[at].handler,
            Handler::Proxy { cache: Some(_), .. }
        ));
    }
    assert_eq!(
        plan.metrics,
        Some(MetricsPlan {
            listen: "127.0.0.1:9090".parse().unwrap(),
            path: "/metrics".into(),
            probes: None,
            status: true,
        })
    );
    assert_eq!(plan.server.settings().request_id_header, "x-request-id");
    assert_eq!(plan.server.settings().grace_period, Duration::from_secs(10));
    assert!(plan.access_log.is_none());
}

#[test]
fn access_log_formats_are_named_or_templates() {
    let format = |value: &str| {
        plan(&format!(
            "{LISTEN}[log]\naccess = {{ path = \"a.log\", format = {value} }}\n"
        ))
        .access_log
        .unwrap()
        .format
    };
    assert_eq!(format("\"combined\""), Some(AccessLogFormat::Combined));
    assert_eq!(format("\"json\""), Some(AccessLogFormat::Json));
    // The issue's own example.
    let issue = r#"'{client_ip} - "{method} {path}" {status} {bytes} {duration_ms} {trace_id} "{header.user-agent}"'"#;
    let Some(AccessLogFormat::Template(template)) = format(issue) else {
        panic!("not a template");
    };
    assert!(!template.is_json());
    assert_eq!(template.as_str(), &issue[1..issue.len() - 1]);
    let json = r#"'{{"status":{status},"ua":"{header.user-agent}","tls":{tls_version}}}'"#;
    let Some(AccessLogFormat::Template(template)) = format(json) else {
        panic!("not a template");
    };
    assert!(template.is_json());
    // `check --print` says which escaping a template gets.
    let shown = plan(&format!(
        "{LISTEN}[log]\naccess = {{ path = \"a.log\", format = {json} }}\n"
    ))
    .describe();
    assert!(
        shown.contains(&format!(
            "access log: a.log (template, json escaping: {})",
            &json[1..json.len() - 1]
        )),
        "{shown}"
    );
}

#[test]
fn absent_limits_are_scb_core_defaults() {
    let plan = plan(LISTEN);
    assert_eq!(plan.server.settings().limits, Limits::default());
    assert_eq!(plan.metrics, None);
    // Absent: scb-core's default.
    assert_eq!(plan.server.settings(), Server::builder().settings());
    assert!(plan.routes().is_empty());
}

#[test]
#[allow(
    clippy::field_reassign_with_default,
    reason = "Limits is non_exhaustive: outside scb-core, assigning fields is the only way"
)]
fn limits_are_converted_with_their_units() {
    let plan = plan(&format!(
        "[limits]\nheader_read_timeout = \"2s 500ms\"\nbody_read_timeout = \"1m\"\n\
         send_timeout = \"5s\"\nkeep_alive_timeout = \"75s\"\nmax_header_bytes = \"8KiB\"\n\
         max_headers = 50\nmax_body_bytes = \"1MiB\"\nmax_connections = 64\n{LISTEN}"
    ));
    let mut want = Limits::default();
    want.header_read_timeout = Duration::from_millis(2500);
    want.body_read_timeout = Duration::from_secs(60);
    want.send_timeout = Duration::from_secs(5);
    want.keep_alive_timeout = Duration::from_secs(75);
    want.max_header_bytes = 8192;
    want.max_headers = 50;
    want.max_body_bytes = 1 << 20;
    want.max_connections = 64;
    assert_eq!(plan.server.settings().limits, want);

    let plan = super::tests::plan(&format!("[limits]\nmax_body_bytes = 0\n{LISTEN}"));
    assert_eq!(plan.server.settings().limits.max_body_bytes, 0);
}

#[test]
fn route_names_are_derived_from_paths() {
    let plan = plan(&format!(
        "{LISTEN}[[route]]\npath = \"/respond\"\nrespond = {{}}\n\
         [[route]]\npath = \"/\"\nrespond = {{}}\n\
         [[route]]\nprefix = \"/api/v1/\"\nrespond = {{}}\n"
    ));
    let names: Vec<_> = plan.routes().iter().map(|r| &*r.name).collect();
    assert_eq!(names, ["respond", "root", "api-v1"]);
    assert_eq!(
        *plan.routes()[2].matcher.path(),
        PathMatch::Prefix("/api/v1/".into())
    );
}

#[test]
fn static_routes_are_built_from_their_table() {
    let root = site_dir("table");
    let source = format!(
        "{LISTEN}[[route]]\nprefix = \"/\"\nstatic = {{ root = {:?}, index = \"\", \
         precompressed = [\"br\", \"gzip\"], symlinks = \"none\", show_hidden = true, \
         cache_control = [{{ glob = \"*.html\", value = \"no-cache\" }}], \
         fallback = \"index.html\", not_found = \"errors/404.html\", \
         list_directories = true }}\n",
        root.display().to_string()
    );
    let plan = plan(&source);
    assert_eq!(&*plan.routes()[0].name, "root");
    assert!(matches!(plan.routes()[0].handler, Handler::Static { .. }));
}

/// A root with the pages a static route may name: `index.html` and `errors/404.html`.
fn site_dir(name: &str) -> std::path::PathBuf {
    let root = std::env::temp_dir().join(format!("scb-plan-{}-{name}", std::process::id()));
    std::fs::create_dir_all(root.join("errors")).unwrap();
    std::fs::write(root.join("index.html"), "index").unwrap();
    std::fs::write(root.join("errors/404.html"), "not here").unwrap();
    root
}

#[test]
fn missing_site_pages_are_config_errors_naming_the_file() {
    let root = site_dir("missing");
    for key in ["fallback", "not_found"] {
        let source = format!(
            "{LISTEN}[[route]]\nprefix = \"/\"\nstatic = {{ root = {:?}, {key} = \"nope.html\" }}\n",
            root.display().to_string()
        );
        let err = Plan::from_source(&source).unwrap_err();
        assert_eq!(err.key, format!("route[0].static.{key}"));
        assert_eq!(
            err.message,
            format!("no such file: {}", root.join("nope.html").display())
        );
    }
    // The pages that exist are taken.
    plan(&format!(
        "{LISTEN}[[route]]\nprefix = \"/\"\nstatic = {{ root = {:?}, fallback = \"index.html\", not_found = \"errors/404.html\" }}\n",
        root.display().to_string()
    ));
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn health_errors_name_their_key() {
    let metrics = "[metrics]\nlisten = \"127.0.0.1:9999\"\n";
    for (source, want) in [
        (
            format!("{LISTEN}[health]\n"),
            "health: the probes are served on the [metrics] listener",
        ),
        (
            format!("{LISTEN}{metrics}[health]\nliveness = \"/x\"\nreadiness = \"/x\"\n"),
            "health: liveness and readiness need paths of their own",
        ),
        (
            format!("{LISTEN}{metrics}[health]\nreadiness = \"/metrics\"\n"),
            "health: the probe paths and the metrics path must differ",
        ),
        (
            format!("{LISTEN}{metrics}[health]\nliveness = \"live\"\n"),
            "health.liveness: must start with '/'",
        ),
        (
            format!("{LISTEN}[[route]]\npath = \"/r\"\nhealth = true\nrespond = {{}}\n"),
            "route[0].health: a route has exactly one handler",
        ),
    ] {
        let err = Plan::from_source(&source).unwrap_err();
        let got = format!("{}: {}", err.key, err.message);
        assert!(got.starts_with(want), "got {got}\nwant {want}");
    }
    let plan = plan(&format!(
        "{LISTEN}{metrics}[health]\ndrain_delay = \"2s\"\n[[route]]\npath = \"/r\"\nhealth = true\n"
    ));
    assert_eq!(plan.drain_delay, Duration::from_secs(2));
    assert_eq!(
        plan.metrics.as_ref().unwrap().probes.clone(),
        Some(("/healthz".to_owned(), "/readyz".to_owned()))
    );
    assert!(matches!(plan.routes()[0].handler, Handler::Health(_)));
}

#[test]
fn the_status_page_is_only_on_the_metrics_listener_and_keeps_its_paths() {
    let metrics = "[metrics]\nlisten = \"127.0.0.1:9999\"\n";
    assert_eq!(
        error(&format!("{LISTEN}[status]\nenabled = true\n")),
        "scb.toml:4:11: status.enabled: the status page is served on the metrics listener: \
         add [metrics]"
    );
    assert_eq!(
        error(&format!(
            "{LISTEN}{metrics}path = \"/status\"\n[status]\nenabled = true\n"
        )),
        "scb.toml:7:11: status.enabled: the status page takes /status on the metrics \
         listener: give the metrics path and the probes other paths"
    );
    let taken = error(&format!(
        "{LISTEN}{metrics}[health]\nreadiness = \"/status.json\"\n[status]\nenabled = true\n"
    ));
    assert!(taken.contains("takes /status.json"), "{taken}");
    assert!(error(&format!("{LISTEN}{metrics}[status]\n")).contains("enabled"));
    assert!(
        error(&format!(
            "{LISTEN}{metrics}[status]\nenabled = true\npath = \"/s\"\n"
        ))
        .contains("path")
    );

    // Off, it needs nothing; on, the metrics plan says so.
    assert!(
        plan(&format!("{LISTEN}[status]\nenabled = false\n"))
            .metrics
            .is_none()
    );
    let on = plan(&format!("{LISTEN}{metrics}[status]\nenabled = true\n"));
    assert!(
        on.describe()
            .contains("metrics: 127.0.0.1:9999 /metrics, status page /status and /status.json\n"),
        "{}",
        on.describe()
    );
    assert!(on.metrics.unwrap().status);
    let off = plan(&format!("{LISTEN}{metrics}[status]\nenabled = false\n"));
    assert!(!off.metrics.unwrap().status);
}

#[test]
fn the_status_page_reads_every_tls_listener_s_certificates() {
    let dir = std::env::temp_dir().join(format!("scb-plan-status-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let params = rcgen::CertificateParams::new(vec!["status.test".to_owned()]).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let (c, k) = (dir.join("c.pem"), dir.join("k.pem"));
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    let plan = plan(&format!(
        "{LISTEN}[[listen]]\naddr = \"127.0.0.1:8443\"\ntls = {{ cert = {c:?}, key = {k:?} }}\n",
        c = c.display().to_string(),
        k = k.display().to_string(),
    ));
    let sources = plan.status_sources();
    let certificates: Vec<_> = sources
        .acceptors
        .iter()
        .flat_map(scb_tls::TlsAcceptor::certificates)
        .collect();
    assert_eq!(certificates.len(), 1);
    assert_eq!(certificates[0].names, ["status.test"]);
    assert!(sources.upstreams.is_empty() && !sources.cache);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn static_route_errors_name_their_key() {
    let cases = [
        (
            format!("{LISTEN}[[route]]\nprefix = \"/\"\nstatic = {{ root = \"/no/such/dir\" }}\n"),
            "scb.toml:5:19: route[0].static.root: cannot open the root directory /no/such/dir",
        ),
        (
            format!(
                "{LISTEN}[[route]]\nprefix = \"/\"\nstatic = {{ root = \"/tmp\", symlinks = \"maybe\" }}\n"
            ),
            "scb.toml:5:38: route[0].static.symlinks: must be \"beneath\" or \"none\"",
        ),
        (
            format!(
                "{LISTEN}[[route]]\nprefix = \"/\"\nstatic = {{ root = \"/tmp\", precompressed = [\"lzma\"] }}\n"
            ),
            "scb.toml:5:43: route[0].static.precompressed: unknown precompressed coding",
        ),
        (
            format!(
                "{LISTEN}[[route]]\nprefix = \"/\"\nstatic = {{ root = \"/tmp\", fallback = \"/srv/www/index.html\" }}\n"
            ),
            "scb.toml:5:38: route[0].static.fallback: must be a path relative to root, not an absolute path",
        ),
        (
            format!(
                "{LISTEN}[[route]]\nprefix = \"/\"\nstatic = {{ root = \"/tmp\", not_found = \"../404.html\" }}\n"
            ),
            "scb.toml:5:39: route[0].static.not_found: must not contain `..`: the file is beneath root",
        ),
        (
            format!(
                "{LISTEN}[[route]]\nprefix = \"/\"\nstatic = {{ root = \"/tmp\", listing = true }}\n"
            ),
            "route[0].static.listing: unknown field `listing`",
        ),
        (
            format!(
                "{LISTEN}[[route]]\nprefix = \"/\"\nstatic = {{ root = \"/tmp\", cache_control = [{{ glob = \"*.js\", value = \"no-cache\" }}, {{ glob = \"[z-a]\", value = \"no-cache\" }}] }}\n"
            ),
            "scb.toml:5:83: route[0].static.cache_control[1]: invalid glob `[z-a]`",
        ),
    ];
    for (source, want) in cases {
        let got = error(&source);
        assert!(got.contains(want), "got {got:?}, want {want:?}");
    }
}

#[test]
fn listener_tls_errors_name_their_key() {
    let route = "[[route]]\npath = \"/\"\nrespond = {}\n";
    let cases = [
        (
            "[[listen]]\naddr = \"127.0.0.1:0\"\ntls = { cert = \"/x.pem\" }\n",
            "listen[0].tls.key: `cert` needs its `key`",
        ),
        (
            "[[listen]]\naddr = \"127.0.0.1:0\"\ntls = {}\n",
            "listen[0].tls: needs `cert` and `key`",
        ),
        (
            "[[listen]]\naddr = \"127.0.0.1:0\"\ntls = { cert = \"/no/such.pem\", key = \"/no/such.key\" }\n",
            "/no/such.pem",
        ),
        (
            "[[listen]]\naddr = \"127.0.0.1:0\"\nredirect_https = \"yes\"\n",
            "listen[0].redirect_https",
        ),
        (
            "[[listen]]\naddr = \"127.0.0.1:0\"\ntls = { cert = \"a\", key = \"b\", ocsp = true }\n",
            "unknown field `ocsp`",
        ),
    ];
    for (listen, want) in cases {
        let got = error(&format!("{listen}{route}"));
        assert!(got.contains(want), "got {got:?}, want {want:?}");
    }
}

#[test]
fn plain_listeners_may_redirect_to_https() {
    let plan = plan(
        "[[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[listen]]\naddr = \"127.0.0.1:0\"\nredirect_https = true\n\
         [[route]]\npath = \"/\"\nrespond = {}\n",
    );
    assert_eq!(plan.https.redirect, [1]);
    assert_eq!(plan.https.https_listener, None);
}

#[test]
fn the_servers_trusted_proxies_are_the_proxys_and_its_own_key_may_only_narrow_them() {
    let source = |proxy_key: &str| {
        format!(
            "[server]\ntrusted_proxies = [\"10.0.0.0/8\"]\n{LISTEN}\
             [[route]]\nprefix = \"/\"\nproxy = {{ upstreams = [\"a:1\"]{proxy_key} }}\n"
        )
    };
    let trusted = |plan: &Plan| {
        let Handler::Proxy { proxy, .. } = &plan.routes()[0].handler else {
            panic!("not a proxy");
        };
        proxy.settings().trusted_proxies.to_string()
    };
    // Inherited: X-Forwarded-For from 10.0.0.0/8 is kept upstream, as the log believes it.
    let inherited = plan(&source(""));
    assert_eq!(trusted(&inherited), "10.0.0.0/8");
    assert!(
        inherited
            .describe()
            .contains("forwards X-Forwarded-* from 10.0.0.0/8"),
        "{}",
        inherited.describe()
    );
    // Narrowed.
    let narrowed = plan(&source(", trusted_proxies = [\"10.1.0.0/16\"]"));
    assert_eq!(trusted(&narrowed), "10.1.0.0/16");
    // Widened: refused, with the server's list in the message.
    assert_eq!(
        error(&source(
            ", trusted_proxies = [\"10.1.0.0/16\", \"192.168.0.1\"]"
        )),
        "scb.toml:7:66: route[0].proxy.trusted_proxies[1]: \"192.168.0.1\" is not within \
         [server] trusted_proxies (10.0.0.0/8): that setting decides who the client is \
         everywhere; put it there, and here only what narrows it"
    );
}

#[test]
fn proxy_routes_are_built_from_their_table() {
    let plan = plan(&format!(
        "[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"::1\", \"192.168.0.0/16\"]\n\
         {LISTEN}[[route]]\nprefix = \"/api/\"\n\
         proxy = {{ upstreams = [\"127.0.0.1:8081\", {{ addr = \"[::1]:8082\", weight = 2 }}], \
         balance = \"hash\", hash_key = \"header:X-User\", strip_prefix = true, \
         preserve_host = false, trusted_proxies = [\"10.0.0.0/8\", \"::1\"], \
         connect_timeout = \"2s\", response_timeout = \"30s\", idle_timeout = \"1m\", \
         try_timeout = \"10s\", max_body = \"1MiB\", max_tries = 2, max_idle = 0, \
         pool_idle_timeout = \"15s\", max_response_head = \"32KiB\", \
         passive = {{ max_fails = 0, fail_timeout = \"5s\", count_invalid_responses = true }}, \
         health = {{ path = \"/healthz?full=1\", interval = \"1s\", timeout = \"500ms\", \
         passes = 3, fails = 1 }} }}\n\
         [[route]]\npath = \"/one\"\nproxy = {{ upstreams = [\"app.internal:80\"] }}\n"
    ));
    let Handler::Proxy { proxy, .. } = &plan.routes()[0].handler else {
        panic!("not a proxy: {:?}", plan.routes()[0].handler);
    };
    let settings = proxy.settings();
    let upstreams: Vec<_> = proxy.upstreams().map(ToString::to_string).collect();
    assert_eq!(upstreams.len(), 2);
    assert_eq!(upstreams[1], "[::1]:8082");
    assert_eq!(
        *proxy.balance(),
        scb_proxy::Balance::Hash(scb_proxy::HashKey::Header(HeaderName::from_static(
            "x-user"
        )))
    );
    assert_eq!(settings.strip_prefix.as_deref(), Some("/api/"));
    assert!(!settings.preserve_host);
    assert_eq!(settings.connect_timeout, Duration::from_secs(2));
    assert_eq!(settings.response_timeout, Duration::from_secs(30));
    assert_eq!(settings.idle_timeout, Duration::from_secs(60));
    assert_eq!(settings.try_timeout, Duration::from_secs(10));
    assert_eq!(settings.max_body, Some(1 << 20));
    assert_eq!(settings.max_tries, 2);
    assert_eq!(settings.max_idle, 0);
    assert_eq!(settings.pool_idle_timeout, Duration::from_secs(15));
    assert_eq!(settings.max_response_head, 32 << 10);
    assert_eq!(
        settings.passive,
        scb_proxy::PassiveHealth::new()
            .max_fails(0)
            .fail_timeout(Duration::from_secs(5))
            .count_invalid_responses(true)
    );
    assert_eq!(
        proxy.active_health(),
        Some(
            &scb_proxy::ActiveHealth::new("/healthz?full=1")
                .interval(Duration::from_secs(1))
                .timeout(Duration::from_millis(500))
                .passes(3)
                .fails(1)
        )
    );

    let Handler::Proxy { proxy, .. } = &plan.routes()[1].handler else {
        panic!("not a proxy: {:?}", plan.routes()[1].handler);
    };
    assert_eq!(*proxy.balance(), scb_proxy::Balance::RoundRobin);
    assert_eq!(proxy.settings().strip_prefix, None);
    assert_eq!(proxy.active_health(), None);
}

#[test]
fn hash_balance_hashes_the_client_ip_by_default() {
    let plan = plan(&format!(
        "{LISTEN}[[route]]\nprefix = \"/\"\n\
         proxy = {{ upstreams = [\"127.0.0.1:1\"], balance = \"hash\" }}\n"
    ));
    let Handler::Proxy { proxy, .. } = &plan.routes()[0].handler else {
        panic!("not a proxy");
    };
    assert_eq!(
        *proxy.balance(),
        scb_proxy::Balance::Hash(scb_proxy::HashKey::ClientIp)
    );
}

#[test]
fn proxy_route_errors_name_their_key() {
    let route = |proxy: &str| format!("{LISTEN}[[route]]\nprefix = \"/api/\"\nproxy = {proxy}\n");
    let cases = [
        (
            route("{ upstreams = [\"nohost\"] }"),
            "scb.toml:5:24: route[0].proxy.upstreams[0]: upstream \"nohost\" is not host:port, http[s]://host[:port] or unix:/path",
        ),
        (
            // An https:// URL is an upstream; one with a path is not.
            route("{ upstreams = [\"127.0.0.1:1\", { addr = \"https://a:1/x\" }] }"),
            "scb.toml:5:48: route[0].proxy.upstreams[1].addr: upstream \"https://a:1/x\" has a path",
        ),
        (
            route("{ upstreams = [\"https://a:1\"], client_cert = \"/c.pem\" }"),
            "route[0].proxy.client_key: `client_cert` needs its `client_key`",
        ),
        (
            route("{ upstreams = [{ addr = \"a:1\", weight = 0 }] }"),
            "scb.toml:5:49: route[0].proxy.upstreams[0].weight: must be at least 1",
        ),
        (
            route("{ upstreams = [{ addr = \"a:1\", wieght = 2 }] }"),
            "scb.toml:5:40: route[0].proxy.upstreams[0].wieght: unknown field `wieght`",
        ),
        (
            route("{ upstreams = [8081] }"),
            "scb.toml:5:24: route[0].proxy.upstreams[0]: invalid type: integer `8081`, expected \"host:port\"",
        ),
        (
            route("{ upstreams = [] }"),
            "scb.toml:5:23: route[0].proxy.upstreams: at least one upstream is required",
        ),
        (
            route("{ balance = \"least_conn\" }"),
            "route[0].proxy: missing field `upstreams`",
        ),
        (
            route("{ upstreams = [\"a:1\"], balance = \"fastest\" }"),
            "scb.toml:5:42: route[0].proxy.balance: must be \"round_robin\", \"least_conn\"",
        ),
        (
            route("{ upstreams = [\"a:1\"], hash_key = \"client_ip\" }"),
            "scb.toml:5:43: route[0].proxy.hash_key: is only used with balance = \"hash\"",
        ),
        (
            route("{ upstreams = [\"a:1\"], balance = \"hash\", hash_key = \"cookie\" }"),
            "scb.toml:5:61: route[0].proxy.hash_key: must be \"client_ip\" or \"header:NAME\"",
        ),
        (
            route("{ upstreams = [\"a:1\"], balance = \"hash\", hash_key = \"header:a b\" }"),
            "scb.toml:5:61: route[0].proxy.hash_key: invalid header name \"a b\"",
        ),
        (
            route("{ upstreams = [\"a:1\"], trusted_proxies = [\"10.0.0.0/8\", \"lan\"] }"),
            "scb.toml:5:65: route[0].proxy.trusted_proxies[1]: \"lan\" is neither a network",
        ),
        (
            route("{ upstreams = [\"a:1\"], connect_timeout = \"0s\" }"),
            "scb.toml:5:50: route[0].proxy.connect_timeout: must be greater than zero",
        ),
        (
            route("{ upstreams = [\"a:1\"], response_timeout = \"soon\" }"),
            "scb.toml:5:51: route[0].proxy.response_timeout: invalid duration \"soon\"",
        ),
        (
            route("{ upstreams = [\"a:1\"], max_tries = 9 }"),
            "scb.toml:5:44: route[0].proxy.max_tries: must be from 1 to 8",
        ),
        (
            route("{ upstreams = [\"a:1\"], max_tries = 0 }"),
            "scb.toml:5:44: route[0].proxy.max_tries: must be from 1 to 8",
        ),
        (
            route("{ upstreams = [\"a:1\"], max_body = \"16 parsecs\" }"),
            "scb.toml:5:43: route[0].proxy.max_body: invalid size \"16 parsecs\"",
        ),
        (
            route("{ upstreams = [\"a:1\"], max_response_head = 0 }"),
            "scb.toml:5:52: route[0].proxy.max_response_head: must be at least 1",
        ),
        (
            route("{ upstreams = [\"a:1\"], passive = { fail_timeout = \"0s\" } }"),
            "scb.toml:5:59: route[0].proxy.passive.fail_timeout: must be greater than zero",
        ),
        (
            route("{ upstreams = [\"a:1\"], health = { path = \"healthz\" } }"),
            "scb.toml:5:50: route[0].proxy.health.path: must start with '/'",
        ),
        (
            route("{ upstreams = [\"a:1\"], health = { path = \"/a b\" } }"),
            "scb.toml:5:50: route[0].proxy.health.path: must be a URI path and query",
        ),
        (
            route("{ upstreams = [\"a:1\"], health = { interval = \"5s\" } }"),
            "route[0].proxy.health: missing field `path`",
        ),
        (
            route("{ upstreams = [\"a:1\"], health = { path = \"/h\", fails = 0 } }"),
            "scb.toml:5:64: route[0].proxy.health.fails: must be at least 1",
        ),
        (
            route("{ upstreams = [\"a:1\"], retries = 2 }"),
            "scb.toml:5:32: route[0].proxy.retries: unknown field `retries`",
        ),
        (
            format!(
                "{LISTEN}[[route]]\npath = \"/a\"\n\
                 proxy = {{ upstreams = [\"a:1\"], strip_prefix = true }}\n"
            ),
            "scb.toml:5:47: route[0].proxy.strip_prefix: only a `prefix` route has a prefix",
        ),
        (
            format!(
                "{LISTEN}[[route]]\nprefix = \"/a/\"\nrespond = {{}}\n\
                 proxy = {{ upstreams = [\"a:1\"] }}\n"
            ),
            "scb.toml:6:9: route[0].proxy: a route has exactly one handler: `respond` or `proxy`",
        ),
    ];
    let mismatches: Vec<_> = cases
        .iter()
        .map(|(source, want)| (error(source), want, source))
        .filter(|(got, want, _)| !got.contains(*want))
        .map(|(got, want, source)| format!(" got: {got}\nwant: {want}…\n  in:\n{source}"))
        .collect();
    assert!(mismatches.is_empty(), "\n{}", mismatches.join("\n"));
}

#[test]
fn errors_name_file_line_column_and_key() {
    let cases = [
        // Deserializer errors: syntax, unknown keys, types, units.
        (
            "[server]\nworkers = 1\ngrace = \"1s\"\n".to_owned(),
            "scb.toml:3:1: server.grace: unknown field `grace`",
        ),
        (
            format!("{LISTEN}[limits]\nsend_timeout = \"30 parsecs\"\n"),
            "scb.toml:4:16: limits.send_timeout: invalid duration \"30 parsecs\"",
        ),
        (
            format!("[server]\nworkers = \"two\"\n{LISTEN}"),
            "scb.toml:2:11: server.workers: invalid type: string \"two\", expected usize",
        ),
        (
            format!("{LISTEN}[limits]\nmax_body_bytes = \"16 parsecs\"\n"),
            "scb.toml:4:18: limits.max_body_bytes: invalid size \"16 parsecs\"",
        ),
        (
            format!("{LISTEN}[limits]\nmax_body_bytes = -1\n"),
            "scb.toml:4:18: limits.max_body_bytes: invalid size -1",
        ),
        (
            "[[listen]]\naddr = \"localhost\"\n".to_owned(),
            "scb.toml:2:8: listen[0].addr: invalid address \"localhost\": expected IP:PORT, [IPv6]:PORT, HOST:PORT or :PORT",
        ),
        (
            format!("{LISTEN}[[route]]\npath = \"/a\"\nrespond = {{ status = 200, x = 1 }}\n"),
            "scb.toml:5:27: route[0].respond.x: unknown field `x`",
        ),
        (
            format!("{LISTEN}[log]\naccess = \"yes\"\n"),
            "scb.toml:4:10: log.access: invalid type: string \"yes\", expected true, false or a table { path, format }",
        ),
        (
            format!("{LISTEN}[log]\naccess = {{ paht = \"a.log\" }}\n"),
            "scb.toml:4:12: log.access.paht: unknown field `paht`, expected `path` or `format`",
        ),
        (
            format!("{LISTEN}[log]\naccess = {{ format = \"xml\" }}\n"),
            "scb.toml:4:21: log.access.format: unknown format \"xml\": expected `combined`, `json` or a template with {variables}",
        ),
        (
            format!("{LISTEN}[log]\naccess = {{ format = '{{client_ip}} \"{{stauts}}\"' }}\n"),
            "scb.toml:4:21: log.access.format: unknown variable `{stauts}` (known: client_ip, time, ",
        ),
        (
            format!("{LISTEN}[log]\naccess = {{ format = '{{header.user agent}}' }}\n"),
            "scb.toml:4:21: log.access.format: `{header.user agent}`: not a header name",
        ),
        (
            format!("{LISTEN}[log]\naccess = {{ format = '{{status}} {{bytes' }}\n"),
            "scb.toml:4:21: log.access.format: a `{` without its `}` (`{{` is a literal brace)",
        ),
        (
            format!("{LISTEN}[log]\naccess = {{ format = \"{{status}}\\n{{bytes}}\" }}\n"),
            "scb.toml:4:21: log.access.format: the text has a control character (only tab may be one)",
        ),
        (
            format!("[server]\ntrusted_proxies = [\"10.0.0.0/8\", \"nope\"]\n{LISTEN}"),
            "scb.toml:2:34: server.trusted_proxies[1]: \"nope\" is neither a network",
        ),
        ("a = = 1\n".to_owned(), "scb.toml:1:5: "),
        // Semantic errors.
        (
            "[server]\nworkers = 1\n".to_owned(),
            "scb.toml:1:1: listen: at least one [[listen]]",
        ),
        (
            format!("[server]\nworkers = 0\n{LISTEN}"),
            "scb.toml:2:11: server.workers: must be at least 1",
        ),
        (
            format!("{LISTEN}[limits]\nheader_read_timeout = \"0s\"\n"),
            "scb.toml:4:23: limits.header_read_timeout: must be greater than zero",
        ),
        (
            format!("{LISTEN}[limits]\nmax_headers = 0\n"),
            "scb.toml:4:15: limits.max_headers: must be at least 1",
        ),
        (
            format!("{LISTEN}[request_id]\nheader = \"x request id\"\n"),
            "scb.toml:4:10: request_id.header: invalid header name \"x request id\"",
        ),
        (
            format!("{LISTEN}[[listen]]\naddr = \"0.0.0.0:8080\"\n"),
            "scb.toml:4:8: listen[1].addr: 0.0.0.0:8080 clashes with 127.0.0.1:8080",
        ),
        (
            format!("{LISTEN}[metrics]\nlisten = \"127.0.0.1:8080\"\n"),
            "scb.toml:4:10: metrics.listen: 127.0.0.1:8080 clashes with the [[listen]] address",
        ),
        (
            format!("{LISTEN}[metrics]\nlisten = \"127.0.0.1:9090\"\npath = \"metrics\"\n"),
            "scb.toml:5:8: metrics.path: must start with '/'",
        ),
        (
            format!("{LISTEN}[[route]]\npath = \"/a\"\nprefix = \"/b\"\nrespond = {{}}\n"),
            "scb.toml:5:10: route[0].prefix: a route has one of `path`, `prefix` and `path_regex`: `path` is set",
        ),
        (
            format!("{LISTEN}\n[[route]]\nname = \"x\"\nrespond = {{}}\n"),
            "scb.toml:4:1: route[0]: a route needs `path` (exact match), `prefix` or `path_regex`",
        ),
        (
            format!("{LISTEN}[[route]]\npath = \"/a\"\n"),
            "scb.toml:3:1: route[0]: a route needs a handler",
        ),
        (
            format!("{LISTEN}[[route]]\nprefix = \"/a b\"\nrespond = {{}}\n"),
            "scb.toml:4:10: route[0].prefix: must be a URI path",
        ),
        (
            format!("{LISTEN}[[route]]\npath = \"/a?b\"\nrespond = {{}}\n"),
            "scb.toml:4:8: route[0].path: must be a URI path",
        ),
        (
            format!("{LISTEN}[[route]]\npath = \"/a\"\nrespond = {{ status = 1000 }}\n"),
            "scb.toml:5:22: route[0].respond.status: must be a status code from 200 to 599",
        ),
        (
            format!("{LISTEN}[[route]]\npath = \"/a\"\nrespond = {{ status = 999 }}\n"),
            "scb.toml:5:22: route[0].respond.status: must be a status code from 200 to 599",
        ),
        (
            format!("{LISTEN}[[route]]\npath = \"/a\"\nrespond = {{ status = 101 }}\n"),
            "scb.toml:5:22: route[0].respond.status: must not be 1xx",
        ),
        (
            format!(
                "{LISTEN}[[route]]\npath = \"/a\"\nrespond = {{ status = 204, body = \"x\" }}\n"
            ),
            "scb.toml:5:22: route[0].respond.status: a 204 No Content response cannot have",
        ),
        (
            format!(
                "{LISTEN}[[route]]\npath = \"/a\"\n\
                 respond = {{ content_type = \"text/plain\\n\" }}\n"
            ),
            "scb.toml:5:28: route[0].respond.content_type: invalid header value",
        ),
        (
            format!(
                "{LISTEN}[[route]]\npath = \"/a\"\n\
                 respond = {{ headers = {{ \"a b\" = \"x\" }} }}\n"
            ),
            "scb.toml:5:25: route[0].respond.headers.a b: invalid header name",
        ),
        (
            format!(
                "{LISTEN}[[route]]\npath = \"/a\"\n\
                 respond = {{ headers = {{ content-length = \"5\" }} }}\n"
            ),
            "scb.toml:5:25: route[0].respond.headers.content-length: is set by the server",
        ),
        (
            format!(
                "{LISTEN}[[route]]\npath = \"/a\"\nrespond = {{}}\n\
                 [[route]]\npath = \"/a\"\nname = \"other\"\nrespond = {{}}\n"
            ),
            "scb.toml:7:8: route[1].path: path \"/a\" is already routed by route[0]",
        ),
        (
            format!("{LISTEN}[[route]]\npath = \"/unmatched\"\nrespond = {{}}\n"),
            "scb.toml:4:8: route[0].name: \"unmatched\" is the name of requests no route",
        ),
        (
            format!("{LISTEN}[[route]]\nname = \"server\"\npath = \"/s\"\nrespond = {{}}\n"),
            "scb.toml:4:8: route[0].name: \"server\" is the name of the server's own answers",
        ),
        (
            format!(
                "{LISTEN}[[route]]\nname = \"x\"\npath = \"/a\"\nrespond = {{}}\n\
                 [[route]]\nname = \"x\"\npath = \"/b\"\nrespond = {{}}\n"
            ),
            "scb.toml:8:8: route[1].name: \"x\" is already the name of route[0]",
        ),
        (
            format!(
                "{LISTEN}[[route]]\npath = \"/a\"\nrespond = {{}}\n\
                 [[route]]\nprefix = \"/a/\"\nrespond = {{}}\n"
            ),
            "scb.toml:6:1: route[1].name: the name \"a\" derived from the prefix is already",
        ),
    ];
    let mismatches: Vec<_> = cases
        .iter()
        .map(|(source, want)| (error(source), want, source))
        .filter(|(got, want, _)| !got.starts_with(*want))
        .map(|(got, want, source)| format!(" got: {got}\nwant: {want}…\n  in:\n{source}"))
        .collect();
    assert!(mismatches.is_empty(), "\n{}", mismatches.join("\n"));
}

#[test]
fn a_port_zero_never_clashes() {
    let plan = plan(
        "[[listen]]\naddr = \"127.0.0.1:0\"\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
         [metrics]\nlisten = \"127.0.0.1:0\"\n",
    );
    assert!(plan.metrics.is_some());
}

const SITES: &str = "[[listen]]\naddr = \"127.0.0.1:8080\"\n\
    [[site]]\nhosts = [\"example.com\", \"*.example.com\"]\nsecurity_headers = true\n\
    headers = { response = { set = { \"x-frame-options\" = \"DENY\" }, remove = [\"server\"] } }\n\
    [[site.route]]\npath = \"/old\"\nredirect = { to = \"https://example.com/new{query}\", status = 301 }\n\
    [[site.route]]\nprefix = \"/admin/\"\nallow = [\"10.0.0.0/8\", \"127.0.0.1\"]\nrespond = { body = \"admin\" }\n\
    [[site.route]]\nprefix = \"/\"\nrespond = { body = \"example\" }\n\
    [[site]]\nhosts = [\"example.org\"]\n\
    [[site.route]]\nprefix = \"/\"\nrespond = { body = \"org\" }\n";

#[test]
fn sites_keep_their_hosts_routes_and_rules_in_order() {
    let sites_plan = plan(SITES);
    assert_eq!(
        sites_plan.sites.len(),
        2,
        "no default site without top-level routes"
    );
    assert_eq!(sites_plan.sites[0].hosts, ["example.com", "*.example.com"]);
    let names: Vec<&str> = sites_plan.sites[0]
        .routes
        .iter()
        .map(|r| &*r.name)
        .collect();
    // Derived names start with the site's first host: unique across sites.
    assert_eq!(
        names,
        ["example.com/old", "example.com/admin", "example.com"]
    );
    assert!(matches!(
        sites_plan.sites[0].routes[0].handler,
        Handler::Redirect(_)
    ));
    assert_eq!(&*sites_plan.sites[1].routes[0].name, "example.org");
    // Top-level routes beside named sites make the default site, last.
    let with_default = plan(&format!(
        "{SITES}[[route]]\nprefix = \"/\"\nrespond = {{}}\n"
    ));
    assert_eq!(with_default.sites.len(), 3);
    assert!(with_default.sites[2].hosts.is_empty());
    assert_eq!(&*with_default.routes()[0].name, "root");
}

#[test]
fn site_errors_name_their_key() {
    let cases = [
        (
            format!("{SITES}[[site]]\nhosts = [\"EXAMPLE.org\"]\n"),
            "site[2].hosts[0]: \"example.org\" names two sites",
        ),
        (
            format!("{SITES}[[site]]\nhosts = [\"a b\"]\n"),
            "site[2].hosts[0]: \"a b\" is not a host name",
        ),
        (
            format!(
                "{LISTEN}[[route]]\npath = \"/\"\nrespond = {{}}\n[[site]]\n[[site.route]]\npath = \"/x\"\nrespond = {{}}\n"
            ),
            "site[0]: a [[site]] without `hosts` is the default site, and the top-level [[route]]s are too",
        ),
        (
            format!(
                "{LISTEN}[[route]]\nprefix = \"/\"\nredirect = {{ to = \"https://{{host}}/\" }}\n"
            ),
            "route[0].redirect.to: {host} is only for routes of a [[site]] with `hosts`",
        ),
        (
            format!(
                "{LISTEN}[[route]]\nprefix = \"/\"\nredirect = {{ to = \"/x\", status = 200 }}\n"
            ),
            "route[0].redirect.status: 200 OK is not a redirect status",
        ),
        (
            format!(
                "{LISTEN}[[route]]\nprefix = \"/\"\nallow = [\"10.0.0.0/8\", \"ten\"]\nrespond = {{}}\n"
            ),
            "route[0].allow[1]: \"ten\" is neither a network",
        ),
        (
            format!(
                "{LISTEN}[[route]]\nprefix = \"/\"\nrespond = {{}}\nheaders = {{ response = {{ set = {{ \"x-a\" = \"{{cookie}}\" }} }} }}\n"
            ),
            "route[0].headers.response.set.x-a: \"{cookie}\" is not a field value",
        ),
        (
            format!(
                "{SITES}[[site]]\nhosts = [\"c.test\"]\n[[site.route]]\nname = \"example.org\"\npath = \"/\"\nrespond = {{}}\n"
            ),
            "site[2].route[0].name: \"example.org\" is already the name of site[1].route[0]",
        ),
    ];
    for (source, want) in cases {
        let got = error(&source);
        assert!(
            got.contains(want),
            "\n got: {got}\nwant: {want}…\n  in:\n{source}"
        );
    }
}

#[test]
fn access_and_rate_settings_are_checked_at_load_with_their_key() {
    let dir = std::env::temp_dir().join(format!("scb-plan-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let weak = dir.join("weak.htpasswd");
    std::fs::write(&weak, "# ok\nalice:{SHA}qs67vlse11GdWHE+bbh7CYDxCOs=\n").unwrap();
    let good = dir.join("good.htpasswd");
    std::fs::write(
        &good,
        "alice:$2y$05$nXMy9CsiUcK80SKxTzf1lOpjMzh/YWobvCsix2IcmKiJrS.GTdaR2\n",
    )
    .unwrap();
    let route = |keys: &str| format!("{LISTEN}[[route]]\nprefix = \"/\"\nrespond = {{}}\n{keys}\n");
    let cases = [
        (
            route("rate_limit = { rate = \"10/d\" }"),
            "route[0].rate_limit.rate: a rate is `N/s`, `N/m` or `N/h`".to_owned(),
        ),
        (
            route("rate_limit = { rate = \"10/s\", key = \"cookie\" }"),
            "route[0].rate_limit.key: expected `client_ip` or `header:NAME`".to_owned(),
        ),
        (
            route("rate_limit = { rate = \"10/s\", key = \"header:a b\" }"),
            "route[0].rate_limit.key: `a b` is not a header name".to_owned(),
        ),
        (
            route("rate_limit = { rate = \"10/s\", burst = 0 }"),
            "route[0].rate_limit.burst: must be at least 1".to_owned(),
        ),
        (
            route("rate_limit = { rate = \"10/s\", max_keys = 0 }"),
            "route[0].rate_limit.max_keys: must be at least 1".to_owned(),
        ),
        (
            route("basic_auth = { users = \"/nonexistent/users\" }"),
            "route[0].basic_auth.users: cannot read /nonexistent/users".to_owned(),
        ),
        (
            route(&format!(
                "basic_auth = {{ users = {:?} }}",
                weak.display().to_string()
            )),
            format!(
                "route[0].basic_auth.users: {}: line 2: only bcrypt (`htpasswd -B`) and argon2",
                weak.display()
            ),
        ),
        (
            route(&format!(
                "basic_auth = {{ users = {:?}, realm = \"a\\\"b\" }}",
                good.display().to_string()
            )),
            "route[0].basic_auth.realm: a realm is visible ASCII".to_owned(),
        ),
    ];
    for (source, want) in cases {
        let got = error(&source);
        assert!(
            got.contains(&want),
            "\n got: {got}\nwant: {want}…\n  in:\n{source}"
        );
    }
    let plan = plan(&route(&format!(
        "basic_auth = {{ users = {:?} }}\nrate_limit = {{ rate = \"5/m\", key = \"header:x-api-key\", burst = 2 }}\ncompress = true",
        good.display().to_string()
    )));
    let only = &plan.routes()[0];
    assert!(
        only.guards.basic_auth.is_some()
            && only.guards.rate_limit.is_some()
            && only.guards.compress.is_some()
    );
    // Compression in a static route's handler, wherever it is said.
    let plan = plan_static(&dir, "compress = true");
    assert!(matches!(
        &plan.routes()[0].handler,
        Handler::Static {
            compress: Some(_),
            ..
        }
    ));
    assert!(plan.routes()[0].guards.compress.is_none());
    let plan = plan_static(&dir, "");
    assert!(matches!(
        &plan.routes()[0].handler,
        Handler::Static { compress: None, .. }
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn plan_static(root: &Path, keys: &str) -> Plan {
    plan(&format!(
        "{LISTEN}[[route]]\nprefix = \"/\"\nstatic = {{ root = {:?} }}\n{keys}\n",
        root.display().to_string()
    ))
}

#[test]
fn compress_takes_a_bool_or_a_table_in_one_place_and_names_bad_keys() {
    let respond = |keys: &str| {
        format!("{LISTEN}[[route]]\npath = \"/\"\nrespond = {{ body = \"x\"{keys} }}\n")
    };
    let route = |compress: &str| {
        format!(
            "{LISTEN}[[route]]\npath = \"/\"\nrespond = {{ body = \"x\" }}\ncompress = {compress}\n"
        )
    };
    assert!(plan(&route("true")).routes()[0].guards.compress.is_some());
    assert!(plan(&route("false")).routes()[0].guards.compress.is_none());
    assert!(
        plan(&route(
            "{ min_length = \"1KiB\", level = \"best\", types = [\"text/*\", \"application/json\"] }"
        ))
        .routes()[0]
            .guards
            .compress
            .is_some()
    );
    assert!(
        plan(&route("{ level = 4 }")).routes()[0]
            .guards
            .compress
            .is_some()
    );
    assert!(
        plan(&respond(", compress = { min_length = 0 }")).routes()[0]
            .guards
            .compress
            .is_some()
    );
    for (source, want) in [
        (
            route("{ level = \"max\" }"),
            "scb.toml:6:22: route[0].compress.level: must be \"fastest\", \"default\", \"best\" or a number",
        ),
        (
            route("{ level = 40 }"),
            "scb.toml:6:22: route[0].compress.level: must be from 0 to 22",
        ),
        (
            route("{ types = [\"text/html\", \"html\"] }"),
            "scb.toml:6:36: route[0].compress.types[1]: \"html\" is not a media type",
        ),
        (
            route("{ min = 1 }"),
            "scb.toml:6:14: route[0].compress.min: unknown field `min`, expected one of `min_length`, `level`, `types`",
        ),
        (
            respond(", compress = true }\ncompress = { level = 1 ").replace(" }\n\n", "\n"),
            "scb.toml:5:36: route[0].respond.compress: compression is already set by `compress`: set it in one place",
        ),
    ] {
        let got = error(&source);
        assert!(
            got.contains(want),
            "\n got: {got}\nwant: {want}\n  in:\n{source}"
        );
    }
}

#[test]
fn print_shows_no_unmatched_row_for_a_site_whose_prefix_is_the_root() {
    let catch_all = plan(&format!(
        "{LISTEN}[[route]]\npath = \"/health\"\nrespond = {{}}\n\
         [[route]]\nprefix = \"/\"\nrespond = {{ status = 200 }}\n"
    ));
    let shown = catch_all.describe();
    assert!(!shown.contains("(anything else)"), "{shown}");
    let partial = plan(&format!(
        "{LISTEN}[[route]]\nprefix = \"/api/\"\nrespond = {{}}\n"
    ));
    let shown = partial.describe();
    assert!(
        shown.contains("(anything else)          unmatched    404"),
        "{shown}"
    );
}

#[test]
fn a_cache_goes_on_a_proxy_route_and_its_bad_values_are_refused_where_they_are() {
    let route = |cache: &str| {
        format!(
            "{LISTEN}[[route]]\nprefix = \"/\"\nproxy = {{ upstreams = [\"127.0.0.1:9\"] }}\n\
             cache = {cache}\n"
        )
    };
    let cached = plan(&route(
        "{ max_bytes = \"64MiB\", max_object = \"1MiB\", collapse_timeout = \"2s\", stale_if_error = \"1h\" }",
    ));
    assert!(matches!(
        &cached.routes()[0].handler,
        Handler::Proxy { cache: Some(_), .. }
    ));
    assert_eq!(
        error(&route("{ max_bytes = 0 }")),
        "scb.toml:6:23: route[0].cache.max_bytes: must be more than 0 (remove `cache` to cache nothing)"
    );
    assert!(
        error(&route("{ max_bytes = \"1MiB\", max_object = \"2MiB\" }"))
            .contains("route[0].cache.max_object: must be between 1 byte and max_bytes"),
    );
    let on_disk = plan(&route(
        "{ max_bytes = \"1MiB\", path = \"/var/cache/scb\", disk_max_bytes = \"10GiB\" }",
    ));
    assert!(matches!(
        &on_disk.routes()[0].handler,
        Handler::Proxy { cache: Some(_), .. }
    ));
    assert!(
        error(&route(
            "{ max_bytes = \"1MiB\", max_object = \"1MiB\", path = \"/c\", disk_max_bytes = \"1KiB\" }"
        ))
        .contains("route[0].cache.disk_max_bytes: must be more than 0 and at least max_object"),
    );
    assert!(
        error(&route(
            "{ max_bytes = \"1MiB\", disk_max_bytes = \"1GiB\" }"
        ))
        .contains("route[0].cache.disk_max_bytes: bounds the disk tier, and there is none"),
    );
    let shared_dir = error(&format!(
        "{LISTEN}[[route]]\nprefix = \"/a/\"\nproxy = {{ upstreams = [\"127.0.0.1:9\"] }}\n\
         cache = {{ max_bytes = \"1MiB\", path = \"/c\" }}\n\
         [[route]]\nprefix = \"/b/\"\nproxy = {{ upstreams = [\"127.0.0.1:9\"] }}\n\
         cache = {{ max_bytes = \"1MiB\", path = \"/c\" }}\n"
    ));
    assert!(
        shared_dir
            .contains("route[1].cache.path: \"/c\" is already the cache directory of route[0]"),
        "{shared_dir}"
    );
    assert!(error(&route("{ max_bytes = \"1MiB\", size = 1 }")).contains("unknown field `size`"),);
    let keyed = plan(&route("{ max_bytes = \"1MiB\", key = \"{host}{path}\" }"));
    assert!(matches!(
        &keyed.routes()[0].handler,
        Handler::Proxy { cache: Some(_), .. }
    ));
    let bad_key = error(&route("{ max_bytes = \"1MiB\", key = \"{host}{cookie}\" }"));
    assert!(
        bad_key.starts_with("scb.toml:6:")
            && bad_key.contains("route[0].cache.key: unknown placeholder in cache key"),
        "{bad_key}"
    );
    assert!(
        error(&route("{ max_bytes = \"1MiB\", key = \"{host}{query}\" }"))
            .contains("route[0].cache.key: cache key \"{host}{query}\" has no {path}"),
    );
}

#[test]
fn a_fastcgi_route_is_planned_and_its_bad_values_are_refused_where_they_are() {
    let root = std::env::temp_dir().join(format!("scb-plan-fastcgi-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let route = |fastcgi: &str| format!("{LISTEN}[[route]]\nprefix = \"/\"\nfastcgi = {fastcgi}\n");
    let planned = plan(&route(&format!(
        "{{ upstreams = [\"unix:/run/php/php8.2-fpm.sock\", \"127.0.0.1:9000\"], root = {root:?}, \
         index = \"index.php\", extensions = [\".php\", \".phtml\"], max_idle = 2, script_cache = \"0s\" }}"
    )));
    let Handler::FastCgi { fastcgi, .. } = &planned.routes()[0].handler else {
        panic!("not fastcgi: {:?}", planned.routes()[0].handler);
    };
    assert_eq!(fastcgi.upstreams().count(), 2);
    assert!(fastcgi.names_script("/blog/x.phtml/tail"));
    assert!(!fastcgi.names_script("/logo.png"));
    let cases = [
        (
            route("{ upstreams = [\"a:1\"], root = \"srv/app\" }"),
            "scb.toml:5:41: route[0].fastcgi.root: must be an absolute path".to_owned(),
        ),
        (
            route("{ upstreams = [\"a:1\"], root = \"/nonexistent/scb-plan\" }"),
            "scb.toml:5:41: route[0].fastcgi.root: root /nonexistent/scb-plan: No such file"
                .to_owned(),
        ),
        (
            route("{ root = \"/srv\" }"),
            "route[0].fastcgi: missing field `upstreams`".to_owned(),
        ),
        (
            route(&format!(
                "{{ upstreams = [\"https://a:1\"], root = {root:?} }}"
            )),
            "route[0].fastcgi.upstreams: FastCGI upstream https://a:1 is https://".to_owned(),
        ),
        (
            route(&format!(
                "{{ upstreams = [\"a:1\"], root = {root:?}, index = \"a/b.php\" }}"
            )),
            "route[0].fastcgi.index: must be a file name".to_owned(),
        ),
        (
            route(&format!(
                "{{ upstreams = [\"a:1\"], root = {root:?}, extensions = [\"php\"] }}"
            )),
            "route[0].fastcgi.extensions: must be a list of extensions with their dot".to_owned(),
        ),
        (
            route(&format!(
                "{{ upstreams = [\"a:1\"], root = {root:?}, max_tries = 0 }}"
            )),
            "route[0].fastcgi.max_tries: must be from 1 to 8".to_owned(),
        ),
        (
            route(&format!(
                "{{ upstreams = [\"a:1\"], root = {root:?}, script = \"x\" }}"
            )),
            "route[0].fastcgi.script: unknown field `script`".to_owned(),
        ),
        (
            format!(
                "{LISTEN}[[route]]\nprefix = \"/\"\nfastcgi = {{ upstreams = [\"a:1\"], root = {root:?} }}\n\
                 proxy = {{ upstreams = [\"a:1\"] }}\n"
            ),
            "route[0]".to_owned(),
        ),
    ];
    for (source, expected) in cases {
        let got = error(&source);
        assert!(
            got.contains(&expected),
            "{source}\n got: {got}\nwant: {expected}"
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn match_conditions_and_path_regex_are_planned_and_their_bad_values_refused_where_they_are() {
    let source = format!(
        "{LISTEN}\
         [[route]]\nprefix = \"/api/\"\nrespond = {{ body = \"any\" }}\n\
         [[route]]\nname = \"json\"\nprefix = \"/api/\"\n\
         match = {{ methods = [\"POST\", \"PUT\"], headers = {{ \"content-type\" = \"application/json*\" }}, \
         query = {{ \"v\" = \"2\" }}, remote = [\"10.0.0.0/8\"] }}\nrespond = {{ body = \"json\" }}\n\
         [[route]]\npath_regex = \"^/users/(?<id>\\\\d+)$\"\nrewrite = {{ to = \"/u/{{id}}\" }}\n\
         respond = {{ body = \"user\" }}\n"
    );
    let planned = plan(&source);
    let routes = planned.routes();
    assert!(!routes[0].matcher.is_conditional());
    assert!(routes[1].matcher.is_conditional());
    assert_eq!(
        routes[1].matcher.to_string(),
        "methods POST, PUT; header content-type = \"application/json*\"; query v = \"2\"; \
         remote 10.0.0.0/8"
    );
    assert_eq!(
        *routes[2].matcher.path(),
        PathMatch::Regex(r"^/users/(?<id>\d+)$".into())
    );
    assert_eq!(&*routes[2].name, "users");
    let printed = planned.describe();
    assert!(printed.contains("~ ^/users/(?<id>\\d+)$"), "{printed}");
    // The conditional route is listed before the one of its prefix that takes the rest.
    let json = printed.find("json ").unwrap();
    let any = printed.find("api ").unwrap();
    assert!(json < any, "{printed}");
    assert!(printed.contains(" when methods POST, PUT;"), "{printed}");

    let route = |body: &str| format!("{LISTEN}[[route]]\n{body}respond = {{}}\n");
    let cases = [
        (
            route("path_regex = \"(\"\n"),
            "scb.toml:4:14: route[0].path_regex: path expression `(`",
        ),
        (
            route("prefix = \"/a\"\npath_regex = \"^/a\"\n"),
            "scb.toml:5:14: route[0].path_regex: a route has one of `path`, `prefix` and \
             `path_regex`: `prefix` is set",
        ),
        (
            route("prefix = \"/a\"\nmatch = { methods = [\"get\"] }\n"),
            "scb.toml:5:22: route[0].match.methods[0]: \"get\" is not a method name",
        ),
        (
            route("prefix = \"/a\"\nmatch = { methods = [] }\n"),
            "route[0].match.methods: names no method",
        ),
        (
            route("prefix = \"/a\"\nmatch = {}\n"),
            "route[0].match: names no condition",
        ),
        (
            route("prefix = \"/a\"\nmatch = { headers = { \"bad name\" = \"x\" } }\n"),
            "route[0].match.headers.bad name: \"bad name\" is not a header name",
        ),
        (
            route("prefix = \"/a\"\nmatch = { remote = [\"10.0.0.0/33\"] }\n"),
            "route[0].match.remote[0]:",
        ),
        (
            route("prefix = \"/a\"\nmatch = { method = [\"GET\"] }\n"),
            "route[0].match.method: unknown field `method`",
        ),
        (
            route("path_regex = \"^/u/(?<id>\\\\d+)$\"\nrewrite = { to = \"/x/{name}\" }\n"),
            "route[0].rewrite.to: \"/x/{name}\" is not a path template (a group name the \
             route's expression does not have)",
        ),
        (
            route("prefix = \"/u/\"\nrewrite = { to = \"/x/{id}\" }\n"),
            "route[0].rewrite: a rewrite has `prefix` or `regex`",
        ),
        (
            format!(
                "{LISTEN}[[route]]\nprefix = \"/a\"\nrespond = {{}}\n\
                 [[route]]\nname = \"b\"\nprefix = \"/a\"\nrespond = {{}}\n"
            ),
            "route[1].prefix: prefix \"/a\" is already routed by route[0]; give one of them \
             `match` conditions",
        ),
        (
            format!(
                "{LISTEN}[[route]]\npath_regex = \"^/a\"\nrespond = {{}}\n\
                 [[route]]\nname = \"b\"\npath_regex = \"^/a\"\nrespond = {{}}\n"
            ),
            "route[1].path_regex: path_regex \"^/a\" is already routed by route[0]",
        ),
        (
            route(
                "path_regex = \"^/a/(.*)$\"\nproxy = { upstreams = [\"127.0.0.1:1\"], \
                 strip_prefix = true }\n",
            )
            .replace("respond = {}\n", ""),
            "route[0].proxy.strip_prefix: only a `prefix` route has a prefix to strip",
        ),
    ];
    for (source, expected) in cases {
        let got = error(&source);
        assert!(
            got.contains(expected),
            "{source}\n got: {got}\nwant: {expected}"
        );
    }
}

#[test]
fn forward_auth_and_try_files_are_guards_and_their_bad_values_are_refused_where_they_are() {
    let root = std::env::temp_dir().join(format!("scb-plan-try-files-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let planned = plan(&format!(
        "{LISTEN}[[route]]\nprefix = \"/app/\"\n\
         forward_auth = {{ upstream = \"127.0.0.1:9091\", uri = \"/api/verify\", \
         copy_headers = [\"Remote-User\", \"Remote-Groups\"], timeout = \"3s\" }}\n\
         static = {{ root = {root:?} }}\ntry_files = [\"{{path}}\", \"/index.html\"]\n"
    ));
    let guards = &planned.routes()[0].guards;
    assert_eq!(guards.names(), ["forward_auth", "try_files"]);
    let auth = guards.forward_auth.as_ref().unwrap();
    assert_eq!(auth.uri(), "/api/verify");
    assert_eq!(
        auth.copied_headers(),
        [
            HeaderName::from_static("remote-user"),
            HeaderName::from_static("remote-groups")
        ]
    );
    let with = |table: &str| format!("{LISTEN}[[route]]\nprefix = \"/\"\n{table}respond = {{}}\n");
    let cases = [
        (
            with("forward_auth = { upstream = \"127.0.0.1:9091\", uri = \"verify\" }\n"),
            "scb.toml:5:53: route[0].forward_auth.uri: forward auth uri \"verify\" must be a path",
        ),
        (
            with("forward_auth = { upstream = \"nowhere\", uri = \"/v\" }\n"),
            "scb.toml:5:29: route[0].forward_auth.upstream: upstream \"nowhere\" is not host:port",
        ),
        (
            with(
                "forward_auth = { upstream = \"127.0.0.1:1\", uri = \"/v\", copy_headers = [\"a b\"] }\n",
            ),
            "route[0].forward_auth.copy_headers[0]: \"a b\" is not a header name",
        ),
        (
            with("forward_auth = { upstream = \"127.0.0.1:1\", uri = \"/v\", timeout = \"0s\" }\n"),
            "route[0].forward_auth.timeout:",
        ),
        (
            with("try_files = [\"{path}\", \"=404\"]\n"),
            "route[0].try_files: looks for files beneath a root: it goes on a `static` or \
             `fastcgi` route",
        ),
        (
            format!(
                "{LISTEN}[[route]]\nprefix = \"/\"\nstatic = {{ root = {root:?} }}\n\
                 try_files = [\"{{path}}\", \"=200\"]\n"
            ),
            "route[0].try_files[1]: entry 1 (\"=200\"): `=` takes a 4xx or 5xx status",
        ),
        (
            format!(
                "{LISTEN}[[route]]\nprefix = \"/\"\nstatic = {{ root = {root:?} }}\n\
                 try_files = [\"{{path}}\"]\n"
            ),
            "route[0].try_files: try_files needs at least two entries",
        ),
    ];
    for (source, expected) in cases {
        let got = error(&source);
        assert!(
            got.contains(expected),
            "{source}\n got: {got}\nwant: {expected}"
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_cluster_is_one_connection_per_url_and_shared_limits_need_it() {
    let with_cluster = |prefix: &str| {
        format!(
            "[cluster]\nredis = \"redis://:secret@127.0.0.1:6390/0\"\nkey_prefix = {prefix:?}\n\
             {LISTEN}[[route]]\nprefix = \"/api/\"\n\
             rate_limit = {{ rate = \"10/s\", burst = 20, shared = true }}\nrespond = {{}}\n"
        )
    };
    let a = plan(&with_cluster("scb:"));
    let b = plan(&with_cluster("scb:"));
    let (ca, cb) = (a.cluster.as_ref().unwrap(), b.cluster.as_ref().unwrap());
    // The plan a reload builds shares the running one's connection.
    assert_eq!(ca.instance(), cb.instance());
    let c = plan(&with_cluster("other:"));
    assert_ne!(c.cluster.as_ref().unwrap().instance(), ca.instance());
    let shown = a.describe();
    assert!(
        shown.contains("cluster: Redis 127.0.0.1:6390, keys under \"scb:\""),
        "{shown}"
    );
    assert!(!shown.contains("secret"), "{shown}");
    let cases = [
        (
            format!(
                "{LISTEN}[[route]]\nprefix = \"/\"\nrate_limit = {{ rate = \"1/s\", shared = true }}\n\
                 respond = {{}}\n"
            ),
            "route[0].rate_limit.shared: a shared limit counts in the fleet's Redis: add a \
             [cluster] table",
        ),
        (
            format!("[cluster]\nredis = \"http://x\"\n{LISTEN}"),
            "scb.toml:2:9: cluster.redis: not a Redis URL",
        ),
        (
            format!("[cluster]\nredis = \"redis://x\"\nkey_prefix = \"\"\n{LISTEN}"),
            "cluster.key_prefix: must not be empty",
        ),
        (
            format!("[cluster]\nurl = \"redis://x\"\n{LISTEN}"),
            "scb.toml:2:1: cluster.url: unknown field `url`",
        ),
    ];
    for (source, expected) in cases {
        let got = error(&source);
        assert!(
            got.contains(expected),
            "{source}\n got: {got}\nwant: {expected}"
        );
    }
}

/// A directory of TSIG key files: `keygen.key` as `tsig-keygen -a hmac-sha512 scb` writes
/// it (secret "secret"), `bare.key` a bare base64 secret, `garbage.key` neither.
fn tsig_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("scb-plan-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("keygen.key"),
        "key \"scb\" {\n\talgorithm hmac-sha512;\n\tsecret \"c2VjcmV0\";\n};\n",
    )
    .unwrap();
    std::fs::write(dir.join("bare.key"), "c2VjcmV0\n").unwrap();
    std::fs::write(dir.join("garbage.key"), "not base64!\n").unwrap();
    dir
}

/// A config with one ACME listener whose `acme` table is `acme`.
fn acme_listener(acme: &str) -> String {
    format!(
        "[[listen]]\naddr = \"127.0.0.1:0\"\ntls = {{ acme = {{ {acme} }} }}\n\
         [[route]]\npath = \"/\"\nrespond = {{}}\n"
    )
}

#[test]
fn a_dns_01_listener_is_planned_with_a_wildcard_and_the_key_read_from_tsig_keygen_output() {
    let dir = tsig_dir("dns01");
    let key = dir.join("keygen.key");
    let planned = plan(&acme_listener(&format!(
        "domains = [\"*.example.test\", \"example.test\", \"www.Example.test\"], \
         state_dir = \"/tmp/x\", challenge = \"dns-01\", \
         dns = {{ rfc2136 = {{ server = \"10.0.0.53\", zone = \"example.test\", tsig_key = \"scb\", \
         tsig_secret_file = {key:?}, transport = \"tcp\" }}, ttl = 30, propagation_timeout = \"5m\", \
         propagation_interval = \"500ms\", propagation_delay = \"10s\", check_nameservers = false }}"
    )));
    let key = scb_tls::acme::TsigKey::new(
        "scb",
        scb_tls::acme::TsigAlgorithm::HmacSha512,
        b"secret".to_vec(),
    )
    .unwrap();
    let rfc2136 =
        scb_tls::acme::Rfc2136::new("10.0.0.53:53".parse().unwrap(), "example.test.", key)
            .unwrap()
            .transport(scb_tls::acme::DnsTransport::Tcp);
    let dns = scb_tls::acme::Dns01::new(rfc2136)
        .ttl(30)
        .propagation_timeout(Duration::from_secs(300))
        .propagation_interval(Duration::from_millis(500))
        .propagation_delay(Duration::from_secs(10))
        .check_nameservers(false);
    let want = scb_tls::AcmeSettings::new(
        ["*.example.test", "example.test", "www.example.test"],
        "/tmp/x",
    )
    .challenge(scb_tls::AcmeChallenge::Dns01(dns));
    assert_eq!(planned.https.acme.len(), 1);
    assert_eq!(
        planned.https.acme[0].settings().acme_settings(),
        Some(&want)
    );

    // A bare secret, the algorithm given; the defaults elsewhere.
    let bare = dir.join("bare.key");
    let planned = plan(&acme_listener(&format!(
        "domains = [\"*.example.test\"], state_dir = \"/tmp/x\", challenge = \"dns-01\", \
         dns = {{ rfc2136 = {{ server = \"127.0.0.1:5353\", zone = \"example.test.\", \
         tsig_key = \"scb\", tsig_secret_file = {bare:?}, tsig_algorithm = \"hmac-sha384\" }} }}"
    )));
    let key = scb_tls::acme::TsigKey::new(
        "scb",
        scb_tls::acme::TsigAlgorithm::HmacSha384,
        b"secret".to_vec(),
    )
    .unwrap();
    let dns = scb_tls::acme::Dns01::new(
        scb_tls::acme::Rfc2136::new("127.0.0.1:5353".parse().unwrap(), "example.test.", key)
            .unwrap(),
    );
    let want = scb_tls::AcmeSettings::new(["*.example.test"], "/tmp/x")
        .challenge(scb_tls::AcmeChallenge::Dns01(dns));
    assert_eq!(
        planned.https.acme[0].settings().acme_settings(),
        Some(&want)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dns_01_errors_name_their_key() {
    let dir = tsig_dir("dns01-errors");
    let (keygen, bare, garbage) = (
        dir.join("keygen.key"),
        dir.join("bare.key"),
        dir.join("garbage.key"),
    );
    let missing = dir.join("missing.key");
    // `acme` with DNS-01 for `domains`, `rfc2136` holding `extra` (its file `file`) and
    // `dns` holding `dns_extra`.
    let dns01 = |domains: &str, file: &std::path::Path, extra: &str, dns_extra: &str| {
        format!(
            "domains = [{domains}], state_dir = \"/tmp/x\", challenge = \"dns-01\", \
             dns = {{ rfc2136 = {{ server = \"127.0.0.1:5353\", zone = \"example.test.\", \
             tsig_key = \"scb\", tsig_secret_file = {file:?}{extra} }}{dns_extra} }}"
        )
    };
    let wild = "\"*.example.test\"";
    let dns_table = format!(
        "dns = {{ rfc2136 = {{ server = \"127.0.0.1:53\", zone = \"example.test.\", \
         tsig_key = \"scb\", tsig_secret_file = {bare:?} }} }}"
    );
    let cases = [
        (
            dns01(wild, &bare, ", tsig_algorithm = \"hmac-md5\"", ""),
            "listen[0].tls.acme.dns.rfc2136.tsig_algorithm: unknown TSIG algorithm \"hmac-md5\": \
             expected \"hmac-sha256\", \"hmac-sha384\" or \"hmac-sha512\""
                .to_owned(),
        ),
        (
            dns01(wild, &missing, "", ""),
            format!(
                "listen[0].tls.acme.dns.rfc2136.tsig_secret_file: {}: No such file or directory",
                missing.display()
            ),
        ),
        (
            dns01(wild, &garbage, "", ""),
            format!(
                "listen[0].tls.acme.dns.rfc2136.tsig_secret_file: {}: the secret is not base64",
                garbage.display()
            ),
        ),
        (
            dns01(wild, &keygen, ", tsig_algorithm = \"hmac-sha256\"", ""),
            format!(
                "listen[0].tls.acme.dns.rfc2136.tsig_secret_file: {}: key \"scb\" is hmac-sha512 \
                 there, not the configured hmac-sha256",
                keygen.display()
            ),
        ),
        (
            dns01(wild, &keygen, "", "").replace("tsig_key = \"scb\"", "tsig_key = \"other\""),
            format!(
                "listen[0].tls.acme.dns.rfc2136.tsig_secret_file: {}: has no key \"other\" (it \
                 has \"scb\")",
                keygen.display()
            ),
        ),
        (
            dns01(wild, &bare, "", "").replace("tsig_key = \"scb\"", "tsig_key = \"a b\""),
            "listen[0].tls.acme.dns.rfc2136.tsig_key: \"a b\" is not a DNS name".to_owned(),
        ),
        (
            dns01(wild, &bare, "", "").replace("127.0.0.1:5353", "ns.example.test:53"),
            "listen[0].tls.acme.dns.rfc2136.server: expected an IP address and port".to_owned(),
        ),
        (
            dns01(wild, &bare, "", "").replace("\"example.test.\"", "\"exa mple.test.\""),
            "listen[0].tls.acme.dns.rfc2136.zone: \"exa mple.test.\" is not a DNS name".to_owned(),
        ),
        (
            dns01(wild, &bare, ", transport = \"quic\"", ""),
            "listen[0].tls.acme.dns.rfc2136.transport: expected \"udp\" or \"tcp\"".to_owned(),
        ),
        (
            dns01(wild, &bare, "", ", propagation_interval = \"0s\""),
            "listen[0].tls.acme.dns.propagation_interval: must be greater than zero".to_owned(),
        ),
        (
            dns01(wild, &bare, "", ", propagation_timeout = \"0s\""),
            "listen[0].tls.acme.dns.propagation_timeout: must be greater than zero".to_owned(),
        ),
        (
            dns01(wild, &bare, "", ", provider = \"cloudflare\""),
            "unknown field `provider`".to_owned(),
        ),
        (
            dns01("\"example.test\", \"example.org\"", &bare, "", ""),
            "listen[0].tls.acme.domains[1]: _acme-challenge.example.org. is not in the zone \
             example.test., which updates can change (tls.acme.dns.rfc2136.zone)"
                .to_owned(),
        ),
        (
            dns01("\"*.notexample.test\"", &bare, "", ""),
            "listen[0].tls.acme.domains[0]: _acme-challenge.notexample.test. is not in the zone"
                .to_owned(),
        ),
        (
            dns01("\"192.0.2.1\"", &bare, "", ""),
            "listen[0].tls.acme.domains[0]: an IP address cannot be proved by DNS-01".to_owned(),
        ),
        (
            dns01("\"a.*.example.test\"", &bare, "", ""),
            "listen[0].tls.acme.domains[0]: is not a DNS name, a wildcard (`*.example.com`) or \
             an IP address"
                .to_owned(),
        ),
        (
            dns01("\"*\"", &bare, "", ""),
            "listen[0].tls.acme.domains[0]: is not a DNS name".to_owned(),
        ),
        (
            format!("domains = [{wild}], state_dir = \"/tmp/x\""),
            "listen[0].tls.acme.domains[0]: a wildcard is proved through DNS only: set \
             `challenge = \"dns-01\"`"
                .to_owned(),
        ),
        (
            format!(
                "domains = [\"example.test\", {wild}], state_dir = \"/tmp/x\", challenge = \"http-01\""
            ),
            "listen[0].tls.acme.domains[1]: a wildcard is proved through DNS only".to_owned(),
        ),
        (
            format!(
                "domains = [\"example.test\"], state_dir = \"/tmp/x\", challenge = \"http-01\", {dns_table}"
            ),
            "listen[0].tls.acme.dns: is for `challenge = \"dns-01\"`, and this one is http-01"
                .to_owned(),
        ),
        (
            format!("domains = [\"example.test\"], state_dir = \"/tmp/x\", {dns_table}"),
            "listen[0].tls.acme.dns: is for `challenge = \"dns-01\"`, and this one is tls-alpn-01"
                .to_owned(),
        ),
        (
            "domains = [\"example.test\"], state_dir = \"/tmp/x\", challenge = \"dns-01\""
                .to_owned(),
            "listen[0].tls.acme.challenge: dns-01 needs `dns = { rfc2136 = { server, zone, \
             tsig_key, tsig_secret_file } }`"
                .to_owned(),
        ),
        (
            "domains = [\"example.test\"], state_dir = \"/tmp/x\", challenge = \"dns-01\", \
             dns = { ttl = 60 }"
                .to_owned(),
            "missing field `rfc2136`".to_owned(),
        ),
        (
            "domains = [\"example.test\"], state_dir = \"/tmp/x\", challenge = \"dns-02\""
                .to_owned(),
            "listen[0].tls.acme.challenge: expected \"tls-alpn-01\", \"http-01\" or \"dns-01\""
                .to_owned(),
        ),
    ];
    for (acme, want) in cases {
        let got = error(&acme_listener(&acme));
        assert!(
            got.starts_with("scb.toml:3:") && got.contains(&want),
            "got {got:?}, want {want:?}"
        );
        // Whatever is wrong, the secret is not in the message.
        assert!(!got.contains("c2VjcmV0"), "{got}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_on_demand_listener_is_planned_and_its_bad_values_are_refused_where_they_are() {
    let listen = |table: &str| {
        format!("[[listen]]\naddr = \"127.0.0.1:8443\"\ntls = {{ on_demand = {{ {table} }} }}\n")
    };
    let planned = plan(&listen(
        "ask = \"http://127.0.0.1:5555/allowed\", email = \"ops@example.com\", \
         state_dir = \"/tmp/scb-plan-on-demand\", per_hour = 5, wait = \"5s\"",
    ));
    let acceptor = &planned.https.acme[0];
    let settings = acceptor.settings().on_demand_settings().unwrap();
    assert_eq!(settings.ask_url(), "http://127.0.0.1:5555/allowed");
    // The issue's form under [cluster]: no state_dir.
    plan(&format!(
        "[cluster]\nredis = \"redis://127.0.0.1:6390/0\"\n{}",
        listen("ask = \"http://127.0.0.1:5555/allowed\", email = \"ops@example.com\"")
    ));
    let cases = [
        (
            listen("ask = \"ftp://x/allowed\", state_dir = \"/tmp/x\""),
            "scb.toml:3:29: listen[0].tls.on_demand.ask: is not an http:// or https:// URL",
        ),
        (
            listen("ask = \"http://127.0.0.1:1/\""),
            "listen[0].tls.on_demand.state_dir: where the account and certificates are kept",
        ),
        (
            listen("ask = \"http://127.0.0.1:1/\", state_dir = \"/tmp/x\", challenge = \"dns-01\""),
            "listen[0].tls.on_demand.challenge: expected \"tls-alpn-01\" or \"http-01\"",
        ),
        (
            listen("ask = \"http://127.0.0.1:1/\", state_dir = \"/tmp/x\", wait = \"0s\""),
            "listen[0].tls.on_demand.wait: must be more than 0s",
        ),
        (
            "[[listen]]\naddr = \"127.0.0.1:8443\"\ntls = { cert = \"a.pem\", key = \"a.key\", \
             on_demand = { ask = \"http://x/\", state_dir = \"/tmp/x\" } }\n"
                .to_owned(),
            "listen[0].tls.on_demand: an on-demand listener gets every certificate on demand",
        ),
    ];
    for (source, expected) in cases {
        let got = error(&source);
        assert!(
            got.contains(expected),
            "{source}\n got: {got}\nwant: {expected}"
        );
    }
}

#[test]
fn the_fleet_schema_from_the_issue_is_accepted_as_written() {
    let dir = std::env::temp_dir().join(format!("scb-plan-fleet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("tsig.key");
    std::fs::write(
        &key,
        "key \"scb\" {\n\talgorithm hmac-sha256;\n\tsecret \"c2VjcmV0\";\n};\n",
    )
    .unwrap();
    // As the issue writes it, but for the secret file's path (which must exist here).
    let source = r#"
[cluster]
redis = "redis://10.0.0.5:6379/0"        # absent: everything stays local, as today
key_prefix = "scb:"

[[listen]]
addr = "0.0.0.0:443"
tls = { acme = { domains = ["*.example.com", "example.com"], email = "ops@example.com",
                 challenge = "dns-01", dns = { rfc2136 = { server = "10.0.0.53:53", zone = "example.com.",
                 tsig_key = "scb", tsig_secret_file = "TSIG", tsig_algorithm = "hmac-sha256" } } } }

[[listen]]
addr = "0.0.0.0:8443"
tls = { on_demand = { ask = "http://127.0.0.1:5555/allowed", email = "ops@example.com" } }

[[route]]
prefix = "/api/"
rate_limit = { key = "client_ip", rate = "10/s", burst = 20, shared = true }
proxy = { upstreams = ["127.0.0.1:8081"] }
"#
    .replace("TSIG", &key.display().to_string());
    let planned = plan(&source);
    let cluster = planned.cluster.as_ref().expect("[cluster]");
    assert_eq!(cluster.prefix(), "scb:");
    assert_eq!(cluster.shown(), "10.0.0.5:6379");
    let (acme, on_demand) = (&planned.https.acme[0], &planned.https.acme[1]);
    let settings = acme.settings().acme_settings().unwrap();
    assert_eq!(settings.domains(), ["*.example.com", "example.com"]);
    assert!(on_demand.settings().on_demand_settings().is_some());
    assert!(planned.routes()[0].guards.rate_limit.is_some());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn issue_31s_tracing_table_is_accepted_as_written_and_printed() {
    let plan = plan(&format!(
        "[tracing]\n\
         otlp = \"http://127.0.0.1:4318\"        # OTLP over HTTP/protobuf\n\
         service_name = \"edge\"\n\
         sample_ratio = 0.05\n\
         propagate = true\n\
         {LISTEN}[[route]]\npath = \"/\"\nrespond = {{ body = \"x\" }}\n"
    ));
    let tracing = plan.tracing.as_ref().unwrap();
    let export = tracing.export.as_ref().unwrap();
    assert_eq!(export.endpoint, "http://127.0.0.1:4318/v1/traces");
    assert_eq!(export.service_name, "edge");
    assert!((tracing.sample_ratio - 0.05).abs() < f64::EPSILON);
    assert!(tracing.propagate);
    assert!(plan.describe().contains(
        "tracing: trace context propagated to upstreams, spans to \
         http://127.0.0.1:4318/v1/traces as \"edge\", 0.05 of new traces sampled"
    ));
    // Ids and propagation without a collector; defaults elsewhere.
    let plan = plan_of("[tracing]\npropagate = false\n");
    let tracing = plan.tracing.unwrap();
    assert_eq!(tracing.export, None);
    assert!(!tracing.propagate);
    assert!((tracing.sample_ratio - 1.0).abs() < f64::EPSILON);
    assert!(plan_of("").tracing.is_none());
    assert_eq!(
        error(&format!(
            "[tracing]\nsample_ratio = -0.1\n{LISTEN}[[route]]\npath = \"/\"\nrespond = {{ body = \"x\" }}\n"
        )),
        "scb.toml:2:16: tracing.sample_ratio: must be between 0 and 1 (0.05 samples one trace in twenty)"
    );
}

fn plan_of(tables: &str) -> Plan {
    plan(&format!(
        "{tables}{LISTEN}[[route]]\npath = \"/\"\nrespond = {{ body = \"x\" }}\n"
    ))
}
