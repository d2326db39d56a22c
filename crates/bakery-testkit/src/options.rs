//! URI options every backend shares, checked the same way on each: a
//! backend's URI tests call these with a function that parses one URI with
//! that backend's own parser.

use bakery_core::durability::ACCEPT_DATA_LOSS;
use bakery_core::{ErrorKind, Result};

/// What a backend's parser made of a URI, for the shared option checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// The config's `accept_data_loss()`.
    pub accept_data_loss: bool,
    /// The config's `Display` (its redacted URI form), if it has one.
    pub shown: Option<String>,
}

/// Check the [`ACCEPT_DATA_LOSS`] option on one backend: absent means
/// `false`; `true`/`false` parse in any ASCII case; the option is shown
/// (and survives re-parsing what is shown) only when `true`; any other
/// value, and the option given twice, are [`ErrorKind::Config`] errors
/// naming it. `base` is a valid URI of the backend (with or without a
/// query); `parse` runs the backend's URI parser.
///
/// ```
/// use bakery_core::durability::parse_accept;
/// use bakery_core::{Error, Result};
/// use bakery_testkit::options::{accept_data_loss, Parsed};
///
/// // A toy parser standing in for a backend's `Config::from_uri`.
/// fn parse(uri: &str) -> Result<Parsed> {
///     let mut accept = None;
///     for pair in uri.split_once('?').map_or("", |(_, q)| q).split('&').filter(|p| !p.is_empty()) {
///         let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
///         if name == "accept_data_loss" && accept.replace(parse_accept("toy", value)?).is_some() {
///             return Err(Error::config("toy", "option `accept_data_loss` is given twice"));
///         }
///     }
///     let accept_data_loss = accept.unwrap_or(false);
///     let shown = Some(if accept_data_loss { "toy://h?accept_data_loss=true" } else { "toy://h" }.to_string());
///     Ok(Parsed { accept_data_loss, shown })
/// }
/// accept_data_loss("toy://h", parse);
/// ```
pub fn accept_data_loss(base: &str, parse: impl Fn(&str) -> Result<Parsed>) {
    let with = |option: &str| {
        let separator = if base.contains('?') { '&' } else { '?' };
        format!("{base}{separator}{option}")
    };
    let parsed = |uri: &str| parse(uri).unwrap_or_else(|e| panic!("{uri}: {e}"));

    let default = parsed(base);
    assert!(
        !default.accept_data_loss,
        "{base}: the default must be false"
    );
    if let Some(shown) = &default.shown {
        assert!(
            !shown.contains(ACCEPT_DATA_LOSS),
            "{base}: shown as {shown}"
        );
    }
    for (value, expected) in [
        ("true", true),
        ("TRUE", true),
        ("True", true),
        ("false", false),
        ("FALSE", false),
    ] {
        let uri = with(&format!("{ACCEPT_DATA_LOSS}={value}"));
        let config = parsed(&uri);
        assert_eq!(config.accept_data_loss, expected, "{uri}");
        if let Some(shown) = &config.shown {
            assert_eq!(
                shown.contains(&format!("{ACCEPT_DATA_LOSS}=true")),
                expected,
                "{uri}: shown as {shown}"
            );
            assert_eq!(
                parsed(shown).accept_data_loss,
                expected,
                "{uri}: re-parsing {shown}"
            );
        }
    }
    for (option, needle) in [
        (
            format!("{ACCEPT_DATA_LOSS}=yes"),
            format!("`{ACCEPT_DATA_LOSS}`"),
        ),
        (
            format!("{ACCEPT_DATA_LOSS}=1"),
            format!("`{ACCEPT_DATA_LOSS}`"),
        ),
        (
            format!("{ACCEPT_DATA_LOSS}="),
            format!("`{ACCEPT_DATA_LOSS}`"),
        ),
        (
            format!("{ACCEPT_DATA_LOSS}=true&{ACCEPT_DATA_LOSS}=false"),
            "given twice".to_string(),
        ),
    ] {
        let uri = with(&option);
        match parse(&uri) {
            Ok(config) => panic!("{uri} must be refused, parsed as {config:?}"),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Config, "{uri}: {e}");
                assert!(
                    e.to_string().contains(&needle),
                    "{uri}: {needle:?} missing from {e}"
                );
            }
        }
    }
}

