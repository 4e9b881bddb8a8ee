//! Records how this binary was built, so a run can warn when its timings are not
//! representative (an unoptimised build), and the results can name the compiler and the commit
//! the binary was built from (not whatever folder it later runs in).

use std::path::Path;
use std::process::Command;

fn main() {
    let opt = std::env::var("OPT_LEVEL").unwrap_or_else(|_| "?".into());
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "?".into());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = output(Command::new(rustc).arg("--version")).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=LLBUILD_OPT_LEVEL={opt}");
    println!("cargo:rustc-env=LLBUILD_PROFILE={profile}");
    println!("cargo:rustc-env=LLBUILD_RUSTC={version}");
    println!("cargo:rerun-if-changed=build.rs");
    stamp_git_commit();
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        link_cudart_statically();
        build_kernels();
    }
}

fn output(cmd: &mut Command) -> Option<String> {
    cmd.output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
}

/// The commit of the checkout being built and whether its tracked files differ from it. Rerun
/// when HEAD moves (a commit, a checkout), the index changes or a source file changes.
fn stamp_git_commit() {
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let git = |args: &[&str]| output(Command::new("git").arg("-C").arg(&root).args(args));
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_default();
    let dirty = !commit.is_empty()
        && git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    println!("cargo:rustc-env=LLBUILD_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=LLBUILD_GIT_DIRTY={dirty}");
    if let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let git_dir = Path::new(&git_dir);
        for watched in ["HEAD", "index"] {
            println!("cargo:rerun-if-changed={}", git_dir.join(watched).display());
        }
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={}", git_dir.join(branch).display());
        }
        for tracked in ["src", "Cargo.toml", "Cargo.lock"] {
            println!("cargo:rerun-if-changed={root}/{tracked}");
        }
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
             `bash scripts/setup-cuda-toolkit.sh` and `source .cuda/env.sh` first (README, \"CUDA\")"
        );
    }
    println!("cargo:rustc-link-search=native={dir}");
}

/// loaderlab's own CUDA kernels (`src/train/cuda/kernels/*.cu`), built like candle's: nvcc to PTX
/// for `compute_$CUDA_COMPUTE_CAP` without fused multiply-adds (the driver compiles it for the GPU at load time), then
/// assembled by ptxas for `sm_$CUDA_COMPUTE_CAP` as a check, so a kernel that does not assemble
/// fails the build (and CI's CUDA clippy) rather than the first lent GPU. The PTX lands in
/// OUT_DIR and is embedded with `include_str!`.
fn build_kernels() {
    let root = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "90".into());
    println!("cargo:rerun-if-env-changed=CUDA_COMPUTE_CAP");
    let tool = |name: &str| match std::env::var("CUDA_HOME") {
        Ok(home) => Path::new(&home).join("bin").join(name),
        Err(_) => name.into(),
    };
    let dir = Path::new(&root).join("src/train/cuda/kernels");
    let mut sources: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cu"))
        .collect();
    sources.sort();
    for cu in sources {
        println!("cargo:rerun-if-changed={}", cu.display());
        let stem = cu.file_stem().unwrap().to_string_lossy().to_string();
        let ptx = Path::new(&out).join(format!("{stem}.ptx"));
        let run = |cmd: &mut Command| {
            let shown = format!("{cmd:?}");
            match cmd.status() {
                Ok(s) if s.success() => {}
                Ok(s) => panic!("{shown} failed ({s})"),
                Err(e) => panic!(
                    "{shown}: {e} (a `cuda` build needs nvcc and ptxas: `source .cuda/env.sh`)"
                ),
            }
        };
        run(Command::new(tool("nvcc"))
            .args(["--ptx", "-O3", "--std=c++17", "--fmad=false"])
            .arg(format!("--gpu-architecture=compute_{cap}"))
            .arg("-o")
            .arg(&ptx)
            .arg(&cu));
        run(Command::new(tool("ptxas"))
            .arg(format!("--gpu-name=sm_{cap}"))
            .arg("-o")
            .arg(Path::new(&out).join(format!("{stem}.cubin")))
            .arg(&ptx));
    }
}
