use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::uri::Authority;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use tower::{ServiceBuilder, ServiceExt as _, service_fn};

use super::*;
use crate::router::{PathMatch, Router};

const PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";

type Seen = Arc<Mutex<Vec<FinishedSpan>>>;

/// A layer whose spans land in the returned list.
fn layer() -> (SpansLayer, Seen) {
    let seen = Seen::default();
    let sink = Arc::clone(&seen);
    (
        SpansLayer::new(move |span| sink.lock().unwrap().push(span)),
        seen,
    )
}

/// What the service beneath saw: the request's trace fields and its context.
#[derive(Clone, Debug, Default)]
struct Beneath {
    traceparent: Option<String>,
    tracestate: Option<String>,
    context: Option<TraceContext>,
}

async fn call(layer: SpansLayer, req: Request<Body>) -> (Response<Body>, Beneath) {
    let beneath = Arc::new(Mutex::new(Beneath::default()));
    let seen = Arc::clone(&beneath);
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(service_fn(move |req: Request<Body>| {
            let field = |name| {
                req.headers()
                    .get(name)
                    .map(|v: &HeaderValue| v.to_str().unwrap().to_owned())
            };
            *seen.lock().unwrap() = Beneath {
                traceparent: field(TRACEPARENT),
                tracestate: field(TRACESTATE),
                context: req.extensions().get::<TraceContext>().cloned(),
            };
            async { Ok::<_, Infallible>(Response::new(Body::from("hello"))) }
        }));
    let res = svc.oneshot(req).await.unwrap();
    let beneath = beneath.lock().unwrap().clone();
    (res, beneath)
}

fn request(fields: &[(&str, &str)]) -> Request<Body> {
    let mut req = Request::builder()
        .uri("/a?b=1")
        .header("host", "example.com");
    for (name, value) in fields {
        req = req.header(*name, *value);
    }
    req.body(Body::empty()).unwrap()
}

#[tokio::test]
async fn a_sampled_parent_is_continued_and_its_span_exported() {
    let (layer, seen) = layer();
    let (res, beneath) = call(
        layer.sample_ratio(0.0),
        request(&[(TRACEPARENT.as_str(), PARENT), ("tracestate", "congo=t61")]),
    )
    .await;
    assert_eq!(res.status(), StatusCode::OK);
    let spans = seen.lock().unwrap();
    // A ratio of 0 does not drop a trace whose parent is sampled.
    assert_eq!(spans.len(), 1);
    let span = &spans[0];
    assert_eq!(span.context.trace_id_hex(), TRACE);
    assert_eq!(
        span.parent.map(|p| hex(&p)),
        Some("b7ad6b7169203331".into())
    );
    assert_ne!(span.context.span_id_hex(), "b7ad6b7169203331");
    assert_eq!(span.status, Some(StatusCode::OK));
    assert_eq!(span.bytes, 5);
    assert!(span.completed);
    assert_eq!(span.uri, "/a?b=1");
    assert_eq!(span.host.as_ref().unwrap(), "example.com");
    assert!(span.start <= span.end);
    // The service beneath has this server's span, in the client's trace, and the
    // request's fields as the client sent them (the gateways write their own).
    let context = beneath.context.unwrap();
    assert_eq!(&context, &span.context);
    assert_eq!(context.tracestate(), Some("congo=t61"));
    assert_eq!(beneath.traceparent.as_deref(), Some(PARENT));
    assert_eq!(beneath.tracestate.as_deref(), Some("congo=t61"));
}

#[tokio::test]
async fn an_unsampled_parent_is_propagated_but_not_exported() {
    let (layer, seen) = layer();
    let unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    let (_, beneath) = call(layer, request(&[(TRACEPARENT.as_str(), unsampled)])).await;
    assert!(seen.lock().unwrap().is_empty());
    let context = beneath.context.unwrap();
    assert_eq!(context.trace_id_hex(), TRACE);
    assert!(!context.sampled());
    // What an upstream is told: the same trace, unsampled.
    let told = context.traceparent();
    assert!(
        told.starts_with(&format!("00-{TRACE}-")) && told.ends_with("-00"),
        "{told}"
    );
}

