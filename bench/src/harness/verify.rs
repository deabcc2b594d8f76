//! Before anything is measured: every URL of the scenario answers 200 with the fixture's
//! exact bytes (a benchmark of a wrong answer is worthless). Over TLS, also that TLS 1.3 and
//! HTTP/2 were negotiated.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::harness::http_client;
use crate::harness::ports::local;
use crate::harness::scenario::Expected;
use crate::harness::tools;

/// Per-request timeout while verifying.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Compares a response with what was expected; the message says what differs.
///
/// # Errors
///
/// On a status other than 200 or a body that is not byte-identical.
pub(crate) fn compare(what: &str, status: u16, body: &[u8], expected: &[u8]) -> anyhow::Result<()> {
    if status != 200 {
        bail!(
            "{what}: status {status}, expected 200 (body starts {:?})",
            preview(body)
        );
    }
    if body != expected {
        let first_diff = body
            .iter()
            .zip(expected)
            .position(|(a, b)| a != b)
            .unwrap_or(body.len().min(expected.len()));
        bail!(
            "{what}: body differs from the fixture: {} bytes, expected {}; first difference at \
             byte {first_diff} (got {:?}, expected {:?})",
            body.len(),
            expected.len(),
            preview(&body[first_diff.min(body.len())..]),
            preview(&expected[first_diff.min(expected.len())..]),
        );
    }
    Ok(())
}

fn preview(bytes: &[u8]) -> String {
    let end = bytes.len().min(40);
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Verifies each URL over plain HTTP/1.1 on `port`.
///
/// # Errors
///
/// On the first URL that fails, with what went wrong.
pub(crate) fn plain(port: u16, checks: &[Expected]) -> anyhow::Result<()> {
    for check in checks {
        let what = format!("GET {}", check.path);
        let resp =
            http_client::get(local(port), &check.path, TIMEOUT).with_context(|| what.clone())?;
        compare(&what, resp.status, &resp.body, &check.body)?;
    }
    Ok(())
}

/// Verifies each URL over TLS 1.3 + HTTP/2 on `port` with curl (`-k`: the certificate is
/// self-signed). Bodies go to a file in `workdir`, so binary bodies compare exactly.
///
/// # Errors
///
/// On the first URL that fails, or when HTTP/2 or TLS 1.3 was not negotiated.
pub(crate) fn tls_h2(port: u16, checks: &[Expected], workdir: &Path) -> anyhow::Result<()> {
    let body_file = workdir.join("verify-body");
    for check in checks {
        let url = format!("https://127.0.0.1:{port}{}", check.path);
        let what = format!("GET {url} (curl --http2 --tlsv1.3)");
        let out = Command::new(tools::program("curl"))
            .args(["-sSk", "--http2", "--tlsv1.3", "--max-time"])
            .arg(TIMEOUT.as_secs().to_string())
            .arg("-o")
            .arg(&body_file)
            .args(["-w", "%{http_code} %{http_version}", &url])
            .stdin(Stdio::null())
            .output()
            .context("running curl")?;
        let written = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!(
                "{what}: curl failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let (code, version) = parse_write_out(&written)
            .with_context(|| format!("{what}: unexpected curl output {written:?}"))?;
        if version != "2" {
            bail!("{what}: negotiated HTTP/{version}, expected HTTP/2 (ALPN h2)");
        }
        let body = std::fs::read(&body_file).unwrap_or_default();
        compare(&what, code, &body, &check.body)?;
    }
    let _ = std::fs::remove_file(&body_file);
    Ok(())
}

/// Checks every URL over HTTP/3 (`h3load --get`: ALPN h3 only, so an answer proves QUIC).
///
/// # Errors
///
/// The first URL that fails, with what came instead.
pub(crate) fn h3(port: u16, checks: &[Expected]) -> anyhow::Result<()> {
    for check in checks {
        let url = format!("https://127.0.0.1:{port}{}", check.path);
        let what = format!("GET {url} (h3load --get)");
        let out = Command::new(tools::h3load())
            .args(["--get", &url])
            .stdin(Stdio::null())
            .output()
            .context("running h3load")?;
        if !out.status.success() {
            bail!(
                "{what}: h3load failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let newline = out.stdout.iter().position(|&b| b == b'\n');
        let code = newline
            .and_then(|n| std::str::from_utf8(&out.stdout[..n]).ok()?.parse().ok())
            .with_context(|| format!("{what}: no status line from h3load"))?;
        let body = &out.stdout[newline.map_or(0, |n| n + 1)..];
        compare(&what, code, body, &check.body)?;
    }
    Ok(())
}

/// Parses curl's `-w '%{http_code} %{http_version}'` output.
fn parse_write_out(text: &str) -> Option<(u16, &str)> {
    let (code, version) = text.trim().split_once(' ')?;
    Some((code.parse().ok()?, version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_bytes_with_200_pass() {
        compare("GET /x", 200, b"abc", b"abc").unwrap();
    }

    #[test]
    fn a_wrong_status_or_byte_is_named() {
        let err = compare("GET /x", 404, b"", b"abc").unwrap_err().to_string();
        assert!(err.contains("status 404"), "{err}");
        let err = compare("GET /x", 200, b"abd", b"abc")
            .unwrap_err()
            .to_string();
        assert!(err.contains("first difference at byte 2"), "{err}");
        let err = compare("GET /x", 200, b"ab", b"abc")
            .unwrap_err()
            .to_string();
        assert!(err.contains("2 bytes, expected 3"), "{err}");
    }

    #[test]
    fn curl_write_out_parses() {
        assert_eq!(parse_write_out("200 2"), Some((200, "2")));
        assert_eq!(parse_write_out("200 1.1\n"), Some((200, "1.1")));
        assert_eq!(parse_write_out("000 0"), Some((0, "0")));
        assert_eq!(parse_write_out(""), None);
    }
}