/// Check the rules every backend's URI options share (they come from
/// [`bakery_core::options`], and this proves the backend's parser goes
/// through it): an unknown option is refused naming the known ones, an
/// option given twice or without a value is refused, a malformed escape is
/// refused, and every duration option in `durations` takes whole
/// milliseconds from 1 to one hour (`0`, `+5`, ` 5`, `1.5` and one hour
/// plus 1 ms refused). `base` is a valid URI of the backend (with or without
/// a query); `parse` runs the backend's URI parser.
///
/// ```
/// use bakery_testkit::options::shared_rules;
///
/// #[derive(serde::Deserialize)]
/// struct Toy {
///     #[serde(default, deserialize_with = "bakery_core::options::millis")]
///     timeout_ms: Option<std::time::Duration>,
/// }
/// shared_rules("toy://h", &["timeout_ms"], |uri| {
///     let query = uri.split_once('?').map(|(_, q)| q);
///     bakery_core::options::from_query::<Toy>("toy", query).map(|_| ())
/// });
/// ```
pub fn shared_rules(base: &str, durations: &[&str], parse: impl Fn(&str) -> Result<()>) {
    let with = |option: &str| {
        let separator = if base.contains('?') { '&' } else { '?' };
        format!("{base}{separator}{option}")
    };
    parse(base).unwrap_or_else(|e| panic!("{base}: {e}"));
    let refused = |option: &str, needle: &str| {
        let uri = with(option);
        match parse(&uri) {
            Ok(()) => panic!("{uri} must be refused"),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Config, "{uri}: {e}");
                assert!(
                    e.to_string().contains(needle),
                    "{uri}: {needle:?} missing from {e}"
                );
            }
        }
    };
    refused("no_such_option=1", "unknown");
    refused("no_such_option=1", "(known: ");
    refused("%zz=1", "percent-encoding");
    for name in durations {
        let uri = with(&format!("{name}=1"));
        parse(&uri).unwrap_or_else(|e| panic!("{uri}: {e}"));
        let uri = with(&format!("{name}=3600000"));
        parse(&uri).unwrap_or_else(|e| panic!("{uri}: {e}"));
        for value in ["0", "+5", "%205", "1.5", "-1", "3600001", "", "5s"] {
            refused(&format!("{name}={value}"), &format!("option `{name}`"));
        }
        refused(&format!("{name}=5&{name}=5"), "given twice");
        refused(name, "has no value");
    }
}

/// Check that `parse` refuses each URI of `cases` with a one-line
/// [`ErrorKind::Config`] error of `backend` whose message contains the
/// case's needle.
///
/// ```
/// use bakery_testkit::options::refused;
///
/// refused("demo", &[("demo://h?x", "`x` has no value")], |uri| {
///     let query = uri.split_once('?').map(|(_, q)| q);
///     bakery_core::options::UriOptions::parse("demo", query)
/// });
/// ```
pub fn refused<T: std::fmt::Debug>(
    backend: &str,
    cases: &[(&str, &str)],
    parse: impl Fn(&str) -> Result<T>,
) {
    for (uri, needle) in cases {
        let err = match parse(uri) {
            Ok(parsed) => panic!("{uri} must be refused, parsed as {parsed:?}"),
            Err(err) => err,
        };
        assert_eq!(err.kind(), ErrorKind::Config, "{uri}: {err}");
        assert_eq!(err.backend(), backend, "{uri}");
        assert!(
            err.message().contains(needle),
            "{uri}: {needle:?} missing from {err}"
        );
        assert!(!err.message().contains('\n'), "{uri}: {err}");
    }
}

