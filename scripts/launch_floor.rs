//! The floor of a daemon's launch: what any daemon pays before it is ready,
//! with nothing of steadfast in it. It creates a private file in the
//! directory it is given, writes a byte and fsyncs it once, binds a
//! loopback listener, and prints `ready <port>`; then it waits until it is
//! killed. Built with the same release profile as the examples
//! (`cargo build --release --example launch_floor`), and launched beside
//! kvd, `minimal` and runsv by `scripts/ab_launch.py --floor`, so the README
//! can say how far steadfast's launch is from it.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;

fn main() -> std::io::Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .ok_or_else(|| std::io::Error::other("usage: launch_floor DIR"))?;
    std::fs::create_dir_all(&dir)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(std::path::Path::new(&dir).join("floor"))?;
    file.write_all(b"1")?;
    file.sync_all()?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready {port}")?;
    out.flush()?;
    drop(out);
    // Serve nothing; stay up until killed, as a daemon would.
    for stream in listener.incoming() {
        drop(stream);
    }
    Ok(())
}
