//! Which daemon to call and how to reach it: the socket path (`--socket`,
//! `--data-dir`, `$STEADFAST_DATA_DIR`), `--timeout`, `--client-config`,
//! the TCP and TLS endpoints with their credentials, the dial itself
//! ([`connect`]), and the connection flags written back out as shell words
//! for a command `steadfastctl` prints for the operator to run.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use steadfast::control::auth::Token;
use steadfast::control::{ClientError, ControlClient, Endpoint, TlsClient};

use crate::cli::{Cli, Cmd, host_of, host_port};
use crate::{DATA_DIR_ENV, DEFAULT_TIMEOUT};

/// The control socket: `--socket`, else under `--data-dir`, else under
/// `$STEADFAST_DATA_DIR`, else under the current directory. A variable
/// that is set but empty (or not Unicode-safe to print) is a usage error,
/// not a silent fall back to the current directory.
pub fn socket_path(cli: &Cli) -> Result<PathBuf, String> {
    match &cli.socket {
        Some(socket) => Ok(socket.clone()),
        None => data_dir_of(cli).map(|dir| steadfast::control::socket_path(&dir)),
    }
}

/// The data dir: `--data-dir`, else `STEADFAST_DATA_DIR` (set but empty is
/// a usage error), else the working directory.
pub fn data_dir_of(cli: &Cli) -> Result<PathBuf, String> {
    match (&cli.data_dir, std::env::var_os(DATA_DIR_ENV)) {
        (Some(dir), _) => Ok(dir.clone()),
        (None, Some(dir)) if dir.is_empty() => Err(format!(
            "{DATA_DIR_ENV} is set but empty: unset it, or give it the daemon's data directory"
        )),
        (None, Some(dir)) => Ok(PathBuf::from(dir)),
        (None, None) => Ok(PathBuf::from(".")),
    }
}

/// `--timeout` as a duration (`DEFAULT_TIMEOUT` when not given), or why it
/// is not one.
pub fn timeout_of(cli: &Cli) -> Result<Duration, String> {
    let Some(secs) = cli.timeout else {
        return Ok(DEFAULT_TIMEOUT);
    };
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|t| !t.is_zero())
        .ok_or_else(|| format!("--timeout {secs}: give a positive number of seconds"))
}

/// Why `steadfastctl` could not reach a daemon.
pub enum Unreached {
    /// The command line (or the environment) does not name one usably.
    Usage(String),
    /// None answered (`true`: within the deadline, so it may be there).
    Connect(String, bool),
}

/// The text of a file the command line names (`--client-config`,
/// `--inventory`), read as the daemon reads its config file
/// (`steadfast::config::read_config_file`): opened `O_NONBLOCK` (a FIFO
/// does not hold the open), a regular file only, at most 1 MiB, so no path
/// makes `steadfastctl` hang or grow without bound. The error says why
/// (the caller names the file).
pub fn read_own_file(path: &std::path::Path) -> Result<String, String> {
    use steadfast::config::ConfigError;
    let bytes = steadfast::config::read_config_file(path).map_err(|error| match error {
        ConfigError::NotRegular { kind, .. } => {
            format!("it is a {kind}, not a regular file; give a regular file")
        }
        ConfigError::TooLarge { len, limit, .. } => format!(
            "it holds {len} bytes, over the {limit}-byte (1 MiB) limit; give a smaller file"
        ),
        ConfigError::Missing { .. } => "no such file".to_owned(),
        ConfigError::Read { source, .. } => source.to_string(),
        other => other.to_string(),
    })?;
    String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_owned())
}

/// `--client-config FILE`: the TLS flags, from a file; its relative paths
/// are the file's directory's ([`ClientConfig::read`]).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    tls: Option<String>,
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    token_file: Option<PathBuf>,
    server_name: Option<String>,
}

