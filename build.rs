//! Records how this binary was built, so a run can warn when its timings are not
//! representative (an unoptimised build) and the results can name the compiler.

fn main() {
    let opt = std::env::var("OPT_LEVEL").unwrap_or_else(|_| "?".into());
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "?".into());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=LLBUILD_OPT_LEVEL={opt}");
    println!("cargo:rustc-env=LLBUILD_PROFILE={profile}");
    println!("cargo:rustc-env=LLBUILD_RUSTC={version}");
    println!("cargo:rerun-if-changed=build.rs");
}
