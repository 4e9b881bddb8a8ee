//! The code's shape holds: no two files of `src/` import each other, directly or through
//! re-exports (`scripts/import-circles.py` walks every `use` and every `crate::`/`super::`
//! path, following `pub use` to the file that defines the name; a module and its own
//! submodules are one unit).

use std::process::Command;

#[test]
fn no_import_circle_in_src() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(root.join("scripts/import-circles.py"))
        .arg(root.join("src"))
        .output()
        .expect("python3 runs the import-circle check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.trim_end().ends_with("circles: 0"), "{text}");
}