impl ClientConfig {
    /// Read `path`: TOML of the keys above, `tls` a `HOST:PORT`, and every
    /// relative path in it (`ca`, `cert`, `key`, `token_file`) taken from
    /// the file's directory, as `--inventory`'s are, so the file means the
    /// same from any working directory.
    pub fn read(path: &std::path::Path) -> Result<Self, String> {
        let text = read_own_file(path)?;
        let mut config: Self = toml::from_str(&text).map_err(|e| e.to_string())?;
        if let Some(tls) = &config.tls {
            host_port(tls).map_err(|e| format!("`tls`: {e}"))?;
        }
        let base = path.parent().unwrap_or_else(|| std::path::Path::new(""));
        for file in [
            &mut config.ca,
            &mut config.cert,
            &mut config.key,
            &mut config.token_file,
        ]
        .into_iter()
        .flatten()
        {
            if file.is_relative() {
                *file = base.join(&*file);
            }
        }
        Ok(config)
    }
}

/// The TLS endpoint `--tls` (or `--client-config`) names, flags winning
/// over the file, its host resolved within `timeout`; `None` when neither
/// asks for TLS.
pub async fn tls_endpoint(
    cli: &Cli,
    timeout: Duration,
) -> Result<Option<Vec<Endpoint>>, Unreached> {
    let file = match &cli.client_config {
        None => ClientConfig::default(),
        Some(path) => ClientConfig::read(path)
            .map_err(|e| Unreached::Usage(format!("--client-config {}: {e}", path.display())))?,
    };
    let Some(addr) = cli.tls.clone().or(file.tls) else {
        if cli.client_config.is_some() {
            return Err(Unreached::Usage(
                "--client-config names no `tls` address".to_owned(),
            ));
        }
        return Ok(None);
    };
    let pick = |flag: &Option<PathBuf>, from_file: Option<PathBuf>| flag.clone().or(from_file);
    let Some(ca) = pick(&cli.ca, file.ca) else {
        return Err(Unreached::Usage(
            "--tls needs --ca (the CA the daemon's certificate is signed by)".to_owned(),
        ));
    };
    let cert_and_key = match (pick(&cli.cert, file.cert), pick(&cli.key, file.key)) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => {
            return Err(Unreached::Usage("--cert and --key go together".to_owned()));
        }
    };
    let token_file = pick(&cli.token_file, file.token_file);
    if cert_and_key.is_none() && token_file.is_none() {
        return Err(Unreached::Usage(
            "--tls needs --cert and --key (mutual TLS) or --token-file".to_owned(),
        ));
    }
    let token = token_file
        .map(Token::read_file)
        .transpose()
        .map_err(|e| Unreached::Connect(e.to_string(), false))?;
    let tls = TlsClient::from_files(
        &ca,
        cert_and_key
            .as_ref()
            .map(|(cert, key)| (cert.as_path(), key.as_path())),
    )
    .map_err(|e| Unreached::Connect(e.to_string(), false))?;
    let server_name = cli
        .server_name
        .clone()
        .or(file.server_name)
        .unwrap_or_else(|| host_of(&addr).to_owned());
    let resolved = match tokio::time::timeout(timeout, tokio::net::lookup_host(addr.as_str())).await
    {
        Ok(Ok(addrs)) => {
            let mut unique: Vec<SocketAddr> = Vec::new();
            for addr in addrs {
                if !unique.contains(&addr) {
                    unique.push(addr);
                }
            }
            unique
        }
        Ok(Err(error)) => {
            return Err(Unreached::Connect(
                format!("--tls {addr}: cannot resolve {}: {error}", host_of(&addr)),
                false,
            ));
        }
        Err(_) => {
            return Err(Unreached::Connect(
                format!(
                    "--tls {addr}: {} did not resolve within {} s",
                    host_of(&addr),
                    timeout.as_secs_f64()
                ),
                true,
            ));
        }
    };
    if resolved.is_empty() {
        return Err(Unreached::Connect(
            format!("--tls {addr}: {} resolves to no address", host_of(&addr)),
            false,
        ));
    }
    Ok(Some(
        resolved
            .into_iter()
            .map(|resolved| Endpoint::Tls {
                addr: resolved,
                server_name: server_name.clone(),
                tls: tls.clone(),
                token: token.clone(),
            })
            .collect(),
    ))
}