/// Check that `parse` refuses `uri` with a one-line [`ErrorKind::Config`]
/// error of `backend` whose message contains every one of `needles`.
pub fn refused_naming<T: std::fmt::Debug>(
    backend: &str,
    uri: &str,
    needles: &[&str],
    parse: impl Fn(&str) -> Result<T>,
) {
    let cases: Vec<(&str, &str)> = needles.iter().map(|needle| (uri, *needle)).collect();
    refused(backend, &cases, parse);
}

/// Check that `parse` refuses each of `uris` with an [`ErrorKind::Config`]
/// error and that neither the error's `Display` nor its `Debug` shows
/// `secret` (a password in the URI) or the URI itself.
pub fn secret_never_shown<T: std::fmt::Debug>(
    secret: &str,
    uris: &[impl AsRef<str>],
    parse: impl Fn(&str) -> Result<T>,
) {
    for uri in uris {
        let uri = uri.as_ref();
        let err = match parse(uri) {
            Ok(parsed) => panic!("{uri} must be refused, parsed as {parsed:?}"),
            Err(err) => err,
        };
        assert_eq!(err.kind(), ErrorKind::Config, "{uri}: {err}");
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(secret), "{uri}: {shown}");
        assert!(!shown.contains(uri), "{uri}: {shown}");
    }
}

/// Check that each config `parse` makes of `uris` (each with a password
/// `secret`) hides it: its `Display`, `Debug` and alternate `Debug` each
/// show every one of `needles` (e.g. `***` and the user) and never
/// `secret`. Returns the parsed configs, for the backend's own checks.
pub fn secret_redacted<C: std::fmt::Display + std::fmt::Debug>(
    secret: &str,
    needles: &[&str],
    uris: &[impl AsRef<str>],
    parse: impl Fn(&str) -> Result<C>,
) -> Vec<C> {
    let mut configs = Vec::new();
    for uri in uris {
        let uri = uri.as_ref();
        let config = parse(uri).unwrap_or_else(|e| panic!("{uri}: {e}"));
        for text in [
            format!("{config}"),
            format!("{config:?}"),
            format!("{config:#?}"),
        ] {
            assert!(!text.contains(secret), "{uri}: {text}");
            for needle in needles {
                assert!(
                    text.contains(needle),
                    "{uri}: {needle:?} missing from {text}"
                );
            }
        }
        configs.push(config);
    }
    configs
}

/// Check that `validate` refuses each of `configs` (built with the
/// backend's builder, bypassing the URI parser) with an
/// [`ErrorKind::Config`] error.
pub fn invalid<C: std::fmt::Debug, T: std::fmt::Debug>(
    configs: impl IntoIterator<Item = C>,
    validate: impl Fn(&C) -> Result<T>,
) {
    for config in configs {
        match validate(&config) {
            Ok(valid) => panic!("{config:?} must be invalid, validated as {valid:?}"),
            Err(err) => assert_eq!(err.kind(), ErrorKind::Config, "{config:?}: {err}"),
        }
    }
}

/// Check a length limit of a name in the URI: `uri(longest)` parses and
/// `uri(longest + 1)` is refused with an [`ErrorKind::Config`] error.
pub fn longest<T: std::fmt::Debug>(
    longest: usize,
    uri: impl Fn(usize) -> String,
    parse: impl Fn(&str) -> Result<T>,
) {
    let fits = uri(longest);
    parse(&fits).unwrap_or_else(|e| panic!("{fits}: {e}"));
    let over = uri(longest + 1);
    match parse(&over) {
        Ok(parsed) => panic!("{over} must be refused, parsed as {parsed:?}"),
        Err(err) => assert_eq!(err.kind(), ErrorKind::Config, "{over}: {err}"),
    }
}

