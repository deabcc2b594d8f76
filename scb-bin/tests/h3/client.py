"""An HTTP/3 client made of aioquic (PyPI), which nobody here wrote: the tests' independent
check of scb's HTTP/3, and the same script runs against Caddy for comparison.

Reads a JSON job on stdin:

    {"host": "127.0.0.1", "port": 8443, "server_name": "localhost", "ca": "ca.pem",
     "cert": "client.pem", "key": "client.key",          # optional: a client certificate
     "concurrent": false,                                # all requests at once on one connection
     "requests": [{"method": "GET", "path": "/f", "headers": [["range", "bytes=0-9"]],
                   "body_size": 0,                       # a body of this many bytes ("x" * n)
                   "raw": [[":method", "GET"]]}]}       # instead of the usual pseudo-headers

and writes one JSON object per request on stdout, in order: `status`, `headers` (names
lowercase, values joined with ", "), `body_len`, `body_sha256`, `body` (text, when short),
`reset` (the error code when the server reset the stream, else null), `error` (when the
connection failed). The assertions are the caller's: this script only reports.
"""

import asyncio
import hashlib
import json
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamReset


class Http3(H3Connection):
    """aioquic's HTTP/3 connection, except that an answer to HEAD may carry a
    content-length with no DATA (RFC 9114 §4.1.2: "A response that is defined to have no
    content ... MAY have a non-zero content-length field"), which aioquic 1.7 refuses
    with H3_MESSAGE_ERROR, not knowing which requests were HEAD."""

    def __init__(self, quic):
        super().__init__(quic)
        self.no_content = set()

    def _check_content_length(self, stream):
        if stream.stream_id not in self.no_content:
            super()._check_content_length(stream)


class Exchange:
    def __init__(self):
        self.status = None
        self.headers = {}
        self.body = hashlib.sha256()
        self.body_len = 0
        self.text = bytearray()
        self.reset = None
        self.done = asyncio.get_running_loop().create_future()

    def finish(self):
        if not self.done.done():
            self.done.set_result(None)

    def report(self):
        return {
            "status": self.status,
            "headers": self.headers,
            "body_len": self.body_len,
            "body_sha256": self.body.hexdigest(),
            "body": self.text.decode("utf-8", "replace") if self.body_len <= 4096 else None,
            "reset": self.reset,
        }


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.http = Http3(self._quic)
        self.exchanges = {}
        self.closed = None

    def quic_event_received(self, event):
        if isinstance(event, StreamReset) and event.stream_id in self.exchanges:
            exchange = self.exchanges[event.stream_id]
            exchange.reset = event.error_code
            exchange.finish()
        if isinstance(event, ConnectionTerminated):
            self.closed = {"error_code": event.error_code, "reason": event.reason_phrase}
            for exchange in self.exchanges.values():
                exchange.finish()
        for h3_event in self.http.handle_event(event):
            exchange = self.exchanges.get(getattr(h3_event, "stream_id", None))
            if exchange is None:
                continue
            if isinstance(h3_event, HeadersReceived):
                if exchange.status is None:
                    for name, value in h3_event.headers:
                        name = name.decode()
                        if name == ":status":
                            exchange.status = int(value)
                        else:
                            previous = exchange.headers.get(name)
                            value = value.decode()
                            exchange.headers[name] = (
                                value if previous is None else previous + ", " + value
                            )
                else:
                    for name, value in h3_event.headers:
                        exchange.headers["trailer:" + name.decode()] = value.decode()
            elif isinstance(h3_event, DataReceived):
                exchange.body.update(h3_event.data)
                exchange.body_len += len(h3_event.data)
                if len(exchange.text) <= 4096:
                    exchange.text += h3_event.data
            if getattr(h3_event, "stream_ended", False):
                exchange.finish()

    def start(self, job, request):
        stream_id = self._quic.get_next_available_stream_id()
        exchange = Exchange()
        self.exchanges[stream_id] = exchange
        body = b"x" * request.get("body_size", 0)
        if "raw" in request:
            headers = [(k.encode(), v.encode()) for k, v in request["raw"]]
        else:
            headers = [
                (b":method", request.get("method", "GET").encode()),
                (b":scheme", b"https"),
                (b":authority", job.get("authority", job["server_name"]).encode()),
                (b":path", request["path"].encode()),
                (b"user-agent", b"aioquic"),
            ]
        headers += [(k.lower().encode(), v.encode()) for k, v in request.get("headers", [])]
        if request.get("method") == "HEAD":
            self.http.no_content.add(stream_id)
        self.http.send_headers(stream_id, headers, end_stream=not body)
        if body:
            self.http.send_data(stream_id, body, end_stream=True)
        self.transmit()
        return exchange


async def run(job):
    configuration = QuicConfiguration(
        is_client=True, alpn_protocols=H3_ALPN, server_name=job["server_name"]
    )
    configuration.max_stream_data = 4 * 1024 * 1024
    configuration.max_data = 64 * 1024 * 1024
    configuration.load_verify_locations(job["ca"])
    if job.get("cert"):
        configuration.load_cert_chain(job["cert"], job["key"])
    reports = []
    async with connect(
        job["host"], job["port"], configuration=configuration, create_protocol=Client
    ) as client:
        timeout = job.get("timeout", 20)
        if job.get("concurrent"):
            exchanges = [client.start(job, r) for r in job["requests"]]
            await asyncio.wait_for(
                asyncio.gather(*(e.done for e in exchanges)), timeout
            )
        else:
            exchanges = []
            for request in job["requests"]:
                exchange = client.start(job, request)
                exchanges.append(exchange)
                await asyncio.wait_for(exchange.done, timeout)
        for exchange in exchanges:
            report = exchange.report()
            report["connection_closed"] = client.closed
            reports.append(report)
    return reports


def main():
    job = json.load(sys.stdin)
    try:
        reports = asyncio.run(run(job))
    except Exception as e:  # the caller asserts; it needs to see what failed
        reports = [{"error": f"{type(e).__name__}: {e}"}]
    json.dump(reports, sys.stdout)


if __name__ == "__main__":
    main()
