//! `chart.svg`: requests per server CPU-second relative to nginx, grouped by scenario, one
//! bar per server. Hand-written SVG: a few dozen elements do not need a plotting crate.

use std::fmt::Write as _;

use crate::harness::figures::{Outcome, Row};
use crate::harness::scenario::Scenario;
use crate::harness::server::Server;

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 450.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 70.0;
const BOTTOM: f64 = 56.0;

/// One colour per server, the same in every chart (colour-blind-safe Tableau hues).
fn colour(server: Server) -> &'static str {
    match server {
        Server::Scb => "#e15759",
        Server::ScbMetrics => "#ff9d9a",
        Server::Nginx => "#59a14f",
        Server::NginxTuned => "#8cd17d",
        Server::Haproxy => "#f28e2b",
        Server::Caddy => "#4e79a7",
        Server::AxumServedir => "#b07aa1",
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A tick step giving at most 8 intervals up to `max`.
fn tick_step(max: f64) -> f64 {
    for step in [0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0, 10.0, 20.0, 50.0] {
        if max / step <= 8.0 {
            return step;
        }
    }
    100.0
}

/// The chart for `rows`, with scenarios and servers in the order they first appear.
pub(crate) fn svg(rows: &[Row]) -> String {
    let mut scenarios: Vec<Scenario> = Vec::new();
    let mut servers: Vec<Server> = Vec::new();
    for row in rows {
        if !scenarios.contains(&row.scenario) {
            scenarios.push(row.scenario);
        }
        if !servers.contains(&row.server) {
            servers.push(row.server);
        }
    }
    let max_ratio = rows
        .iter()
        .filter_map(|r| r.vs_nginx)
        .fold(1.0_f64, f64::max);
    // Headroom above the tallest bar for its label.
    let step = tick_step(max_ratio * 1.15);
    let y_max = ((max_ratio * 1.15) / step).ceil() * step;
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let base = TOP + plot_h;
    let y_of = |v: f64| base - v / y_max * plot_h;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="Helvetica, Arial, sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r##"<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="24" font-size="16" font-weight="bold" text-anchor="middle">Requests per server CPU-second, relative to nginx (higher is better)</text>"#,
        WIDTH / 2.0
    );

    // Legend, centred under the title.
    let item_w = 130.0;
    let legend_x = WIDTH / 2.0 - item_w * servers.len() as f64 / 2.0;
    for (i, server) in servers.iter().enumerate() {
        let x = legend_x + i as f64 * item_w;
        let _ = writeln!(
            s,
            r#"<rect class="legend" x="{x:.1}" y="38" width="12" height="12" fill="{}"/><text x="{:.1}" y="48">{}</text>"#,
            colour(*server),
            x + 17.0,
            escape(server.name())
        );
    }

    // Grid and y axis.
    let ticks = (y_max / step).round() as u32;
    for k in 0..=ticks {
        let tick = f64::from(k) * step;
        let y = y_of(tick);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#555">{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            format_tick(tick)
        );
    }
    let _ = writeln!(
        s,
        r##"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle" fill="#333">req/CPU-s ÷ nginx's</text>"##,
        TOP + plot_h / 2.0
    );

    // nginx = 1.0 reference, under the bars (it shows between them); the value labels
    // carry a white halo so that the line never runs through a number.
    let y1 = y_of(1.0);
    let _ = writeln!(
        s,
        r##"<line class="reference" x1="{LEFT}" y1="{y1:.1}" x2="{:.1}" y2="{y1:.1}" stroke="#333" stroke-dasharray="6 4"/>"##,
        WIDTH - RIGHT
    );

    // Bars.
    let group_w = plot_w / scenarios.len().max(1) as f64;
    let bar_w = group_w * 0.8 / servers.len().max(1) as f64;
    for (g, scenario) in scenarios.iter().enumerate() {
        let group_x = LEFT + g as f64 * group_w;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            group_x + group_w / 2.0,
            base + 20.0,
            escape(scenario.name())
        );
        for (i, server) in servers.iter().enumerate() {
            let Some(row) = rows
                .iter()
                .find(|r| r.scenario == *scenario && r.server == *server)
            else {
                continue;
            };
            let x = group_x + group_w * 0.1 + i as f64 * bar_w;
            let cx = x + bar_w * 0.45;
            match (&row.outcome, row.vs_nginx) {
                (Outcome::Measured(_), Some(ratio)) => {
                    let top = y_of(ratio);
                    let _ = writeln!(
                        s,
                        r##"<rect class="bar" x="{x:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} {}: {ratio:.3} x nginx</title></rect><text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="11" stroke="#ffffff" stroke-width="3" paint-order="stroke">{ratio:.2}</text>"##,
                        bar_w * 0.9,
                        base - top,
                        colour(*server),
                        escape(server.name()),
                        escape(scenario.name()),
                        top - 4.0
                    );
                }
                (outcome, _) => {
                    let (label, fill) = match outcome {
                        Outcome::NotSupported => ("n/s", "#888888"),
                        Outcome::Failed { .. } => ("fail", "#d62728"),
                        Outcome::Measured(_) => ("-", "#888888"), // no nginx baseline
                    };
                    let _ = writeln!(
                        s,
                        r#"<text class="marker" x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="11" fill="{fill}">{label}</text>"#,
                        base - 5.0
                    );
                }
            }
        }
    }

    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" y1="{base:.1}" x2="{:.1}" y2="{base:.1}" stroke="#333"/>"##,
        WIDTH - RIGHT
    );
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="{:.1}" font-size="11" fill="#555">dashed line: nginx = 1.0 · n/s: not supported yet · fail: did not verify or failed under load · -: no nginx baseline</text>"##,
        HEIGHT - 10.0
    );
    s.push_str("</svg>\n");
    s
}

