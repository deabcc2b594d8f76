//! gRPC through `scb run`: a tonic client speaks HTTP/2 (prior knowledge) to scb's plain
//! listener, scb proxies with `protocol = "h2c"` (or `"h2"` over TLS) to a tonic server
//! running the standard health and reflection services. Unary, server-streaming and
//! bidirectional calls; an upstream that is down, three times in a row, then back.

mod support;

use std::net::SocketAddr;
use std::path::PathBuf;

use support::{Server, TIMEOUT, check};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint, Identity, ServerTlsConfig};
use tonic_health::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, health_check_response};
use tonic_health::server::HealthReporter;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

/// A tonic server with the health and reflection services on `listener`, over TLS when an
/// identity is given.
struct GrpcUpstream {
    addr: SocketAddr,
    reporter: HealthReporter,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl GrpcUpstream {
    async fn spawn(tls: Option<Identity>) -> Self {
        Self::on(TcpListener::bind("127.0.0.1:0").await.unwrap(), tls)
    }

    fn on(listener: TcpListener, tls: Option<Identity>) -> Self {
        let addr = listener.local_addr().unwrap();
        let (reporter, health) = tonic_health::server::health_reporter();
        let reflection = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()
            .unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let mut builder = tonic::transport::Server::builder();
        if let Some(identity) = tls {
            // tonic builds its rustls config from the process's default provider, which a
            // workspace build (the bench turns on ring beside aws-lc-rs) cannot pick alone.
            let _ = scb_tls::rustls::crypto::aws_lc_rs::default_provider().install_default();
            builder = builder
                .tls_config(ServerTlsConfig::new().identity(identity))
                .unwrap();
        }
        let serve = builder
            .add_service(health)
            .add_service(reflection)
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener),
                async {
                    let _ = stopped.await;
                },
            );
        let task = tokio::spawn(async move {
            serve.await.unwrap();
        });
        Self {
            addr,
            reporter,
            stop: Some(stop),
            task,
        }
    }

    /// Stops the server: `GOAWAY` on its connections, which close, and the port closed.
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for GrpcUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// scb on a plain listener, proxying everything to `upstream` with `keys` added to the
/// proxy table. Started off the runtime's threads: it blocks until scb has logged its
/// addresses.
async fn scb_to(upstream: String, keys: &str) -> Server {
    let config = format!(
        "[server]\nworkers = 1\n[[listen]]\naddr = \"127.0.0.1:0\"\n\
         [[route]]\nprefix = \"/\"\nproxy = {{ upstreams = [\"{upstream}\"]{keys} }}\n"
    );
    tokio::task::spawn_blocking(move || Server::start(&config))
        .await
        .unwrap()
}

async fn channel(server: &Server) -> Channel {
    Endpoint::from_shared(format!("http://{}", server.addrs[0]))
        .unwrap()
        .connect_timeout(TIMEOUT)
        .timeout(TIMEOUT)
        .connect()
        .await
        .unwrap()
}