#[tokio::test]
async fn a_malformed_or_repeated_traceparent_starts_a_trace_without_tracestate() {
    for fields in [
        // Upper-case hex is not valid.
        &[
            (
                TRACEPARENT.as_str(),
                "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
            ),
            ("tracestate", "congo=t61"),
        ][..],
        &[
            (TRACEPARENT.as_str(), PARENT),
            (TRACEPARENT.as_str(), PARENT),
            ("tracestate", "congo=t61"),
        ][..],
        &[
            (TRACEPARENT.as_str(), "garbage"),
            ("tracestate", "congo=t61"),
        ][..],
    ] {
        let (layer, seen) = layer();
        let (res, beneath) = call(layer, request(fields)).await;
        assert_eq!(res.status(), StatusCode::OK);
        let spans = seen.lock().unwrap();
        assert_eq!(spans.len(), 1, "{fields:?}");
        assert_eq!(spans[0].parent, None);
        assert_ne!(spans[0].context.trace_id_hex(), TRACE);
        // The client's tracestate belonged to a traceparent that was not taken.
        assert_eq!(spans[0].context.tracestate(), None, "{fields:?}");
        assert_eq!(beneath.context.as_ref(), Some(&spans[0].context));
    }
}

#[tokio::test]
async fn several_tracestate_fields_are_joined() {
    let (layer, seen) = layer();
    call(
        layer,
        request(&[
            (TRACEPARENT.as_str(), PARENT),
            ("tracestate", "a=1"),
            ("tracestate", "b=2"),
        ]),
    )
    .await;
    assert_eq!(
        seen.lock().unwrap()[0].context.tracestate(),
        Some("a=1,b=2")
    );
}

#[test]
fn a_context_writes_its_fields_and_drops_a_tracestate_it_does_not_carry() {
    let mut headers = http::HeaderMap::new();
    headers.insert(TRACEPARENT, HeaderValue::from_static("garbage"));
    headers.insert(TRACESTATE, HeaderValue::from_static("congo=t61"));
    let fresh = TraceContext::new([7; 16], [9; 8], true).unwrap();
    fresh.write_fields(&mut headers);
    assert_eq!(headers[TRACEPARENT], fresh.traceparent());
    assert!(!headers.contains_key(TRACESTATE));
    let continued = TraceContext::parse(PARENT, Some("a=1"))
        .unwrap()
        .child([3; 8]);
    continued.write_fields(&mut headers);
    assert_eq!(headers[TRACEPARENT], continued.traceparent());
    assert_eq!(headers[TRACESTATE], "a=1");
}

#[tokio::test]
async fn the_ratio_samples_its_share_of_new_traces() {
    let (layer, seen) = layer();
    let layer = layer.sample_ratio(0.25);
    let mut contexts = 0;
    for _ in 0..4000 {
        let (_, beneath) = call(layer.clone(), request(&[])).await;
        contexts += usize::from(beneath.context.is_some());
    }
    // Every request has a trace id; a quarter of them are sampled (binomial: a standard
    // deviation of 27, so these bounds are 7 of them away).
    assert_eq!(contexts, 4000);
    let sampled = seen.lock().unwrap().len();
    assert!((800..1200).contains(&sampled), "{sampled} of 4000 sampled");
    assert!(seen.lock().unwrap().iter().all(|s| s.context.sampled()));
}

#[tokio::test]
async fn a_streamed_body_ends_the_span_when_it_ends_or_is_dropped() {
    let chunks = || {
        let stream = futures_util::stream::iter([
            Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"abc"))),
            Ok(Frame::data(Bytes::from_static(b"defg"))),
        ]);
        Body::new(http_body_util::StreamBody::new(stream))
    };
    for read_whole in [true, false] {
        let (layer, seen) = layer();
        let svc = ServiceBuilder::new().layer(layer).service(service_fn(
            move |_req: Request<Body>| async move { Ok::<_, Infallible>(Response::new(chunks())) },
        ));
        let res = svc.oneshot(request(&[])).await.unwrap();
        // Nothing yet: the span ends with the body.
        assert!(seen.lock().unwrap().is_empty());
        if read_whole {
            let body = res.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body, "abcdefg");
        } else {
            let mut body = res.into_body();
            body.frame().await.unwrap().unwrap();
            drop(body);
        }
        let spans = seen.lock().unwrap();
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].completed, read_whole);
        assert_eq!(spans[0].bytes, if read_whole { 7 } else { 3 });
    }
}

