//! The inventory: its TOML `[[daemon]]` entries read and checked whole
//! (a bad one refused naming the entry), and each entry's transport made a
//! client [`Endpoint`] ([`endpoint_of`]).

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use steadfast::control::auth::Token;
use steadfast::control::{Endpoint, TlsClient};

/// The keys an inventory entry may hold.
const KEYS: [&str; 9] = [
    "name",
    "data_dir",
    "socket",
    "tcp",
    "token_file",
    "tls",
    "ca",
    "cert",
    "key",
];

/// Where one daemon of the inventory is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Its data directory (the socket under it).
    DataDir(PathBuf),
    /// Its control socket.
    Socket(PathBuf),
    /// Its TCP control port and token file.
    Tcp {
        /// The address.
        addr: SocketAddr,
        /// The token file.
        token_file: PathBuf,
    },
    /// Its TLS control port, with the CA that signs the
    /// daemon's certificate and this client's certificate and key (or a
    /// token to present inside the session).
    Tls {
        /// `host:port` (the host is the name the certificate must carry).
        addr: String,
        /// The CA's certificate (PEM).
        ca: PathBuf,
        /// This client's certificate (PEM), with `key`.
        cert: Option<PathBuf>,
        /// This client's private key (PEM), with `cert`.
        key: Option<PathBuf>,
        /// A token to present inside the session instead of a certificate.
        token_file: Option<PathBuf>,
    },
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DataDir(dir) => write!(f, "{}", dir.display()),
            Self::Socket(path) => write!(f, "{}", path.display()),
            Self::Tcp { addr, .. } => write!(f, "tcp:{addr}"),
            Self::Tls { addr, .. } => write!(f, "tls:{addr}"),
        }
    }
}

impl Target {
    pub(super) const fn transport(&self) -> &'static str {
        match self {
            Self::DataDir(_) => "data_dir",
            Self::Socket(_) => "socket",
            Self::Tcp { .. } => "tcp",
            Self::Tls { .. } => "tls",
        }
    }
}

/// One daemon of the inventory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name (unique in the inventory; no whitespace or comma).
    pub name: String,
    /// Where it is.
    pub target: Target,
}

/// Why an inventory cannot be used. Nothing is sent to any daemon then.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InventoryError {
    /// The file cannot be read.
    #[error("cannot read the inventory {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: String,
    },
    /// The file is not TOML.
    #[error("the inventory {path} is not TOML: {error}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message (with the line).
        error: String,
    },
    /// The file's top level is not only `[[daemon]]` entries.
    #[error("the inventory {path}: {problem} (an inventory is `[[daemon]]` entries)")]
    Shape {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// One entry is wrong.
    #[error("the inventory {path}: daemon #{index} ({name}): {problem}")]
    Entry {
        /// The file.
        path: PathBuf,
        /// The entry's number, from 1.
        index: usize,
        /// Its name (quoted), or `no name`.
        name: String,
        /// What is wrong.
        problem: String,
    },
    /// Two entries share a name.
    #[error("the inventory {path}: daemons #{first} and #{index} are both named {name:?}")]
    Duplicate {
        /// The file.
        path: PathBuf,
        /// The first entry of that name.
        first: usize,
        /// The second.
        index: usize,
        /// The name.
        name: String,
    },
    /// `--only` names a daemon the inventory does not list.
    #[error("--only {name}: the inventory {path} lists no daemon of that name (it lists: {known})")]
    UnknownName {
        /// The file.
        path: PathBuf,
        /// The name given.
        name: String,
        /// The names it lists.
        known: String,
    },
}

/// Read and check the inventory at `path`.
///
/// # Errors
/// [`InventoryError`], naming the entry and the problem.
pub fn read_inventory(path: &Path) -> Result<Vec<Entry>, InventoryError> {
    let text = crate::connect::read_own_file(path).map_err(|error| InventoryError::Read {
        path: path.to_owned(),
        error,
    })?;
    let base = path.parent().unwrap_or_else(|| Path::new(""));
    parse_inventory(&text, path, base)
}

