//! `dns = { rfc2136 = { ... }, ... }` of an `acme` table into scb-tls's DNS-01 settings,
//! the TSIG secret read now: a missing or malformed key fails the load (or the reload),
//! not an order hours later.

use std::net::{IpAddr, SocketAddr};

use scb_tls::acme::{Dns01, DnsTransport, Rfc2136, TsigAlgorithm, TsigKey};
use toml::Spanned;

use super::nonzero_duration;
use crate::config::{DnsConfig, Located};

/// The `dns` table; errors name keys relative to it.
pub(crate) fn dns01(config: &Spanned<DnsConfig>) -> Result<Dns01, Located> {
    let dns = config.get_ref();
    let rfc2136 = rfc2136(&dns.rfc2136).map_err(|e| e.within("rfc2136"))?;
    let mut settings = Dns01::new(rfc2136);
    if let Some(ttl) = &dns.ttl {
        settings = settings.ttl(*ttl.get_ref());
    }
    if let Some(timeout) = &dns.propagation_timeout {
        settings = settings.propagation_timeout(nonzero_duration(timeout, "propagation_timeout")?);
    }
    if let Some(interval) = &dns.propagation_interval {
        settings =
            settings.propagation_interval(nonzero_duration(interval, "propagation_interval")?);
    }
    if let Some(delay) = &dns.propagation_delay {
        settings = settings.propagation_delay(delay.get_ref().0);
    }
    if let Some(check) = &dns.check_nameservers {
        settings = settings.check_nameservers(*check.get_ref());
    }
    Ok(settings)
}

/// The `rfc2136` table; errors name keys relative to it.
fn rfc2136(config: &Spanned<crate::config::Rfc2136Config>) -> Result<Rfc2136, Located> {
    let c = config.get_ref();
    let text = c.server.get_ref();
    let server = text
        .parse::<SocketAddr>()
        .or_else(|_| text.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
        .map_err(|_| {
            Located::at(
                &c.server,
                "server",
                "expected an IP address and port, such as \"10.0.0.53:53\" (port 53 when left out)",
            )
        })?;
    let algorithm = c
        .tsig_algorithm
        .as_ref()
        .map(|a| {
            a.get_ref()
                .parse::<TsigAlgorithm>()
                .map_err(|e| Located::at(a, "tsig_algorithm", e))
        })
        .transpose()?;
    let key = TsigKey::from_file(
        c.tsig_key.get_ref(),
        algorithm,
        c.tsig_secret_file.get_ref(),
    )
    .map_err(|e| match e {
        scb_tls::acme::Dns01Error::Name { .. } => Located::at(&c.tsig_key, "tsig_key", e),
        e => Located::at(&c.tsig_secret_file, "tsig_secret_file", e),
    })?;
    let transport = match c.transport.as_ref().map(|t| (t, t.get_ref().as_str())) {
        None | Some((_, "udp")) => DnsTransport::Udp,
        Some((_, "tcp")) => DnsTransport::Tcp,
        Some((t, _)) => {
            return Err(Located::at(t, "transport", "expected \"udp\" or \"tcp\""));
        }
    };
    Rfc2136::new(server, c.zone.get_ref(), key)
        .map(|r| r.transport(transport))
        .map_err(|e| Located::at(&c.zone, "zone", e))
}