/// Check that a store's `connect` (or `open`) future fails with an
/// [`ErrorKind::Config`] error of `backend` on a bad URI or config — before
/// any network: the host it names need not exist.
pub async fn refused_before_network<S>(
    backend: &str,
    connect: impl std::future::Future<Output = Result<S>>,
) {
    match connect.await {
        Ok(_) => panic!("a bad {backend} config must be refused"),
        Err(err) => {
            assert_eq!(err.kind(), ErrorKind::Config, "{err}");
            assert_eq!(err.backend(), backend, "{err}");
        }
    }
}

/// One backend's URI parser and its table of refused URIs, described once
/// for the checks every backend shares: [`shared_rules`], [`refused`], the
/// length limits of its names and, where the backend has the option,
/// [`accept_data_loss`].
pub struct Shared<C> {
    /// The backend's name, as its errors give it.
    pub backend: &'static str,
    /// A valid URI of the backend (with or without a query).
    pub base: &'static str,
    /// Its duration options.
    pub durations: &'static [&'static str],
    /// The backend's URI parser.
    pub parse: fn(&str) -> Result<C>,
    /// The config's `accept_data_loss()`; `None` where the backend has no
    /// such option.
    pub accept_data_loss: Option<fn(&C) -> bool>,
    /// The config's redacted URI form, if it has one.
    pub shown: Option<fn(&C) -> String>,
    /// The config the builder makes of `base` with `accept_data_loss`
    /// set, if the URI option and the builder are to be compared.
    pub built: Option<fn(bool) -> C>,
    /// URIs the parser refuses, each with a piece of the error's message.
    pub refused: &'static [(&'static str, &'static str)],
    /// Names with a length limit: a URI whose `{}` stands for the name (of
    /// `x`s), and the longest length that parses (one more is refused).
    pub longest: &'static [(&'static str, usize)],
}

impl<C: std::fmt::Debug + PartialEq> Shared<C> {
    /// Run the shared checks.
    pub fn check(&self) {
        shared_rules(self.base, self.durations, |uri| {
            (self.parse)(uri).map(|_| ())
        });
        refused(self.backend, self.refused, self.parse);
        for (uri, most) in self.longest {
            longest(*most, |n| uri.replace("{}", &"x".repeat(n)), self.parse);
        }
        let Some(accept) = self.accept_data_loss else {
            return;
        };
        accept_data_loss(self.base, |uri| {
            let config = (self.parse)(uri)?;
            if let Some(built) = self.built {
                assert_eq!(
                    config,
                    built(accept(&config)),
                    "{uri}: the URI option and the builder agree"
                );
            }
            Ok(Parsed {
                accept_data_loss: accept(&config),
                shown: self.shown.map(|shown| shown(&config)),
            })
        });
    }
}

