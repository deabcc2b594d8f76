//! One row per server and scenario: what was measured (or why not), and the figures derived
//! from it, including the ratio to nginx.

use serde::Serialize;

use crate::harness::load::LoadResult;
use crate::harness::scenario::Scenario;
use crate::harness::server::Server;

/// Where a row failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Stage {
    /// Rendering the config, starting, or waiting for the port.
    Start,
    /// A URL did not answer 200 with the fixture's bytes.
    Verification,
    /// The load tool failed, or the server died under load.
    Load,
    /// The server could not be stopped cleanly (processes left behind).
    Stop,
}

impl Stage {
    fn label(self) -> &'static str {
        match self {
            Stage::Start => "to start",
            Stage::Verification => "verification",
            Stage::Load => "under load",
            Stage::Stop => "to stop",
        }
    }
}

/// The figures of a measured row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Figures {
    /// What the load tool saw.
    pub(crate) load: LoadResult,
    /// Server CPU-seconds (user + system, whole process tree) in the measured window.
    pub(crate) cpu_s: f64,
    /// The user-space part of `cpu_s`; the rest is the kernel's.
    pub(crate) user_cpu_s: f64,
    /// Peak RSS of the server's process tree, KiB (sum of `VmHWM`).
    pub(crate) peak_rss_kib: u64,
}

impl Figures {
    /// Responses per server CPU-second: the fairest figure when the client saturates.
    pub(crate) fn req_per_cpu_s(&self) -> Option<f64> {
        (self.cpu_s > 0.0).then(|| self.load.responses as f64 / self.cpu_s)
    }

    /// Server CPU-microseconds per response in user space: what the server's own code
    /// costs, where the kernel's share (system calls, the TCP stack) is the same for
    /// every server making the same system calls.
    pub(crate) fn user_us_per_req(&self) -> Option<f64> {
        self.us_per_req(self.user_cpu_s)
    }

    /// Server CPU-microseconds per response in the kernel.
    pub(crate) fn kernel_us_per_req(&self) -> Option<f64> {
        self.us_per_req((self.cpu_s - self.user_cpu_s).max(0.0))
    }

    fn us_per_req(&self, cpu_s: f64) -> Option<f64> {
        (self.load.responses > 0).then(|| cpu_s * 1e6 / self.load.responses as f64)
    }

    /// Peak RSS in MiB.
    pub(crate) fn peak_rss_mib(&self) -> f64 {
        self.peak_rss_kib as f64 / 1024.0
    }
}

/// What happened to a row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) enum Outcome {
    /// Measured.
    Measured(Figures),
    /// The server cannot serve this scenario yet (capability table).
    NotSupported,
    /// Something failed; nothing was (or can be trusted to have been) measured.
    Failed {
        /// Where.
        stage: Stage,
        /// What went wrong.
        message: String,
    },
}

/// One server in one scenario.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Row {
    /// The server.
    pub(crate) server: Server,
    /// The scenario.
    pub(crate) scenario: Scenario,
    /// What happened.
    pub(crate) outcome: Outcome,
    /// req/CPU-s relative to nginx's in the same scenario; set by [`fill_ratios`].
    pub(crate) vs_nginx: Option<f64>,
    /// The same relative to nginx-tuned's (nginx with its open-file cache).
    pub(crate) vs_nginx_tuned: Option<f64>,
    /// req/CPU-s of every round, in order, when there was more than one (`--rounds`); the
    /// outcome holds the median round's figures.
    pub(crate) rounds: Vec<f64>,
}

impl Row {
    /// A row without its ratio yet.
    pub(crate) fn new(server: Server, scenario: Scenario, outcome: Outcome) -> Row {
        Row {
            server,
            scenario,
            outcome,
            vs_nginx: None,
            vs_nginx_tuned: None,
            rounds: Vec::new(),
        }
    }

    /// The figures, if measured.
    pub(crate) fn figures(&self) -> Option<&Figures> {
        match &self.outcome {
            Outcome::Measured(figures) => Some(figures),
            _ => None,
        }
    }