#[tokio::test]
async fn a_failed_service_ends_the_span_without_a_status() {
    let (layer, seen) = layer();
    let svc = ServiceBuilder::new()
        .layer(layer)
        .service(service_fn(|_req: Request<Body>| async {
            Err::<Response<Body>, _>("broken")
        }));
    assert!(svc.oneshot(request(&[])).await.is_err());
    let spans = seen.lock().unwrap();
    assert_eq!(spans[0].status, None);
    assert!(!spans[0].completed);
}

#[tokio::test]
async fn the_router_and_an_upstream_gateway_note_what_they_did() {
    let (layer, seen) = layer();
    let upstream: Authority = "10.0.0.7:8080".parse().unwrap();
    let dead: Authority = "10.0.0.8:8080".parse().unwrap();
    let (up, down) = (upstream.clone(), dead.clone());
    let gateway = service_fn(move |req: Request<Body>| {
        let notes = req.extensions().get::<SpanNotes>().unwrap().clone();
        let told = notes.upstream_exchange();
        notes.upstream_retry(&down, &"connection refused");
        notes.upstream_connected(&up, false);
        notes.upstream_response(&up, StatusCode::CREATED);
        async move {
            let mut res = Response::new(Body::empty());
            *res.status_mut() = StatusCode::CREATED;
            res.headers_mut()
                .insert("x-told", told.traceparent_header());
            Ok::<_, Infallible>(res)
        }
    });
    let router = Router::new()
        .route("api", PathMatch::Prefix("/a".into()), gateway)
        .unwrap();
    let svc = ServiceBuilder::new().layer(layer).service(router);
    let res = svc
        .oneshot(request(&[(TRACEPARENT.as_str(), PARENT)]))
        .await
        .unwrap();
    let spans = seen.lock().unwrap();
    let span = &spans[0];
    assert_eq!(span.route.as_deref(), Some("api"));
    let up = span.upstream.as_ref().unwrap();
    assert_eq!(up.status, Some(StatusCode::CREATED));
    assert_eq!(up.address.as_ref(), Some(&upstream));
    // The upstream was told of the exchange's own span, a child of the server's.
    let told = res.headers()["x-told"].to_str().unwrap();
    assert_eq!(told, span.context.child(up.span_id).traceparent());
    let kinds: Vec<_> = up.events.iter().map(|e| e.kind.clone()).collect();
    assert_eq!(
        kinds,
        [
            UpstreamEventKind::Retry {
                address: dead,
                error: "connection refused".into()
            },
            UpstreamEventKind::Connected {
                address: upstream,
                reused: false
            },
            UpstreamEventKind::FirstByte,
        ]
    );
    assert!(up.start <= up.events[0].time && up.events[2].time <= span.end);
}

#[test]
fn thresholds_cover_the_ratio_range() {
    assert_eq!(threshold(f64::NAN), 0);
    assert_eq!(threshold(-1.0), 0);
    assert_eq!(threshold(0.0), 0);
    assert_eq!(threshold(1.0), u64::MAX);
    assert_eq!(threshold(7.0), u64::MAX);
    assert_eq!(threshold(0.5), 1 << 63);
    let mut id = [0u8; 16];
    id[8] = 0x7f;
    assert!(sampled(&id, threshold(0.5)));
    id[8] = 0x80;
    assert!(!sampled(&id, threshold(0.5)));
    assert!(!sampled(&id, 0));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn context_only_records_nothing_and_passes_the_clients_decision_on() {
    let (_, beneath) = call(
        SpansLayer::context_only(),
        request(&[(TRACEPARENT.as_str(), PARENT)]),
    )
    .await;
    let context = beneath.context.unwrap();
    assert_eq!(context.trace_id_hex(), TRACE);
    assert!(context.sampled());
    assert!(context.traceparent().ends_with("-01"));
    let (_, beneath) = call(SpansLayer::context_only(), request(&[])).await;
    assert!(!beneath.context.unwrap().sampled());
}