/// A backend's `#[test] fn shared_option_rules`: [`Shared::check`] on a
/// config type with the options of the backends that check durability —
/// `from_uri`, a redacted `Display`, `accept_data_loss` and the duration
/// options `timeout_ms` and `durability_recheck_ms` — named once with its
/// base URI, whose scheme is the backend's name. `built`, where given, is
/// [`Shared::built`].
///
/// ```text
/// bakery_testkit::shared_option_rules! {
///     /// The test's doc.
///     RedisConfig: "redis://h/0",
///     refused: REFUSED,
///     longest: &[("redis://h?prefix={}", 128)],
///     built: |accept| RedisConfig::new("h").with_accept_data_loss(accept),
/// }
/// ```
#[macro_export]
macro_rules! shared_option_rules {
    (
        $(#[$attr:meta])*
        $config:ident: $base:literal,
        refused: $refused:expr,
        longest: $longest:expr
        $(, built: $built:expr)?
        $(,)?
    ) => {
        $(#[$attr])*
        #[test]
        fn shared_option_rules() {
            $crate::options::Shared::<$config> {
                backend: match $base.split_once("://") {
                    Some((scheme, _)) => scheme,
                    None => $base,
                },
                base: $base,
                durations: &["timeout_ms", "durability_recheck_ms"],
                parse: $config::from_uri,
                accept_data_loss: Some($config::accept_data_loss),
                shown: Some(|config| config.to_string()),
                built: $crate::shared_option_rules!(@built $($built)?),
                refused: $refused,
                longest: $longest,
            }
            .check();
        }
    };
    (@built) => {
        None
    };
    (@built $built:expr) => {
        Some($built)
    };
}

/// A backend's TLS test server, as `scripts/backends.sh start <backend>`
/// runs it: its URI names it by `localhost`, the only name in its
/// certificate; `ca` is the PEM file of the CA that signed it, and
/// `other_ca` a second CA next to it that signed nothing (the wrong trust
/// anchor).
#[derive(Debug, Clone)]
pub struct TlsServer {
    /// `BAKERY_<BACKEND>_TLS_URI`.
    pub uri: String,
    /// `BAKERY_<BACKEND>_TLS_CA`.
    pub ca: String,
    /// `other-ca.pem` next to `ca`.
    pub other_ca: std::path::PathBuf,
}

/// The [`TlsServer`] of `backend` (e.g. `"postgres"`) that test `test`
/// needs, by the rule of [`crate::server_uri`] (which would name the
/// server `<backend>_tls`; the TLS server is `<backend>`'s own): when a
/// variable is unset the test fails under CI and returns elsewhere.
pub fn tls_server(backend: &str, test: &str) -> Option<TlsServer> {
    let upper = backend.to_uppercase();
    let (uri_var, ca_var) = (
        format!("BAKERY_{upper}_TLS_URI"),
        format!("BAKERY_{upper}_TLS_CA"),
    );
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let (Some(uri), Some(ca)) = (var(&uri_var), var(&ca_var)) else {
        let why = format!(
            "{uri_var} and {ca_var} are not both set; \
             `scripts/backends.sh start {backend}` exports them"
        );
        assert!(
            !crate::in_ci(),
            "{test}: {why}, and CI requires the TLS tests"
        );
        eprintln!("{test}: skipped: {why} (CI fails instead)");
        return None;
    };
    let other_ca = std::path::Path::new(&ca).with_file_name("other-ca.pem");
    assert!(
        other_ca.is_file(),
        "{test}: {} is missing: the second CA that scripts/backends.sh makes next to {ca}",
        other_ca.display()
    );
    Some(TlsServer { uri, ca, other_ca })
}

/// Check that connecting to `target` failed with `connected`'s error: an
/// [`ErrorKind::Config`] error whose message names TLS, the certificate
/// and `problem` (what the check found wrong with it).
pub fn certificate_refused<S>(target: &str, problem: &str, connected: Result<S>) {
    let Err(err) = connected else {
        panic!("{target} must be refused ({problem})");
    };
    eprintln!("{target}: {err}");
    assert_eq!(err.kind(), ErrorKind::Config, "{target}: {err}");
    let message = err.message();
    assert!(message.contains("TLS"), "{target}: {err}");
    assert!(message.contains("certificate"), "{target}: {err}");
    assert!(message.contains(problem), "{target}: {err}");
}

/// Check a write over TLS: `writer` creates the fresh key `key`, and
/// `reader` (the same store, or another on the same server) reads back the
/// row it wrote.
pub async fn written_over_tls(
    writer: &dyn bakery_core::VersionedStore,
    reader: &dyn bakery_core::VersionedStore,
    key: &str,
) {
    let key = bakery_core::Key::new(key).unwrap();
    let row = writer
        .put_if_version(&key, None, "over TLS".into())
        .await
        .unwrap()
        .applied()
        .expect("a fresh key is created");
    assert_eq!(reader.get(&key).await.unwrap(), Some(row));
}
