//! An OpenTelemetry collector's OTLP/HTTP receiver, as far as the tests need one: a
//! thread that takes `POST /v1/traces` bodies, decodes them with the protocol's own
//! message types (`opentelemetry-proto`, prost) and keeps every span, with the resource's
//! `service.name`. [`Collector::start_tls`] is the same receiver behind TLS, as a hosted
//! collector is, and keeps the fields of each post (an API key's, say).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;

use super::TIMEOUT;

/// A span as received, with its resource's service name.
#[derive(Clone, Debug)]
pub(crate) struct Received {
    pub(crate) service: Option<String>,
    pub(crate) span: Span,
}

impl Received {
    /// The value of attribute `key`, as text (numbers and booleans printed).
    pub(crate) fn attr(&self, key: &str) -> Option<String> {
        attr(&self.span.attributes, key)
    }
}

/// The value of `key` among `attributes`, as text.
pub(crate) fn attr(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    Some(match value.value.as_ref()? {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(i) => i.to_string(),
        Value::BoolValue(b) => b.to_string(),
        Value::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    })
}

#[derive(Default)]
struct State {
    spans: Vec<Received>,
    posts: usize,
    /// The last post's fields, names in lower case.
    fields: Vec<(String, String)>,
}

/// The receiver; its thread lives as long as the test process.
#[derive(Clone)]
pub(crate) struct Collector {
    addr: SocketAddr,
    state: Arc<(Mutex<State>, Condvar)>,
}

impl Collector {
    pub(crate) fn start() -> Self {
        Self::listen(None)
    }

    /// A receiver behind TLS with the certificate `cert` (PEM) and its key `key` (PEM).
    pub(crate) fn start_tls(cert: &str, key: &str) -> Self {
        use scb_tls::rustls;
        use scb_tls::rustls::pki_types::pem::PemObject as _;
        let certs = rustls::pki_types::CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        Self::listen(Some(Arc::new(config)))
    }

    fn listen(tls: Option<Arc<scb_tls::rustls::ServerConfig>>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the collector");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let shared = Arc::clone(&shared);
                let tls = tls.clone();
                std::thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(TIMEOUT));
                    let _ = match tls {
                        None => serve(stream, &shared),
                        Some(config) => {
                            let Ok(session) = scb_tls::rustls::ServerConnection::new(config) else {
                                return;
                            };
                            serve(scb_tls::rustls::StreamOwned::new(session, stream), &shared)
                        }
                    };
                });
            }
        });
        Self { addr, state }
    }

    /// The address, for an `https://` URL.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The last post's fields.
    pub(crate) fn fields(&self) -> Vec<(String, String)> {
        self.state.0.lock().unwrap().fields.clone()
    }

    /// `http://ADDR`, as `[tracing] otlp` takes it.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far, once there are at least `count` (bounded wait).
    pub(crate) fn wait_for(&self, count: usize) -> Vec<Received> {
        let (lock, ready) = &*self.state;
        let deadline = Instant::now() + TIMEOUT;
        let mut state = lock.lock().unwrap();
        while state.spans.len() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the collector has {} spans, not {count}: {:#?}",
                state.spans.len(),
                state.spans
            );
            state = ready.wait_timeout(state, left).unwrap().0;
        }
        state.spans.clone()
    }

    /// How many export requests arrived.
    pub(crate) fn posts(&self) -> usize {
        self.state.0.lock().unwrap().posts
    }
}

/// One connection: requests until the client closes it (the exporter keeps it open).
fn serve<S: Read + Write>(stream: S, state: &(Mutex<State>, Condvar)) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut length = 0;
        let mut content_type = String::new();
        let mut fields = Vec::new();
        loop {
            let mut field = String::new();
            reader.read_line(&mut field)?;
            if field == "\r\n" || field.is_empty() {
                break;
            }
            if let Some((name, value)) = field.split_once(':') {
                fields.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
                match name.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "content-type" => content_type = value.trim().to_owned(),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        assert!(line.starts_with("POST /v1/traces "), "{line}");
        assert_eq!(content_type, "application/x-protobuf");
        let request = ExportTraceServiceRequest::decode(&body[..]).expect("an OTLP request");
        {
            let (lock, ready) = state;
            let mut state = lock.lock().unwrap();
            state.posts += 1;
            state.fields = fields;
            for resource in request.resource_spans {
                let service = resource
                    .resource
                    .as_ref()
                    .and_then(|r| attr(&r.attributes, "service.name"));
                for scope in resource.scope_spans {
                    for span in scope.spans {
                        state.spans.push(Received {
                            service: service.clone(),
                            span,
                        });
                    }
                }
            }
            ready.notify_all();
        }
        reader.get_mut().write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
        )?;
    }
}
