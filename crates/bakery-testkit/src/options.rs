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
