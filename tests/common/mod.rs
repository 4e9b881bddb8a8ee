//! Shared by the integration tests that drive the binary.

use assert_cmd::Command;

/// The built `loaderlab`, with no `LOADERLAB_*` override leaking in from the environment.
pub fn loaderlab() -> Command {
    let mut cmd = Command::cargo_bin("loaderlab").unwrap();
    for (k, _) in std::env::vars() {
        if k.starts_with("LOADERLAB_") {
            cmd.env_remove(k);
        }
    }
    cmd
}