    /// `measured`, `not-supported` or `failed`.
    pub(crate) fn status(&self) -> &'static str {
        match self.outcome {
            Outcome::Measured(_) => "measured",
            Outcome::NotSupported => "not-supported",
            Outcome::Failed { .. } => "failed",
        }
    }

    /// What makes this row a failure of the run: a failed stage, or a load that saw
    /// non-2xx responses or none at all (a benchmark of a wrong answer is worthless).
    pub(crate) fn problem(&self) -> Option<String> {
        match &self.outcome {
            Outcome::Failed { stage, message } => {
                Some(format!("FAILED {}: {message}", stage.label()))
            }
            Outcome::Measured(f) if f.load.responses == 0 => {
                Some("FAILED under load: no responses".to_owned())
            }
            Outcome::Measured(f) if f.load.non_2xx > 0 => Some(format!(
                "FAILED under load: {} non-2xx responses",
                f.load.non_2xx
            )),
            Outcome::Measured(_) | Outcome::NotSupported => None,
        }
    }

    /// A note worth printing that does not fail the run (transport errors).
    pub(crate) fn note(&self) -> Option<String> {
        let f = self.figures()?;
        (f.load.transport_errors > 0).then(|| {
            format!(
                "{} transport errors (connect/read/write/timeout)",
                f.load.transport_errors
            )
        })
    }
}

/// The round to show for a server measured `rounds.len()` times: the one with the median
/// req/CPU-s (the lower median for an even count), so the row's figures all come from one
/// real window rather than being mixed from several.
pub(crate) fn median_round(rounds: &[Figures]) -> Option<usize> {
    let mut order: Vec<usize> = (0..rounds.len()).collect();
    order.sort_by(|&a, &b| {
        let rate = |i: usize| rounds[i].req_per_cpu_s().unwrap_or(0.0);
        rate(a).total_cmp(&rate(b))
    });
    order.get(rounds.len().saturating_sub(1) / 2).copied()
}