/// Connect over TLS (`--tls` …), TCP (`--tcp`, `--token-file`) or the Unix
/// socket.
pub async fn connect(cli: &Cli) -> Result<ControlClient, Unreached> {
    let timeout = timeout_of(cli).map_err(Unreached::Usage)?;
    let tls = tls_endpoint(cli, timeout).await?;
    if tls.is_none()
        && cli.tcp.is_none()
        && (cli.token_file.is_some() || cli.ca.is_some() || cli.cert.is_some() || cli.key.is_some())
    {
        return Err(Unreached::Usage(
            "--token-file goes with --tcp or --tls; --ca, --cert and --key with --tls".to_owned(),
        ));
    }
    let endpoints = match (tls, cli.tcp, &cli.token_file) {
        (Some(tls), _, _) => tls,
        (None, Some(addr), Some(token_file)) => {
            let token = Token::read_file(token_file)
                .map_err(|e| Unreached::Connect(e.to_string(), false))?;
            vec![Endpoint::Tcp { addr, token }]
        }
        // clap requires both together; this is only a guard.
        (None, Some(_), None) => {
            return Err(Unreached::Usage("--tcp needs --token-file".to_owned()));
        }
        _ => vec![Endpoint::Unix(socket_path(cli).map_err(Unreached::Usage)?)],
    };
    // One call, one round trip: the request goes without waiting for the
    // Unix server's first byte (`ControlClient::connect_pipelined`; every
    // check of the socket and its listener is made before it). `journal`
    // dials as before: when no daemon serves it, it reads the file itself.
    // A TLS host name may resolve to several addresses (`localhost`: ::1
    // and 127.0.0.1): each is dialed in turn while the one before could not
    // be connected to at all (nothing was sent to it), as `ssh` does.
    let started = tokio::time::Instant::now();
    let mut first_error = None;
    for endpoint in endpoints {
        let left = timeout.saturating_sub(started.elapsed());
        let connected = if matches!(cli.command, Cmd::Journal { .. }) {
            ControlClient::connect_within(endpoint, left).await
        } else {
            ControlClient::connect_pipelined(endpoint, left).await
        };
        match connected {
            Ok(client) => return Ok(client),
            Err(error @ ClientError::Connect { .. }) if !error.is_deadline() => {
                first_error.get_or_insert(error);
            }
            Err(error) => {
                return Err(Unreached::Connect(error.to_string(), error.is_deadline()));
            }
        }
    }
    let error = first_error.map_or_else(|| "no address to dial".to_owned(), |e| e.to_string());
    Err(Unreached::Connect(error, false))
}

/// The flags that reach the daemon this invocation reached, as a shell
/// would take them back (`--data-dir DIR`, `--socket PATH`, or `--tcp ADDR
/// --token-file PATH`), so a printed command runs as written.
pub fn connection_flags(cli: &Cli) -> String {
    let mut flags = Vec::new();
    if let Some(dir) = &cli.data_dir {
        flags.extend(["--data-dir".to_owned(), shell_word(&dir.to_string_lossy())]);
    }
    if let Some(socket) = &cli.socket {
        flags.extend(["--socket".to_owned(), shell_word(&socket.to_string_lossy())]);
    }
    if let Some(tcp) = &cli.tcp {
        flags.extend(["--tcp".to_owned(), tcp.to_string()]);
    }
    if let Some(token) = &cli.token_file {
        flags.extend([
            "--token-file".to_owned(),
            shell_word(&token.to_string_lossy()),
        ]);
    }
    if let Some(tls) = &cli.tls {
        flags.extend(["--tls".to_owned(), shell_word(tls)]);
    }
    for (flag, path) in [
        ("--client-config", &cli.client_config),
        ("--ca", &cli.ca),
        ("--cert", &cli.cert),
        ("--key", &cli.key),
    ] {
        if let Some(path) = path {
            flags.extend([flag.to_owned(), shell_word(&path.to_string_lossy())]);
        }
    }
    if let Some(name) = &cli.server_name {
        flags.extend(["--server-name".to_owned(), shell_word(name)]);
    }
    flags.join(" ")
}

/// `word` as one shell word: as it is when it holds only characters no
/// shell treats specially, else in single quotes.
pub fn shell_word(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:=@%,".contains(c))
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}
