//! Link `steadfastctl` the way a command line that runs for a few
//! milliseconds wants, on Linux with glibc, for this crate's binary only
//! (the library and every other binary are linked as usual):
//!
//! - its relative relocations packed (`-z pack-relative-relocs`, DT_RELR),
//!   so the loader reads a few KiB of table at each start instead of ~190
//!   KiB; only where the linker takes the flag (GNU ld >= 2.38 or lld) and
//!   glibc applies DT_RELR (from 2.36: the binary then names
//!   `GLIBC_ABI_DT_RELR`, so an older glibc refuses it at once with that
//!   name rather than misrunning it);
//! - the unwinder linked in (`libgcc_eh.a`, what `gcc -static-libgcc`
//!   does; the C library stays shared): no `libgcc_s.so.1` to find, map and
//!   relocate at each start, the largest part of what loading a shared
//!   library costs a short command (~0.15 ms of ~1.5 ms on a 2-core VM).
//!   Safe here: no Rust or C++ shared library is ever loaded into
//!   steadfastctl, so there is one unwinder in the process.
//!
//! Elsewhere the build is the ordinary one, and says why in a cargo warning.
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
    match static_unwinder() {
        Some(dir) => {
            println!("cargo:rustc-link-search=native={}", dir.display());
            println!("cargo:rustc-link-lib=static:+whole-archive=gcc_eh");
        }
        None => println!(
            "cargo:warning=no libgcc_eh.a beside the C compiler: steadfastctl loads libgcc_s.so.1 at each start"
        ),
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

/// The directory of the static unwinder (`libgcc_eh.a`) of the C compiler
/// rustc links with, if it has one. Linked whole, it defines every
/// `_Unwind_*` the standard library calls before the linker reaches
/// `-lgcc_s`, which `--as-needed` then leaves out.
fn static_unwinder() -> Option<PathBuf> {
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let output = Command::new(cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8(output.stdout).ok()?.trim());
    // A compiler without one prints the bare name back.
    if !output.status.success() || !path.is_absolute() || !path.is_file() {
        return None;
    }
    Some(path.parent()?.to_path_buf())
}
