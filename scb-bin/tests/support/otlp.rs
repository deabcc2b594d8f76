//! An OpenTelemetry collector's OTLP/HTTP receiver, as far as the tests need one: a
//! thread that takes `POST /v1/traces` bodies, decodes them with the protocol's own
//! message types (`opentelemetry-proto`, prost) and keeps every span, with the resource's
//! `service.name`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
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
}

/// The receiver; its thread lives as long as the test process.
#[derive(Clone)]
pub(crate) struct Collector {
    addr: SocketAddr,
    state: Arc<(Mutex<State>, Condvar)>,
}

impl Collector {
    pub(crate) fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the collector");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || {
                    let _ = serve(stream, &shared);
                });
            }
        });
        Self { addr, state }
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
fn serve(stream: TcpStream, state: &(Mutex<State>, Condvar)) -> std::io::Result<()> {
    stream.set_read_timeout(Some(TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut length = 0;
        let mut content_type = String::new();
        loop {
            let mut field = String::new();
            reader.read_line(&mut field)?;
            if field == "\r\n" || field.is_empty() {
                break;
            }
            if let Some((name, value)) = field.split_once(':') {
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
        writer.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
        )?;
    }
}
