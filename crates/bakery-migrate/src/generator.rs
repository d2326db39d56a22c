//! What a source generator is, and the decision for each one: where the
//! bakery sequence must start, or why it cannot move.

use serde::Serialize;

/// The kind of id generator found in the source database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// A PostgreSQL `SEQUENCE` no column owns.
    Sequence,
    /// A PostgreSQL sequence owned by a column (`serial`, `bigserial`,
    /// `OWNED BY`).
    Serial,
    /// A PostgreSQL `GENERATED … AS IDENTITY` column.
    Identity,
    /// A MariaDB table with an `AUTO_INCREMENT` column.
    AutoIncrement,
    /// A MariaDB `SEQUENCE` object.
    MariadbSequence,
}

impl Origin {
    /// A short lowercase label.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Sequence => "sequence",
            Origin::Serial => "serial",
            Origin::Identity => "identity",
            Origin::AutoIncrement => "auto_increment",
            Origin::MariadbSequence => "sequence",
        }
    }
}

/// One id generator as read from the source. Values are `i128` so that
/// every signed and unsigned 64-bit column fits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Generator {
    /// Its qualified name: `schema.sequence` (PostgreSQL), `database.table`
    /// or `database.sequence` (MariaDB).
    pub name: String,
    /// What kind of generator it is.
    pub origin: Origin,
    /// The `schema.table.column` it feeds, if known.
    pub column: Option<String>,
    /// Step between ids.
    pub increment: i64,
    /// Smallest value it may hand out.
    pub min: i128,
    /// Largest value it may hand out (its fence, once fenced).
    pub max: i128,
    /// True if it starts over at `min` after `max`.
    pub cycle: bool,
    /// Values each session (PostgreSQL) or the server (MariaDB) takes at once.
    pub cache: i64,
    /// The first value it would hand out next, values already cached by
    /// sessions counted as handed out.
    pub next_free: i128,
    /// The largest id in [`Generator::column`] (`None`: no column or no row).
    pub column_max: Option<i128>,
    /// The last value a fence would leave it able to hand out (a fence may
    /// burn a value or two: a sequence's `MAXVALUE` must stay above its
    /// `MINVALUE`).
    pub fence_top: i128,
    /// True if bakery's fence is in place.
    pub fenced: bool,
}

/// What happens (plan) or happened (apply) to one generator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// The bakery sequence does not exist: created at the start.
    Create,
    /// The bakery sequence is below the start: raised to it.
    Raise {
        /// Its first unreserved id before.
        from: u64,
    },
    /// The bakery sequence was handed back ([`crate::Migrator::back`]) and
    /// is opened again.
    Reopen {
        /// Its first unreserved id before.
        from: u64,
    },
    /// The bakery sequence is already at or above the start: nothing to write.
    AlreadySafe {
        /// Its first unreserved id.
        next: u64,
    },
    /// It cannot move safely; nothing was (or will be) written for it.
    Refused {
        /// Why, in words a user can act on.
        reason: String,
    },
    /// A call failed (`apply`); see the message. The steps already done
    /// (a fence) are safe to repeat: run again.
    Failed {
        /// The error, on one line.
        error: String,
    },
}

impl Action {
    /// True if, after this action, ids from bakery cannot collide with
    /// ids from the source.
    pub fn is_safe(&self) -> bool {
        !matches!(self, Action::Refused { .. } | Action::Failed { .. })
    }

    /// A short lowercase label (`create`, `raise`, …).
    pub fn label(&self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Raise { .. } => "raise",
            Action::Reopen { .. } => "reopen",
            Action::AlreadySafe { .. } => "already safe",
            Action::Refused { .. } => "refused",
            Action::Failed { .. } => "failed",
        }
    }
}

/// The state of the source's fence after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fence {
    /// Not fenced, and not asked to be.
    None,
    /// Will be fenced (plan).
    Planned,
    /// Fenced by this run.
    Placed,
    /// Was fenced already.
    AlreadyPlaced,
}

/// One row of a plan or of what `apply` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    /// The generator's qualified source name.
    pub source: String,
    /// Its kind.
    pub origin: Origin,
    /// The `schema.table.column` it feeds, if known.
    pub column: Option<String>,
    /// The first value the source would hand out next.
    #[serde(serialize_with = "as_string")]
    pub position: i128,
    /// The largest id in its column.
    #[serde(serialize_with = "as_opt_string")]
    pub column_max: Option<i128>,
    /// The bakery sequence name.
    pub target: String,
    /// The first id the bakery sequence hands out after this step
    /// (`None` if refused or failed before it was known).
    pub start: Option<u64>,
    /// The source's fence.
    pub fence: Fence,
    /// What happens to the bakery sequence.
    #[serde(flatten)]
    pub action: Action,
}

fn as_string<S: serde::Serializer>(v: &i128, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&v.to_string())
}

