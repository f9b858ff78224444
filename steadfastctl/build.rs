//! Link `steadfastctl` the way a command line that runs for a few
//! milliseconds wants: its relative relocations packed (`-z
//! pack-relative-relocs`, DT_RELR), so the loader reads a few KiB of table
//! at each start instead of ~190 KiB. For this crate's binary only (the
//! library and every other binary are linked as usual), and only where
//! the linker takes the flag: GNU ld >= 2.38 or lld, on Linux with glibc,
//! which applies DT_RELR from 2.36 (the binary then names
//! `GLIBC_ABI_DT_RELR`, so an older glibc refuses it at once with that
//! name rather than misrunning it). Elsewhere the build is the ordinary
//! one, and says why in a cargo warning.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os != "linux" || env != "gnu" {
        return;
    }
    let flag = "-Wl,-z,pack-relative-relocs";
    if links_with(flag) {
        println!("cargo:rustc-link-arg-bins={flag}");
    } else {
        println!(
            "cargo:warning=the linker does not take {flag}: steadfastctl's relocations are not packed (GNU ld >= 2.38 or lld does)"
        );
    }
}

/// Whether the C compiler driver rustc links with (`cc`, or `$CC`) links an
/// empty program with `flag`, and the result names `GLIBC_ABI_DT_RELR`
/// (the C library applies packed relocations).
fn links_with(flag: &str) -> bool {
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        return false;
    };
    let source = out.join("relr_probe.c");
    let binary = out.join("relr_probe");
    if std::fs::write(&source, "int main(void) { return 0; }\n").is_err() {
        return false;
    }
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let linked = Command::new(cc)
        .arg(flag)
        .arg("-o")
        .arg(&binary)
        .arg(&source)
        .output()
        .is_ok_and(|output| output.status.success());
    linked
        && std::fs::read(&binary)
            .is_ok_and(|bytes| bytes.windows(17).any(|w| w == b"GLIBC_ABI_DT_RELR"))
}
