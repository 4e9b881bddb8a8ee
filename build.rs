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
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        link_cudart_statically();
    }
}

/// candle-kernels asks for `-lcudart`. Putting a folder that holds only `libcudart.a` (a copy of
/// the toolkit's `libcudart_static.a`, made by scripts/setup-cuda-toolkit.sh) first on the search
/// path links the CUDA runtime statically, so the binary needs no libcudart.so where it runs.
fn link_cudart_statically() {
    println!("cargo:rerun-if-env-changed=CUDART_STATIC_DIR");
    let dir = std::env::var("CUDART_STATIC_DIR").unwrap_or_default();
    if dir.is_empty() || !std::path::Path::new(&dir).join("libcudart.a").is_file() {
        panic!(
            "a `cuda` build needs CUDART_STATIC_DIR pointing at a folder with libcudart.a: run \
             `bash scripts/setup-cuda-toolkit.sh && source .cuda/env.sh` first (README, \"CUDA\")"
        );
    }
    println!("cargo:rustc-link-search=native={dir}");
}