/// Parse inventory `text` (from `path`; relative paths are `base`'s).
///
/// # Errors
/// As [`read_inventory`].
pub fn parse_inventory(text: &str, path: &Path, base: &Path) -> Result<Vec<Entry>, InventoryError> {
    let shape = |problem: String| InventoryError::Shape {
        path: path.to_owned(),
        problem,
    };
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| InventoryError::Syntax {
            path: path.to_owned(),
            error: e.to_string().trim_end().to_owned(),
        })?;
    if let Some(key) = table.keys().find(|k| *k != "daemon") {
        return Err(shape(format!("unknown top-level key `{key}`")));
    }
    let daemons = match table.get("daemon") {
        None => return Err(shape("it lists no daemon".to_owned())),
        Some(toml::Value::Array(daemons)) => daemons,
        Some(_) => return Err(shape("`daemon` is not an array of tables".to_owned())),
    };
    if daemons.is_empty() {
        return Err(shape("it lists no daemon".to_owned()));
    }
    let mut entries = Vec::with_capacity(daemons.len());
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (i, daemon) in daemons.iter().enumerate() {
        let index = i + 1;
        let entry = parse_entry(daemon, base).map_err(|(name, problem)| InventoryError::Entry {
            path: path.to_owned(),
            index,
            name: name.map_or_else(|| "no name".to_owned(), |n| format!("{n:?}")),
            problem,
        })?;
        if let Some(&first) = seen.get(&entry.name) {
            return Err(InventoryError::Duplicate {
                path: path.to_owned(),
                first,
                index,
                name: entry.name,
            });
        }
        seen.insert(entry.name.clone(), index);
        entries.push(entry);
    }
    Ok(entries)
}

