//! The standard source ([`TomlFileSource`]): defaults (embedded TOML or a
//! table), then the declared file, layered into one table; the file read,
//! parsed, and a parse error named by file, line and column.
use super::*;

/// Where the lowest tier comes from.
#[derive(Debug, Clone)]
enum Defaults {
    /// Embedded TOML text, parsed at each resolve.
    Text(String),
    /// An already-built table.
    Table(Table),
}

/// The declared file, and whether its absence is an error.
#[derive(Debug, Clone)]
struct Declared {
    /// The file's path, as the operator declared it.
    path: PathBuf,
    /// Whether a missing file fails the resolve (otherwise it is an empty tier).
    required: bool,
}

/// A [`ConfigSource`] over TOML: defaults < the declared file, merged
/// deeply (the supervisor's override tier goes on top). Hand it to the
/// supervisor's builder; its declared file is watched.
#[derive(Debug, Clone)]
pub struct TomlFileSource {
    /// The lowest tier.
    defaults: Defaults,
    /// The middle tier, if a file was declared.
    declared: Option<Declared>,
}

impl Default for TomlFileSource {
    fn default() -> Self {
        Self::new()
    }
}

impl TomlFileSource {
    /// A source with empty defaults and no declared file.
    pub fn new() -> Self {
        Self {
            defaults: Defaults::Table(Table::new()),
            declared: None,
        }
    }

    /// Uses `text` (typically `include_str!`) as the defaults tier. It is
    /// parsed at each resolve; a parse error names "the defaults".
    pub fn defaults_toml(mut self, text: impl Into<String>) -> Self {
        self.defaults = Defaults::Text(text.into());
        self
    }

    /// Uses `table` as the defaults tier.
    pub fn defaults(mut self, table: Table) -> Self {
        self.defaults = Defaults::Table(table);
        self
    }

    /// Declares the file at `path`, the middle tier, watched: a change to
    /// it is applied (or boots a held daemon) without a restart. While it
    /// is missing, resolving fails with [`ConfigError::Missing`], naming
    /// the path: the boot is held in `resolve_config` with that reason
    /// until the file appears (or an operator retries), never run on the
    /// defaults as if nothing had been declared. A file that may be absent
    /// is declared with [`Self::optional_file`].
    ///
    /// It is read through [`read_config_file`]: anything but a regular file
    /// of at most [`MAX_CONFIG_BYTES`] fails the resolve (a FIFO, a device,
    /// a directory, a socket, a bigger file), as any other unreadable file.
    ///
    /// ```
    /// # use steadfast_actors::config as steadfast; // the facade's path, as users write it
    /// use steadfast::TomlFileSource;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("app.toml");
    /// let source = TomlFileSource::new()
    ///     .defaults_toml("port = 7071")
    ///     .declared_file(&path);
    /// // Missing: an error naming the file, not the defaults.
    /// let error = source.resolve().unwrap_err();
    /// assert!(error.to_string().contains("app.toml"));
    /// std::fs::write(&path, "port = 8080")?;
    /// let resolved = source.resolve()?;
    /// assert_eq!(resolved.config["port"].as_integer(), Some(8080));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn declared_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.declared = Some(Declared {
            path: path.into(),
            required: true,
        });
        self
    }

    /// The same as [`Self::declared_file`]: a missing file fails the
    /// resolve with [`ConfigError::Missing`]. The name says it where a
    /// daemon's `--config FILE` flag builds the source.
    pub fn required_file(self, path: impl Into<PathBuf>) -> Self {
        self.declared_file(path)
    }

    /// Declares the file at `path` as optional: while it is missing it is
    /// an empty tier (the defaults and overrides apply), and once it
    /// appears it is read and watched like [`Self::declared_file`]'s. For a
    /// file the operator may or may not provide, such as a system-wide
    /// `/etc/app.toml`; anything else wrong with it (not a regular file,
    /// too big, not TOML) still fails the resolve.
    ///
    /// ```
    /// # use steadfast_actors::config as steadfast; // the facade's path, as users write it
    /// use steadfast::TomlFileSource;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let source = TomlFileSource::new()
    ///     .defaults_toml("port = 7071")
    ///     .optional_file(dir.path().join("absent.toml"));
    /// assert_eq!(source.resolve()?.config["port"].as_integer(), Some(7071));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn optional_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.declared = Some(Declared {
            path: path.into(),
            required: false,
        });
        self
    }

    /// The declared file, the one to watch.
    pub fn declared_path(&self) -> Option<&Path> {
        self.declared.as_ref().map(|d| d.path.as_path())
    }

    /// Resolves the effective config now: reads the declared file once,
    /// fingerprints the bytes it read, parses them, and merges the tiers.
    pub fn resolve(&self) -> Result<ResolvedConfig, ConfigError> {
        let mut config = match &self.defaults {
            Defaults::Text(text) => parse(text, None)?,
            Defaults::Table(table) => table.clone(),
        };
        let fingerprint = match &self.declared {
            None => None,
            Some(declared) => {
                let (file, fingerprint) = read_declared(declared)?;
                merge(&mut config, file);
                Some(fingerprint)
            }
        };
        Ok(ResolvedConfig {
            config,
            fingerprint,
        })
    }

    /// This source as the closure a supervisor resolves through (watching
    /// its declared file).
    pub fn into_source(self) -> ConfigSource {
        match self.declared_path().map(Path::to_path_buf) {
            Some(path) => ConfigSource::new(move || self.resolve()).watching(path),
            // Defaults only: parsed from memory, nothing to block on.
            None => ConfigSource::in_place(move || self.resolve()),
        }
    }
}

impl From<TomlFileSource> for ConfigSource {
    fn from(source: TomlFileSource) -> Self {
        source.into_source()
    }
}

/// Reads (through [`read_config_file`]), fingerprints and parses the
/// declared file.
fn read_declared(declared: &Declared) -> Result<(Table, Fingerprint), ConfigError> {
    let path = &declared.path;
    match read_config_file(path) {
        Ok(bytes) => {
            let fingerprint = Fingerprint::of_bytes(&bytes);
            let text = std::str::from_utf8(&bytes).map_err(|e| ConfigError::Parse {
                path: Some(path.clone()),
                message: format!("not utf-8: {e}"),
            })?;
            Ok((parse(text, Some(path))?, fingerprint))
        }
        Err(ConfigError::Missing { .. }) if !declared.required => Ok((
            Table::new(),
            Fingerprint::unreadable(io::ErrorKind::NotFound),
        )),
        Err(error) => Err(error),
    }
}

/// Parses `text` as a table; the error carries toml's line and column.
fn parse(text: &str, path: Option<&Path>) -> Result<Table, ConfigError> {
    toml::from_str::<Table>(text).map_err(|e| {
        let message = match e.span() {
            Some(span) => {
                let (line, column) = line_column(text, span.start);
                format!("line {line}, column {column}: {}", e.message().trim())
            }
            None => e.message().trim().to_owned(),
        };
        ConfigError::Parse {
            path: path.map(Path::to_path_buf),
            message,
        }
    })
}

/// The one-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}