fn as_opt_string<S: serde::Serializer>(v: &Option<i128>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_str(&v.to_string()),
        None => s.serialize_none(),
    }
}

/// Why `generator` cannot move safely, if it cannot.
pub(crate) fn refusal(generator: &Generator, allow_increment: bool) -> Option<String> {
    let g = generator;
    if g.increment < 0 {
        return Some(format!(
            "descending (increment {}): bakery sequences only go up",
            g.increment
        ));
    }
    if g.cycle {
        return Some(
            "cycles (CYCLE): after its maximum it hands out old ids again; \
             make it NO CYCLE first"
                .into(),
        );
    }
    if g.increment != 1 && !allow_increment {
        return Some(format!(
            "increment {}: bakery hands out consecutive ids; pass --allow-increment \
             if ids need not keep that step (they stay unique, above every old id)",
            g.increment
        ));
    }
    if let Some(max) = g.column_max {
        if max >= g.next_free {
            return Some(format!(
                "column {} already holds id {max}, at or above the generator's next value {} \
                 (rows were inserted with explicit ids): the source collides on its own; \
                 move the generator above {max} first",
                g.column.as_deref().unwrap_or("?"),
                g.next_free
            ));
        }
    }
    None
}

/// The first id the bakery sequence must hand out: above the last value
/// the source can hand out (`top`), the column's largest id and `margin`.
pub(crate) fn start_above(top: i128, generator: &Generator, margin: u64) -> Result<u64, String> {
    let floor = generator.column_max.map_or(top, |max| max.max(top));
    let start = (floor + 1 + i128::from(margin)).max(1);
    u64::try_from(start).map_err(|_| {
        format!("the start {start} does not fit an unsigned 64-bit id (bakery's id type)")
    })
}

/// The error when a generator cannot take back ids up to `last` (bakery's
/// last reserved id) because it ends at `max`.
pub(crate) fn cannot_hand_back(name: &str, last: i128, max: i128) -> bakery_core::Error {
    bakery_core::Error::config(
        crate::BACKEND,
        format!("cannot hand {name} back: bakery reserved ids up to {last}, and it ends at {max}"),
    )
}

/// The action that brings the bakery sequence (`bakery`: its first
/// unreserved id and whether it is closed) to `start`.
pub(crate) fn action_for(start: u64, bakery: Option<(u64, bool)>) -> Action {
    match bakery {
        None => Action::Create,
        Some((next, true)) => Action::Reopen { from: next },
        Some((next, false)) if next >= start => Action::AlreadySafe { next },
        Some((next, false)) => Action::Raise { from: next },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generator() -> Generator {
        Generator {
            name: "public.orders_id_seq".into(),
            origin: Origin::Serial,
            column: Some("public.orders.id".into()),
            increment: 1,
            min: 1,
            max: i64::MAX.into(),
            cycle: false,
            cache: 1,
            next_free: 101,
            column_max: Some(100),
            fence_top: 100,
            fenced: false,
        }
    }

    #[test]
    fn refusals_name_the_reason() {
        assert_eq!(refusal(&generator(), false), None);
        type Change = fn(&mut Generator);
        let cases: [(Change, &str); 4] = [
            (|g| g.increment = -1, "descending"),
            (|g| g.cycle = true, "CYCLE"),
            (|g| g.increment = 5, "--allow-increment"),
            (|g| g.column_max = Some(101), "already holds id 101"),
        ];
        for (change, words) in cases {
            let mut g = generator();
            change(&mut g);
            let reason = refusal(&g, false).expect(words);
            assert!(reason.contains(words), "{reason}");
        }
        let mut g = generator();
        g.increment = 5;
        assert_eq!(refusal(&g, true), None, "an allowed increment");
    }

    #[test]
    fn start_is_above_top_column_and_margin() {
        let g = generator();
        assert_eq!(start_above(100, &g, 0), Ok(101));
        assert_eq!(start_above(100, &g, 1000), Ok(1101));
        assert_eq!(start_above(500, &g, 0), Ok(501));
        let mut empty = generator();
        empty.column_max = None;
        assert_eq!(
            start_above(-50, &empty, 0),
            Ok(1),
            "ids start at 1 at least"
        );
        assert_eq!(start_above(i64::MAX.into(), &empty, 0), Ok(1 << 63));
        let err = start_above(u64::MAX.into(), &empty, 0).unwrap_err();
        assert!(err.contains("does not fit"), "{err}");
    }

    #[test]
    fn actions_never_lower() {
        assert_eq!(action_for(10, None), Action::Create);
        assert_eq!(action_for(10, Some((5, false))), Action::Raise { from: 5 });
        assert_eq!(
            action_for(10, Some((10, false))),
            Action::AlreadySafe { next: 10 }
        );
        assert_eq!(
            action_for(10, Some((50, false))),
            Action::AlreadySafe { next: 50 }
        );
        assert_eq!(
            action_for(10, Some((50, true))),
            Action::Reopen { from: 50 }
        );
    }
}