/// The median of `values` (the mean of the middle two for an even count).
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// A 95% confidence interval for the median of the distribution `values` were drawn from,
/// with no assumption about its shape: the order statistics `k` places in from either end,
/// `k` the largest for which fewer than `k` of `n` fair coin flips come up heads with
/// probability at most 2.5% (the binomial sign-test interval; covers at least 95%). `None`
/// below six values, where even the extremes cover less.
///
/// Why: a run's median ratio says where the rounds sit, not how sure it is; with rounds
/// that scatter ±20% a median of 0.98 from six rounds and from thirty are different claims.
pub(crate) fn median_interval(values: &[f64]) -> Option<(f64, f64)> {
    let n = values.len();
    // P(B <= j) for B ~ Binomial(n, 1/2), summed term by term: C(n, i) / 2^n.
    let mut term = 0.5_f64.powi(i32::try_from(n).ok()?);
    let mut below = 0.0;
    let mut k = 0;
    for i in 0..n / 2 {
        below += term;
        if below > 0.025 {
            break;
        }
        k = i + 1;
        #[expect(clippy::cast_precision_loss, reason = "round counts are small")]
        let next = term * (n - i) as f64 / (i + 1) as f64;
        term = next;
    }
    if k == 0 {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some((sorted[k - 1], sorted[n - k]))
}

/// Sets each measured row's ratio of req/CPU-s to nginx's and to nginx-tuned's in the same
/// scenario (their own rows get 1.0). A row stays without a ratio when its baseline was not
/// measured in that scenario.
pub(crate) fn fill_ratios(rows: &mut [Row]) {
    let baseline = |rows: &[Row], server: Server| -> Vec<(Scenario, f64)> {
        rows.iter()
            .filter(|r| r.server == server)
            .filter_map(|r| Some((r.scenario, r.figures()?.req_per_cpu_s()?)))
            .filter(|(_, v)| *v > 0.0)
            .collect()
    };
    let nginx = baseline(rows, Server::Nginx);
    let tuned = baseline(rows, Server::NginxTuned);
    for row in rows.iter_mut() {
        let value = row.figures().and_then(Figures::req_per_cpu_s);
        let ratio = |bases: &[(Scenario, f64)]| {
            let base = bases.iter().find(|(s, _)| *s == row.scenario)?.1;
            Some(value? / base)
        };
        row.vs_nginx = ratio(&nginx);
        row.vs_nginx_tuned = ratio(&tuned);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::harness::load::Tool;

    /// A measured row with `responses` in 10 s and `cpu_s` CPU-seconds.
    pub(crate) fn measured(server: Server, scenario: Scenario, responses: u64, cpu_s: f64) -> Row {
        Row::new(
            server,
            scenario,
            Outcome::Measured(Figures {
                load: LoadResult {
                    tool: Tool::Wrk,
                    responses,
                    non_2xx: 0,
                    transport_errors: 0,
                    duration_s: 10.0,
                    mean_us: 1500.0,
                    p50_us: Some(1000.0),
                    p95_us: Some(2500.0),
                    p99_us: Some(4000.0),
                },
                cpu_s,
                user_cpu_s: cpu_s / 4.0,
                peak_rss_kib: 10 * 1024,
            }),
        )
    }

    #[test]
    fn the_median_interval_is_the_sign_test_one() {
        let values: Vec<f64> = (1..=12).rev().map(f64::from).collect();
        assert_eq!(median_interval(&values), Some((3.0, 10.0)));
        let six: Vec<f64> = (1..=6).map(f64::from).collect();
        assert_eq!(median_interval(&six), Some((1.0, 6.0)));
        assert_eq!(
            median_interval(&six[..5]),
            None,
            "five rounds cover 94% at best"
        );
        let thirty: Vec<f64> = (1..=30).map(f64::from).collect();
        assert_eq!(median_interval(&thirty), Some((10.0, 21.0)));
        assert_eq!(median_interval(&[]), None);
    }

    #[test]
    fn ratios_are_per_scenario_against_nginx() {
        let mut rows = vec![
            measured(Server::Scb, Scenario::Respond, 1_000_000, 10.0),
            measured(Server::Nginx, Scenario::Respond, 1_000_000, 8.0),
            measured(Server::Caddy, Scenario::Proxy, 100, 1.0),
            Row::new(Server::Scb, Scenario::Proxy, Outcome::NotSupported),
        ];
        fill_ratios(&mut rows);
        assert_eq!(rows[0].vs_nginx, Some(0.8));
        assert_eq!(rows[1].vs_nginx, Some(1.0));
        assert_eq!(rows[2].vs_nginx, None, "no nginx row in proxy");
        assert_eq!(rows[3].vs_nginx, None);
        assert!(
            rows.iter().all(|r| r.vs_nginx_tuned.is_none()),
            "no nginx-tuned rows"
        );
    }

    #[test]
    fn ratios_to_nginx_tuned_come_from_its_own_rows() {
        let mut rows = vec![
            measured(Server::Scb, Scenario::StaticSmall, 1_200_000, 10.0),
            measured(Server::Nginx, Scenario::StaticSmall, 600_000, 10.0),
            measured(Server::NginxTuned, Scenario::StaticSmall, 800_000, 10.0),
        ];
        fill_ratios(&mut rows);
        assert_eq!(rows[0].vs_nginx, Some(2.0));
        assert_eq!(rows[0].vs_nginx_tuned, Some(1.5));
        assert_eq!(rows[2].vs_nginx_tuned, Some(1.0));
    }

    #[test]
    fn non_2xx_under_load_is_a_problem_and_transport_errors_a_note() {
        let mut row = measured(Server::Caddy, Scenario::Respond, 100, 1.0);
        assert_eq!(row.problem(), None);
        if let Outcome::Measured(f) = &mut row.outcome {
            f.load.non_2xx = 3;
            f.load.transport_errors = 2;
        }
        assert_eq!(
            row.problem().unwrap(),
            "FAILED under load: 3 non-2xx responses"
        );
        assert!(row.note().unwrap().starts_with("2 transport errors"));
        let failed = Row::new(
            Server::Nginx,
            Scenario::Static1m,
            Outcome::Failed {
                stage: Stage::Verification,
                message: "GET /1m.bin: status 404".into(),
            },
        );
        assert_eq!(
            failed.problem().unwrap(),
            "FAILED verification: GET /1m.bin: status 404"
        );
    }

    #[test]
    fn zero_cpu_has_no_per_cpu_figure() {
        let row = measured(Server::Scb, Scenario::Respond, 100, 0.0);
        assert_eq!(row.figures().unwrap().req_per_cpu_s(), None);
    }

    #[test]
    fn the_median_round_is_one_real_round() {
        let figures = |cpu_s: f64| match measured(Server::Scb, Scenario::Proxy, 1000, cpu_s).outcome
        {
            Outcome::Measured(f) => f,
            _ => unreachable!(),
        };
        // req/CPU-s 100, 500, 200: the median is the third round.
        let rounds = [figures(10.0), figures(2.0), figures(5.0)];
        assert_eq!(median_round(&rounds), Some(2));
        // Even counts take the lower middle: 100, 200 of 100, 200, 500, 1000.
        let rounds = [figures(1.0), figures(10.0), figures(2.0), figures(5.0)];
        assert_eq!(median_round(&rounds), Some(3));
        assert_eq!(median_round(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