fn format_tick(v: f64) -> String {
    let text = format!("{v:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::figures::tests::measured;
    use crate::harness::figures::{Stage, fill_ratios};

    fn rows() -> Vec<Row> {
        let mut rows = vec![
            measured(Server::Scb, Scenario::Respond, 950_000, 10.0),
            measured(Server::Nginx, Scenario::Respond, 1_000_000, 10.0),
            measured(Server::Caddy, Scenario::Respond, 400_000, 10.0),
            Row::new(Server::Scb, Scenario::StaticSmall, Outcome::NotSupported),
            measured(Server::Nginx, Scenario::StaticSmall, 800_000, 10.0),
            Row::new(
                Server::Caddy,
                Scenario::StaticSmall,
                Outcome::Failed {
                    stage: Stage::Verification,
                    message: "x".into(),
                },
            ),
        ];
        fill_ratios(&mut rows);
        rows
    }

    #[test]
    fn svg_is_well_formed_with_one_bar_per_measured_row() {
        let text = svg(&rows());
        assert!(text.starts_with("<svg"));
        let doc = roxmltree::Document::parse(&text).expect("well-formed XML");
        let bars = doc
            .descendants()
            .filter(|n| n.has_tag_name("rect") && n.attribute("class") == Some("bar"))
            .count();
        assert_eq!(bars, 4);
        let markers: Vec<&str> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("marker"))
            .filter_map(|n| n.text())
            .collect();
        assert_eq!(markers, ["n/s", "fail"]);
        assert_eq!(doc.root_element().attribute("width"), Some("900"));
        assert!(text.contains(">0.95<"), "value label on scb's bar");
        assert!(text.contains("nginx = 1.0"));
        let reference = doc
            .descendants()
            .find(|n| n.attribute("class") == Some("reference"))
            .unwrap();
        assert_eq!(reference.attribute("stroke-dasharray"), Some("6 4"));
    }

    #[test]
    fn bars_share_a_scale_and_one_colour_per_server() {
        let text = svg(&rows());
        let doc = roxmltree::Document::parse(&text).unwrap();
        let heights: Vec<(String, f64)> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("bar"))
            .map(|n| {
                (
                    n.attribute("fill").unwrap().to_owned(),
                    n.attribute("height").unwrap().parse().unwrap(),
                )
            })
            .collect();
        // scb 0.95, nginx 1.0, caddy 0.4, nginx 1.0.
        assert!((heights[0].1 / heights[1].1 - 0.95).abs() < 0.01);
        assert!((heights[2].1 / heights[1].1 - 0.4).abs() < 0.01);
        assert_eq!(heights[1].0, heights[3].0);
        assert_ne!(heights[0].0, heights[1].0);
    }

    #[test]
    fn ticks_are_round_numbers() {
        assert_eq!(tick_step(1.15), 0.2);
        assert_eq!(tick_step(3.0), 0.5);
        assert_eq!(format_tick(0.25), "0.25");
        assert_eq!(format_tick(1.0), "1");
    }
}
