//! What every raw driver connection shares: how long it may take to open,
//! and bakery URIs turned into what a driver takes.

use std::time::Duration;

/// How long opening one connection may take.
#[cfg_attr(
    not(any(feature = "postgres", feature = "redis", feature = "etcd")),
    allow(dead_code)
)]
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// `uri` without the query options named in `bakery_options` (which the
/// driver would not understand). Like bakery's postgres URI parser (and
/// the driver), everything up to the first `@` is credentials, so a `?` in
/// a password is not taken for the start of the options.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn without_options(uri: &str, bakery_options: &[&str]) -> String {
    let authority_start = uri.find("://").map_or(0, |at| at + 3);
    let credentials_end = uri[authority_start..]
        .find('@')
        .map_or(authority_start, |at| authority_start + at + 1);
    let Some(query_start) = uri[credentials_end..]
        .find('?')
        .map(|at| credentials_end + at)
    else {
        return uri.to_string();
    };
    let kept: Vec<&str> = uri[query_start + 1..]
        .split('&')
        .filter(|pair| {
            let name = pair.split_once('=').map_or(*pair, |(name, _)| name);
            !pair.is_empty() && !bakery_options.contains(&name)
        })
        .collect();
    let base = &uri[..query_start];
    if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_only_bakery_options() {
        let opts = &["table", "pool_size"];
        assert_eq!(
            without_options("postgres://u@h/db", opts),
            "postgres://u@h/db"
        );
        assert_eq!(
            without_options("postgres://u@h/db?table=t&pool_size=4", opts),
            "postgres://u@h/db"
        );
        assert_eq!(
            without_options("postgres://u@h/db?table=t&application_name=x", opts),
            "postgres://u@h/db?application_name=x"
        );
        assert_eq!(
            without_options("postgres://u:p?ss@h/db?table=t", opts),
            "postgres://u:p?ss@h/db"
        );
    }
}