fn check_request(service: &str) -> HealthCheckRequest {
    HealthCheckRequest {
        service: service.to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_server_streaming_and_bidirectional_calls_pass_through_h2c() {
    let upstream = GrpcUpstream::spawn(None).await;
    upstream
        .reporter
        .set_service_status("orders", ServingStatus::Serving)
        .await;
    let scb = scb_to(upstream.addr.to_string(), ", protocol = \"h2c\"").await;
    let channel = channel(&scb).await;
    let mut health = HealthClient::new(channel.clone());

    // Unary: the answer's status travels in the trailers, which scb passes down.
    let answer = health.check(check_request("orders")).await.unwrap();
    assert_eq!(
        answer.into_inner().status(),
        health_check_response::ServingStatus::Serving
    );
    // A gRPC error status from the upstream (NOT_FOUND) reaches the client as such.
    let e = health.check(check_request("nobody")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e}");

    // Server streaming: the current status, then each change as it happens.
    let mut watch = health
        .watch(check_request("orders"))
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(
        first.status(),
        health_check_response::ServingStatus::Serving
    );
    upstream
        .reporter
        .set_service_status("orders", ServingStatus::NotServing)
        .await;
    let second = tokio::time::timeout(TIMEOUT, watch.message())
        .await
        .expect("the change streamed through")
        .unwrap()
        .unwrap();
    assert_eq!(
        second.status(),
        health_check_response::ServingStatus::NotServing
    );

    // Bidirectional: three requests on one stream, each answered on it.
    let mut reflection = ServerReflectionClient::new(channel);
    let requests = (0..3).map(|_| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    });
    let mut answers = reflection
        .server_reflection_info(futures_util::stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let mut seen = 0;
    while let Some(answer) = answers.message().await.unwrap() {
        let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
            panic!("not a service list: {answer:?}");
        };
        assert!(
            list.service
                .iter()
                .any(|s| s.name == "grpc.health.v1.Health"),
            "{list:?}"
        );
        seen += 1;
    }
    assert_eq!(seen, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_only_upstream_down_three_times_is_unavailable_then_serves_again() {
    // A port that was free a moment ago, for an upstream that starts later.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let scb = scb_to(addr.to_string(), ", protocol = \"h2c\"").await;
    let mut health = HealthClient::new(channel(&scb).await);
    for _ in 0..3 {
        let e = health.check(check_request("")).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");
        assert!(
            e.message().contains("connecting to the upstream failed"),
            "{e}"
        );
    }
    // Back: passive health marks steer, never refuse, so the next call goes through.
    let upstream = GrpcUpstream::on(TcpListener::bind(addr).await.unwrap(), None);
    let answer = health.check(check_request("")).await.unwrap();
    assert_eq!(
        answer.into_inner().status(),
        health_check_response::ServingStatus::Serving
    );
    // Gone again mid-life: its connection closes, and the next call is told so.
    upstream.stop().await;
    let e = health.check(check_request("")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("scb-bin-grpc-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_over_tls_to_an_h2_upstream_verified_by_ca_file() {
    let dir = temp_dir("tls");
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let ca = dir.join("upstream.pem");
    std::fs::write(&ca, cert.pem()).unwrap();
    let identity = Identity::from_pem(cert.pem(), key.serialize_pem());
    let upstream = GrpcUpstream::spawn(Some(identity)).await;
    let port = upstream.addr.port();

    let scb = scb_to(
        format!("https://localhost:{port}"),
        &format!(", protocol = \"h2\", ca_file = {ca:?}"),
    )
    .await;
    let mut health = HealthClient::new(channel(&scb).await);
    for _ in 0..3 {
        let answer = health.check(check_request("")).await.unwrap();
        assert_eq!(
            answer.into_inner().status(),
            health_check_response::ServingStatus::Serving
        );
    }

    // Without the CA the certificate is refused: UNAVAILABLE, never a pass.
    let unverified = scb_to(format!("https://localhost:{port}"), ", protocol = \"h2\"").await;
    let mut health = HealthClient::new(channel(&unverified).await);
    let e = health.check(check_request("")).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_protocol_that_does_not_fit_is_refused_with_its_key() {
    let config = |upstream: &str, protocol: &str| {
        format!(
            "[[listen]]\naddr = \"127.0.0.1:0\"\n[[route]]\nprefix = \"/\"\n\
             proxy = {{ upstreams = [\"{upstream}\"], protocol = \"{protocol}\" }}\n"
        )
    };
    for (upstream, protocol, why) in [
        ("127.0.0.1:50051", "h2", "is not https://"),
        ("https://localhost:50051", "h2c", "is https://"),
        ("127.0.0.1:50051", "h3", "expected \"http1\""),
    ] {
        let out = check(&config(upstream, protocol));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{protocol}: {stderr}");
        assert!(stderr.contains("route[0].proxy.protocol"), "{stderr}");
        assert!(stderr.contains(why), "{why}: {stderr}");
    }
    let out = check(&config("127.0.0.1:50051", "h2c"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