/// One `[[daemon]]` entry, or its name (if it has a usable one) and what is
/// wrong with it.
pub(super) fn parse_entry(
    value: &toml::Value,
    base: &Path,
) -> Result<Entry, (Option<String>, String)> {
    let Some(table) = value.as_table() else {
        return Err((None, "not a table (write it as `[[daemon]]`)".to_owned()));
    };
    let name = match table.get("name") {
        Some(toml::Value::String(name)) => Some(name.clone()),
        _ => None,
    };
    let fail = |problem: String| (name.clone(), problem);
    if let Some(key) = table.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(fail(format!(
            "unknown key `{key}` (an entry holds: {})",
            KEYS.join(", ")
        )));
    }
    let string = |key: &str| -> Result<Option<String>, (Option<String>, String)> {
        match table.get(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) if s.is_empty() => Err(fail(format!("`{key}` is empty"))),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(fail(format!(
                "`{key}` must be a string (found: {})",
                other.type_str()
            ))),
        }
    };
    let file = |key: &str| -> Result<Option<PathBuf>, (Option<String>, String)> {
        Ok(string(key)?.map(|s| base.join(s)))
    };
    let Some(name) = string("name")? else {
        return Err(fail("no `name`".to_owned()));
    };
    if name
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == ',')
    {
        return Err(fail(
            "`name` may not hold whitespace or a comma (`--only` takes names comma-separated)"
                .to_owned(),
        ));
    }
    let transports: Vec<&str> = ["data_dir", "socket", "tcp", "tls"]
        .into_iter()
        .filter(|k| table.contains_key(*k))
        .collect();
    let transport = match transports.as_slice() {
        [] => {
            return Err(fail(
                "no transport: give one of `data_dir`, `socket`, `tcp` (with `token_file`), `tls`"
                    .to_owned(),
            ));
        }
        [one] => *one,
        several => {
            return Err(fail(format!(
                "{} transports ({}): give exactly one",
                several.len(),
                several
                    .iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    };
    let only_with = |keys: &[&str], with: &str| -> Result<(), (Option<String>, String)> {
        match keys.iter().find(|k| table.contains_key(**k)) {
            Some(key) => Err(fail(format!(
                "`{key}` goes only with `{with}`, and this entry is `{transport}`"
            ))),
            None => Ok(()),
        }
    };
    let target = match transport {
        "data_dir" | "socket" => {
            only_with(&["token_file"], "tcp` or `tls")?;
            only_with(&["ca", "cert", "key"], "tls")?;
            let path = file(transport)?.unwrap_or_default();
            if transport == "data_dir" {
                Target::DataDir(path)
            } else {
                Target::Socket(path)
            }
        }
        "tcp" => {
            only_with(&["ca", "cert", "key"], "tls")?;
            let text = string("tcp")?.unwrap_or_default();
            let addr = text
                .parse::<SocketAddr>()
                .map_err(|e| fail(format!("`tcp = {text:?}` is not an IP:PORT address: {e}")))?;
            let Some(token_file) = file("token_file")? else {
                return Err(fail(
                    "`tcp` needs `token_file` (the daemon's token)".to_owned(),
                ));
            };
            Target::Tcp { addr, token_file }
        }
        _ => {
            let addr = string("tls")?.unwrap_or_default();
            match addr.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {}
                _ => {
                    return Err(fail(format!("`tls = {addr:?}` is not a HOST:PORT address")));
                }
            }
            let Some(ca) = file("ca")? else {
                return Err(fail(
                    "`tls` needs `ca` (the CA that signs the daemon's certificate)".to_owned(),
                ));
            };
            let (cert, key, token_file) = (file("cert")?, file("key")?, file("token_file")?);
            match (&cert, &key) {
                (Some(_), None) => return Err(fail("`cert` needs `key`".to_owned())),
                (None, Some(_)) => return Err(fail("`key` needs `cert`".to_owned())),
                (None, None) if token_file.is_none() => {
                    return Err(fail(
                        "`tls` needs `cert` and `key` (or a `token_file`) to authenticate"
                            .to_owned(),
                    ));
                }
                _ => {}
            }
            Target::Tls {
                addr,
                ca,
                cert,
                key,
                token_file,
            }
        }
    };
    Ok(Entry { name, target })
}

/// The one place an inventory transport becomes a client's [`Endpoint`]
/// (reading a token file, a TLS entry's CA, certificate and key on the
/// way). A `tls` entry's host is the name the daemon's certificate must
/// carry (an IP address, or a DNS name looked up here).
///
/// # Errors
/// Why this daemon cannot be called (a token or key file that cannot be
/// read or is too open, a certificate that does not parse, a host that
/// does not resolve).
pub async fn endpoint_of(target: &Target) -> Result<Endpoint, String> {
    match target {
        Target::DataDir(dir) => Ok(Endpoint::Unix(steadfast::control::socket_path(dir))),
        Target::Socket(path) => Ok(Endpoint::Unix(path.clone())),
        Target::Tcp { addr, token_file } => Token::read_file(token_file)
            .map(|token| Endpoint::Tcp { addr: *addr, token })
            .map_err(|e| e.to_string()),
        Target::Tls {
            addr,
            ca,
            cert,
            key,
            token_file,
        } => {
            let token = token_file
                .as_ref()
                .map(Token::read_file)
                .transpose()
                .map_err(|e| e.to_string())?;
            let cert_and_key = cert.as_deref().zip(key.as_deref());
            let tls = TlsClient::from_files(ca, cert_and_key).map_err(|e| e.to_string())?;
            let host = tls_host(addr);
            let resolved = tokio::net::lookup_host(addr.as_str())
                .await
                .map_err(|e| format!("cannot resolve {addr}: {e}"))?
                .next()
                .ok_or_else(|| format!("{addr} resolves to no address"))?;
            Ok(Endpoint::Tls {
                addr: resolved,
                server_name: host.to_owned(),
                tls,
                token,
            })
        }
    }
}

/// The host of a `host:port` (an IPv6 address without its brackets): the
/// name a daemon's certificate must carry.
pub(super) fn tls_host(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}
