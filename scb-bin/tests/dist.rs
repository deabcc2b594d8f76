//! What `dist/` ships works with this binary: the container's and Kubernetes' configs pass
//! `scb check`, Kubernetes waits long enough for a drain, and the systemd units verify.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

fn dist(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../dist")
        .join(file)
}

/// `config` with its document root pointed at an empty directory that exists here.
fn checkable(config: &str) -> String {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dist-www");
    std::fs::create_dir_all(&root).unwrap();
    config.replace("/srv/www", &root.display().to_string())
}

/// The `scb.toml` of the Kubernetes ConfigMap, unindented.
fn configmap_toml(yaml: &str) -> String {
    let start = yaml.find("scb.toml: |\n").expect("a scb.toml key") + "scb.toml: |\n".len();
    yaml[start..]
        .lines()
        .take_while(|l| !l.starts_with("---"))
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The seconds of a `key = "Ns"` line.
fn seconds(config: &str, key: &str) -> u64 {
    let line = config
        .lines()
        .find(|l| l.trim_start().starts_with(key))
        .unwrap_or_else(|| panic!("no {key} in\n{config}"));
    let value = line.split('"').nth(1).expect("a quoted duration");
    value.trim_end_matches('s').parse().expect("whole seconds")
}

#[test]
fn the_container_and_kubernetes_configs_pass_check() {
    let docker = std::fs::read_to_string(dist("docker/scb.toml")).unwrap();
    let yaml = std::fs::read_to_string(dist("kubernetes/scb.yaml")).unwrap();
    for (what, config) in [("docker", docker), ("kubernetes", configmap_toml(&yaml))] {
        let out = support::check(&checkable(&config));
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_kubernetes_fleet_config_passes_check_and_keeps_its_secrets_in_the_environment() {
    let yaml = std::fs::read_to_string(dist("kubernetes/fleet.yaml")).unwrap();
    let config = configmap_toml(&yaml);
    // The Redis password comes from the Secret through the environment, never the file.
    assert!(config.contains("redis://:${REDIS_PASSWORD}@"), "{config}");
    assert!(yaml.contains("--requirepass"));
    let key = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dist-tsig.key");
    std::fs::write(
        &key,
        "key \"scb\" {\n  algorithm hmac-sha256;\n  secret \"c2VjcmV0c2VjcmV0c2VjcmV0\";\n};\n",
    )
    .unwrap();
    let config = checkable(&config).replace("/etc/scb-secret/tsig.key", &key.display().to_string());
    let file = support::config_file(&config);
    let out = support::scb()
        .env("REDIS_PASSWORD", "not-the-real-one")
        .arg("check")
        .arg("--config")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn kubernetes_waits_for_the_drain_delay_and_the_grace_period() {
    let yaml = std::fs::read_to_string(dist("kubernetes/scb.yaml")).unwrap();
    let config = configmap_toml(&yaml);
    let needed = seconds(&config, "grace_period") + seconds(&config, "drain_delay");
    let termination: u64 = yaml
        .lines()
        .find_map(|l| l.trim().strip_prefix("terminationGracePeriodSeconds:"))
        .expect("terminationGracePeriodSeconds")
        .trim()
        .parse()
        .unwrap();
    assert!(
        termination > needed,
        "terminationGracePeriodSeconds {termination} must exceed grace_period + drain_delay {needed}"
    );
    // The probes ask the listener the config serves them on.
    assert!(yaml.contains("path: /readyz") && config.contains("[health]"));
}

#[test]
fn the_systemd_units_verify() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("SCB_REQUIRE_TOOLS").is_none(),
            "`systemd-analyze` is not on PATH, and SCB_REQUIRE_TOOLS says this test must run"
        );
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dist-units");
    std::fs::create_dir_all(&dir).unwrap();
    for unit in ["scb.service", "scb.socket"] {
        let text = std::fs::read_to_string(dist(&format!("systemd/{unit}"))).unwrap();
        // The binary as installed is not here; this one is.
        let text = text.replace("/usr/local/bin/scb", env!("CARGO_BIN_EXE_scb"));
        std::fs::write(dir.join(unit), text).unwrap();
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(dir.join("scb.socket"))
        .arg(dir.join("scb.service"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Unknown keys are only warnings: any output at all is a failure here.
    assert!(out.status.success() && stderr.trim().is_empty(), "{stderr}");
}
