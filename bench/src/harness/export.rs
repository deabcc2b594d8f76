//! `results.csv` and `results.json`: the same rows as the Markdown table, as exact numbers.

use serde::Serialize;

use crate::harness::environment::Environment;
use crate::harness::figures::Row;
use crate::harness::load::Tool;

/// One row, flat, with units in the names. Absent values are empty in CSV, `null` in JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Record {
    server: &'static str,
    scenario: &'static str,
    /// `measured`, `not-supported` or `failed`.
    status: &'static str,
    tool: Option<Tool>,
    responses: Option<u64>,
    duration_s: Option<f64>,
    rps: Option<f64>,
    mean_ms: Option<f64>,
    p50_ms: Option<f64>,
    p95_ms: Option<f64>,
    p99_ms: Option<f64>,
    success_rate: Option<f64>,
    non_2xx: Option<u64>,
    transport_errors: Option<u64>,
    cpu_s: Option<f64>,
    user_cpu_s: Option<f64>,
    req_per_cpu_s: Option<f64>,
    peak_rss_mib: Option<f64>,
    vs_nginx: Option<f64>,
    vs_nginx_tuned: Option<f64>,
    /// The failure, or a note such as transport errors.
    note: Option<String>,
}

impl Record {
    /// The record of a row.
    pub(crate) fn from_row(row: &Row) -> Record {
        let f = row.figures();
        let load = f.map(|f| &f.load);
        let ms = |us: Option<f64>| us.map(|v| v / 1000.0);
        Record {
            server: row.server.name(),
            scenario: row.scenario.name(),
            status: row.status(),
            tool: load.map(|l| l.tool),
            responses: load.map(|l| l.responses),
            duration_s: load.map(|l| l.duration_s),
            rps: load.map(|l| l.rps()),
            mean_ms: ms(load.map(|l| l.mean_us)),
            p50_ms: ms(load.and_then(|l| l.p50_us)),
            p95_ms: ms(load.and_then(|l| l.p95_us)),
            p99_ms: ms(load.and_then(|l| l.p99_us)),
            success_rate: load.map(|l| l.success_rate()),
            non_2xx: load.map(|l| l.non_2xx),
            transport_errors: load.map(|l| l.transport_errors),
            cpu_s: f.map(|f| f.cpu_s),
            user_cpu_s: f.map(|f| f.user_cpu_s),
            req_per_cpu_s: f.and_then(|f| f.req_per_cpu_s()),
            peak_rss_mib: f.map(|f| f.peak_rss_mib()),
            vs_nginx: row.vs_nginx,
            vs_nginx_tuned: row.vs_nginx_tuned,
            note: row.problem().or_else(|| row.note()).or_else(|| {
                (row.status() == "not-supported")
                    .then(|| crate::harness::report::NOT_SUPPORTED.to_owned())
            }),
        }
    }
}

/// The CSV header, in field order.
const CSV_HEADER: &str = "server,scenario,status,tool,responses,duration_s,rps,mean_ms,p50_ms,\
p95_ms,p99_ms,success_rate,non_2xx,transport_errors,cpu_s,user_cpu_s,req_per_cpu_s,peak_rss_mib,vs_nginx,vs_nginx_tuned,note";

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

/// `results.csv` (RFC 4180: comma-separated, quoted where needed, CRLF-free).
pub(crate) fn csv(rows: &[Row]) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for row in rows {
        let r = Record::from_row(row);
        let f = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v}"));
        let u = |v: Option<u64>| v.map_or_else(String::new, |v| v.to_string());
        let tool = r.tool.map_or("", |t| match t {
            Tool::Wrk => "wrk",
            Tool::H2load => "h2load",
            Tool::H3load => "h3load",
            Tool::Tlsload => "tlsload",
        });
        let fields = [
            r.server.to_owned(),
            r.scenario.to_owned(),
            r.status.to_owned(),
            tool.to_owned(),
            u(r.responses),
            f(r.duration_s),
            f(r.rps),
            f(r.mean_ms),
            f(r.p50_ms),
            f(r.p95_ms),
            f(r.p99_ms),
            f(r.success_rate),
            u(r.non_2xx),
            u(r.transport_errors),
            f(r.cpu_s),
            f(r.user_cpu_s),
            f(r.req_per_cpu_s),
            f(r.peak_rss_mib),
            f(r.vs_nginx),
            f(r.vs_nginx_tuned),
            r.note.as_deref().map(csv_field).unwrap_or_default(),
        ];
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

#[derive(Serialize)]
struct Document<'a> {
    environment: &'a Environment,
    rows: Vec<Record>,
}

/// `results.json`: `{"environment": {...}, "rows": [...]}`.
///
/// # Errors
///
/// Never in practice (every value is serialisable); a non-finite float would be one.
pub(crate) fn json(env: &Environment, rows: &[Row]) -> anyhow::Result<String> {
    let doc = Document {
        environment: env,
        rows: rows.iter().map(Record::from_row).collect(),
    };
    let mut text = serde_json::to_string_pretty(&doc)?;
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::figures::tests::measured;
    use crate::harness::figures::{Outcome, Stage, fill_ratios};
    use crate::harness::scenario::Scenario;
    use crate::harness::server::Server;

    fn rows() -> Vec<Row> {
        let mut rows = vec![
            measured(Server::Nginx, Scenario::Respond, 1_000_000, 8.0),
            measured(Server::Scb, Scenario::Respond, 900_000, 6.0),
            Row::new(Server::Scb, Scenario::Proxy, Outcome::NotSupported),
            Row::new(
                Server::Caddy,
                Scenario::Proxy,
                Outcome::Failed {
                    stage: Stage::Start,
                    message: "bind: \"in use\", port 1".into(),
                },
            ),
        ];
        fill_ratios(&mut rows);
        rows
    }

    #[test]
    fn csv_has_a_header_and_one_line_per_row_with_equal_field_counts() {
        let text = csv(&rows());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5);
        assert_eq!(lines[0], CSV_HEADER);
        assert!(lines[2].starts_with(
            "scb,respond,measured,wrk,900000,10,90000,1.5,1,2.5,4,1,0,0,6,1.5,150000,10,1.2,"
        ));
        assert!(lines[3].ends_with(",not supported yet"));
        assert!(
            lines[4].ends_with(",\"FAILED to start: bind: \"\"in use\"\", port 1\""),
            "{}",
            lines[4]
        );
        // Fields outside quotes: 21 each.
        let fields = |l: &str| {
            let mut n = 1;
            let mut quoted = false;
            for c in l.chars() {
                match c {
                    '"' => quoted = !quoted,
                    ',' if !quoted => n += 1,
                    _ => {}
                }
            }
            n
        };
        assert!(lines.iter().all(|l| fields(l) == 21), "{text}");
    }

    #[test]
    fn json_rows_match_the_csv_rows() {
        let env = Environment::for_tests();
        let value: serde_json::Value = serde_json::from_str(&json(&env, &rows()).unwrap()).unwrap();
        let rows = value["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[1]["server"], "scb");
        assert_eq!(rows[1]["vs_nginx"], 1.2);
        assert_eq!(rows[2]["status"], "not-supported");
        assert!(rows[2]["rps"].is_null());
        assert_eq!(value["environment"]["connections"], 64);
    }
}
