//! The load harness (scb against nginx, Caddy and axum + ServeDir) is issue 3's work.
//! Until it lands this binary only says so and fails, so that nothing mistakes it for a
//! benchmark that ran.

fn main() -> anyhow::Result<()> {
    anyhow::bail!("the bench harness is not built yet (issue 3)")
}
