//! Puts the git commit into `herald --version` (`herald 0.1.0 (commit
//! 1a2b3c4d5e6f)`): an operator with a binary, a package or an image in
//! front of them can tell which source it came from, which the version
//! alone does not say between releases.
//!
//! The names carry no `HERALD_` prefix: cargo hands a build script's
//! variables to `cargo test` and `cargo run` too, and Herald refuses any
//! `HERALD_*` variable that is not a setting.
//!
//! The commit comes from `GIT_COMMIT` when set (a build from a
//! tarball, where there is no `.git`), else from `git rev-parse`; with
//! neither the line says `commit unknown` rather than failing the build.
//! Rejected: the `vergen` or `built` crates, which pull in a git library
//! (or a dozen crates) for one `git rev-parse`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned()).filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=GIT_COMMIT");
    let commit = std::env::var("GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]));
    // Rebuild when HEAD moves: HEAD itself (a checkout), the branch it
    // points at (a commit) and packed-refs (a `git gc`). Paths from git,
    // since in a worktree `.git` is a file naming the real directory.
    // Only files that exist: cargo takes a missing one as changed on every
    // build, and would rebuild Herald each time (a repository without
    // packed-refs has none).
    let mut watch = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    watch.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for path in watch {
        if let Some(p) = git(&["rev-parse", "--git-path", &path]).filter(|p| std::path::Path::new(p).exists()) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let commit = commit.unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=VERSION_LINE={version} (commit {commit})");
}
