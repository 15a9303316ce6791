//! The packaging files checked against the code they configure:
//! the version line, the Debian package's configuration against
//! herald.example.toml, the unit's stop timeout against the worker's drain,
//! the image's environment against the configuration keys. The packages
//! and the image themselves are built and run by .ci/packaging.sh.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use herald::config::{Config, FlagOverrides};

fn repo(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

#[test]
fn version_names_the_git_commit() {
    let out = Command::new(env!("CARGO_BIN_EXE_herald")).arg("--version").output().unwrap();
    let line = String::from_utf8(out.stdout).unwrap();
    let expected_commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8(o.stdout).unwrap().trim().to_owned());
    let commit = expected_commit.unwrap_or_else(|| "unknown".into());
    assert_eq!(line.trim(), format!("herald {} (commit {commit})", env!("CARGO_PKG_VERSION")));
}

/// /etc/herald/herald.toml is herald.example.toml with the database and
/// data_dir in /var/lib/herald: a key added to the example reaches the
/// package, or this fails.
#[test]
fn the_packaged_configuration_is_the_example_with_system_paths() {
    let example = repo("herald.example.toml");
    let packaged = repo("deploy/debian/herald.toml");
    let body = example
        .replace(
            "\ndatabase_url = \"sqlite://herald.db\"\n",
            "\ndatabase_url = \"sqlite:///var/lib/herald/herald.db\"\n",
        )
        .replace("\ndata_dir = \".\"\n", "\ndata_dir = \"/var/lib/herald\"\n");
    assert_ne!(body, example, "the example's database_url and data_dir lines moved");
    let header_end = packaged.find("# herald.example.toml: every").expect("the example follows the header");
    assert_eq!(&packaged[header_end..], body, "deploy/debian/herald.toml: regenerate it from herald.example.toml");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("herald.toml");
    std::fs::write(&path, &packaged).unwrap();
    let c = Config::load(Some(&path), Vec::new(), &FlagOverrides::default()).unwrap();
    assert_eq!(c.database_url, "sqlite:///var/lib/herald/herald.db");
    assert_eq!(c.data_dir, Path::new("/var/lib/herald"));
}

fn unit_setting(unit: &str, key: &str) -> Vec<String> {
    unit.lines().filter_map(|l| l.strip_prefix(&format!("{key}="))).map(str::to_owned).collect()
}

/// systemd SIGKILLs what is still running at TimeoutStopSec; the worker's
/// drain on SIGTERM takes up to worker.shutdown_grace.
#[test]
fn the_unit_waits_longer_than_the_drain_and_migrates_first() {
    let unit = repo("deploy/debian/herald.service");
    let stop = humantime::parse_duration(&unit_setting(&unit, "TimeoutStopSec")[0]).unwrap();
    let grace = Config::default().worker.shutdown_grace;
    assert!(stop >= grace + Duration::from_secs(15), "TimeoutStopSec {stop:?} vs shutdown_grace {grace:?}");
    assert_eq!(unit_setting(&unit, "ExecStartPre"), ["/usr/bin/herald migrate"]);
    assert_eq!(unit_setting(&unit, "ExecStart"), ["/usr/bin/herald serve --no-migrate"]);
    assert!(unit_setting(&unit, "ExecReload").is_empty());
    for (key, value) in [
        ("User", "herald"),
        ("StateDirectory", "herald"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("CapabilityBoundingSet", ""),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
        ("EnvironmentFile", "-/etc/herald/herald.env"),
        ("Restart", "on-failure"),
    ] {
        assert!(unit_setting(&unit, key).iter().any(|v| v == value), "{key}={value} missing");
    }
    assert!(unit_setting(&unit, "SystemCallFilter").iter().any(|v| v == "@system-service"));
}

/// The image's ENV lines are settings Herald accepts, and put SQLite and
/// the secret in /data and the listener on every address.
#[test]
fn the_image_environment_is_valid_configuration() {
    let containerfile = repo("Containerfile");
    let start = containerfile.find("\nENV ").expect("an ENV instruction");
    let mut env = Vec::new();
    for line in containerfile[start + 5..].lines() {
        let line = line.trim().trim_end_matches('\\').trim();
        let (k, v) = line.split_once('=').expect("KEY=value");
        env.push((k.to_owned(), v.to_owned()));
        if !containerfile[start..].contains(&format!("{line} \\")) {
            break;
        }
    }
    let c = Config::load(None, env.clone(), &FlagOverrides::default()).unwrap();
    // SQLite and the secret land in the working directory, /data.
    assert_eq!(c.database_url, "sqlite://herald.db");
    assert_eq!(c.data_dir, Path::new("."));
    assert!(containerfile.contains("\nWORKDIR /data\n"));
    assert!(env.iter().all(|(k, _)| k != "HERALD_DATABASE_URL"), "a mounted herald.toml could not set it");
    assert_eq!(c.http.listen.to_string(), "0.0.0.0:8080");
    assert!(containerfile.contains("\nEXPOSE 8080\n") && containerfile.contains("\nUSER 65532:65532\n"));
    assert!(containerfile.contains("\nFROM scratch\n") && containerfile.contains("\nVOLUME /data\n"));
}

/// The configuration the Kubernetes Secret carries is one Herald accepts
/// (every line below `herald.toml: |`, four spaces in).
#[test]
fn the_kubernetes_secret_holds_valid_configuration() {
    let secret = repo("deploy/kubernetes/secret.yaml");
    let start = secret.find("herald.toml: |\n").expect("the herald.toml key") + "herald.toml: |\n".len();
    let toml: String = secret[start..]
        .lines()
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("herald.toml");
    std::fs::write(&path, toml).unwrap();
    let c = Config::load(Some(&path), Vec::new(), &FlagOverrides::default()).unwrap();
    assert!(c.database_url.starts_with("postgres://"));
    assert!(!c.migrate_on_start, "the init container migrates");
    let deployment = repo("deploy/kubernetes/deployment.yaml");
    let grace: u64 = deployment
        .lines()
        .find_map(|l| l.trim().strip_prefix("terminationGracePeriodSeconds: "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(Duration::from_secs(grace) >= c.worker.shutdown_grace + Duration::from_secs(15));
}
