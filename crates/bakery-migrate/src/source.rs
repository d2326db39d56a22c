//! What every source database does: discovery, fence and hand-back.

use async_trait::async_trait;
use bakery_core::Result;

use crate::generator::Generator;

/// What a fence did: the last value the source can still hand out, or why
/// the generator cannot move (the fence is then not placed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fenced {
    /// Fenced; `generator` holds the numbers read under the fence.
    Done {
        generator: Generator,
        /// The last value the source can hand out from now on.
        top: i128,
        /// False if the fence was in place already.
        changed: bool,
    },
    /// Refused: nothing was changed.
    Refused(String),
}

/// Where [`Source::hand_back`] leaves a generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HandBack {
    /// Its next value is at least this (bakery's next), if bakery has one.
    pub next: Option<u64>,
    /// The fence is lifted back to this, if it is known.
    pub original_max: Option<i128>,
}

impl Fenced {
    /// Fenced at `top`: `generator`, read under the fence, with `top` as
    /// its fence top.
    pub(crate) fn at(mut generator: Generator, top: i128, changed: bool) -> Self {
        generator.fence_top = top;
        Fenced::Done {
            generator,
            top,
            changed,
        }
    }
}

/// One source database: discovery, fence, and hand-back.
#[async_trait]
pub(crate) trait Source: Send + Sync {
    /// Every generator in the database (or in `schemas`, if not empty).
    async fn discover(&self, schemas: &[String]) -> Result<Vec<Generator>>;

    /// Read `generator` again, without changing anything.
    async fn read(&self, generator: &Generator) -> Result<Generator>;

    /// Fence `generator` so it can hand out nothing above the returned top,
    /// reading its position under the fence (one transaction: a writer
    /// either got its value before, and the read sees it, or gets an error).
    async fn fence(&self, generator: &Generator, allow_increment: bool) -> Result<Fenced>;

    /// Lift the fence (back to `to.original_max`) and move the generator
    /// so its next value is at least `to.next`. Returns its next value.
    async fn hand_back(&self, generator: &Generator, to: HandBack) -> Result<i128>;
}

/// `name` quoted as an SQL identifier with `quote` (`"` or `` ` ``).
pub(crate) fn quote_ident(name: &str, quote: char) -> String {
    let doubled = name.replace(quote, &format!("{quote}{quote}"));
    format!("{quote}{doubled}{quote}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_and_passwords_hidden() {
        use bakery_core::uri::redact;
        // (core's redact, which the sources use in their messages)
        assert_eq!(quote_ident("a\"b", '"'), "\"a\"\"b\"");
        assert_eq!(quote_ident("t`x", '`'), "`t``x`");
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert!(!redact("not a uri:secret@h").contains("secret"));
    }
}
