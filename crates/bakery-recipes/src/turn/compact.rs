//! The stored form of a turn recipe's queue: a waiter that repeats the one
//! before it in everything but its id (same owner, lease and mode: many
//! waiters of one process) is stored as its bare id, so with 64 such
//! waiters the row is a list of ids rather than of whole records (the
//! lock's row does the same). Queues written with whole waiters (before
//! this form) read as before; a binary older than this form refuses a row
//! with a bare id as corrupt and leaves it as it is.

use std::collections::VecDeque;

use serde::de::Error as _;
use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A queued waiter whose record may repeat the one before it.
pub(crate) trait Repeats: Sized {
    /// The request id, unique per acquisition.
    fn id(&self) -> &str;
    /// Is everything but the id equal to `previous`'s?
    fn repeats(&self, previous: &Self) -> bool;
    /// `previous`, with the request id `id`.
    fn again(previous: &Self, id: String) -> Self;
}

/// [`Repeats`] for a waiter struct with an `id` and the listed fields: a
/// waiter repeats the one before it when every listed field is equal.
macro_rules! turn_waiter {
    ($waiter:ident { $($field:ident),+ }) => {
        impl $crate::turn::compact::Repeats for $waiter {
            fn id(&self) -> &str {
                &self.id
            }

            fn repeats(&self, previous: &Self) -> bool {
                $(self.$field == previous.$field)&&+
            }

            fn again(previous: &Self, id: String) -> Self {
                $waiter {
                    id,
                    $($field: previous.$field.clone()),+
                }
            }
        }
    };
}
pub(crate) use turn_waiter;

/// A queue as the row stores it: each waiter that repeats its predecessor
/// as its bare id. (The states' own `Serialize` keeps every waiter whole,
/// for the people and programs that read it.)
pub(crate) struct Compact<'a, W>(pub(crate) &'a VecDeque<W>);

impl<W> Compact<'_, W> {
    /// Nothing queued: the field is left out of the row.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<W: Repeats + Serialize> Serialize for Compact<'_, W> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        let mut previous: Option<&W> = None;
        for waiter in self.0 {
            match previous {
                Some(previous) if waiter.repeats(previous) => seq.serialize_element(waiter.id())?,
                _ => seq.serialize_element(waiter)?,
            }
            previous = Some(waiter);
        }
        seq.end()
    }
}

/// Read a queue of whole waiters and bare ids; a bare id needs a waiter
/// before it to repeat.
pub(crate) fn deserialize<'de, W, D>(deserializer: D) -> Result<VecDeque<W>, D::Error>
where
    W: Repeats + Deserialize<'de>,
    D: Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Entry<W> {
        Id(String),
        Whole(W),
    }
    let entries = Vec::<Entry<W>>::deserialize(deserializer)?;
    let mut queue = VecDeque::with_capacity(entries.len());
    for entry in entries {
        let waiter = match (entry, queue.back()) {
            (Entry::Whole(waiter), _) => waiter,
            (Entry::Id(id), Some(previous)) => W::again(previous, id),
            (Entry::Id(id), None) => {
                return Err(D::Error::custom(format!(
                "the queue starts with the bare id {id:?}, which has no waiter before it to repeat"
            )))
            }
        };
        queue.push_back(waiter);
    }
    Ok(queue)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Waiter {
        id: String,
        owner: String,
    }

    turn_waiter!(Waiter { owner });

    #[derive(Debug, PartialEq, Deserialize)]
    struct Row {
        #[serde(deserialize_with = "super::deserialize")]
        queue: VecDeque<Waiter>,
    }

    impl Serialize for Row {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            #[derive(Serialize)]
            struct Stored<'a> {
                queue: Compact<'a, Waiter>,
            }
            Stored {
                queue: Compact(&self.queue),
            }
            .serialize(serializer)
        }
    }

    fn waiter(id: &str, owner: &str) -> Waiter {
        Waiter {
            id: id.into(),
            owner: owner.into(),
        }
    }

    #[test]
    fn a_waiter_repeating_the_one_before_it_is_its_bare_id() {
        let row = Row {
            queue: [
                waiter("a", "p1"),
                waiter("b", "p1"),
                waiter("c", "p1"),
                waiter("d", "p2"),
                waiter("e\"", "p2"),
                waiter("f", "p1"),
            ]
            .into(),
        };
        let stored = serde_json::to_string(&row).unwrap();
        assert_eq!(
            stored,
            r#"{"queue":[{"id":"a","owner":"p1"},"b","c",{"id":"d","owner":"p2"},"e\"",{"id":"f","owner":"p1"}]}"#
        );
        assert_eq!(serde_json::from_str::<Row>(&stored).unwrap(), row);
        // The whole form (rows written before this one) reads the same.
        let whole = r#"{"queue":[{"id":"a","owner":"p1"},{"id":"b","owner":"p1"},
            {"id":"c","owner":"p1"},{"id":"d","owner":"p2"},{"id":"e\"","owner":"p2"},
            {"id":"f","owner":"p1"}]}"#;
        assert_eq!(serde_json::from_str::<Row>(whole).unwrap(), row);
    }

    #[test]
    fn a_queue_the_form_cannot_describe_is_refused() {
        for bad in [
            r#"{"queue":["a"]}"#,
            r#"{"queue":["a",{"id":"b","owner":"p1"}]}"#,
            r#"{"queue":[{"id":"a","owner":"p1"},7]}"#,
            r#"{"queue":[{"id":"a","owner":"p1"},null]}"#,
            r#"{"queue":[{"id":"a","owner":"p1"},["b"]]}"#,
            r#"{"queue":[{"id":"a","owner":"p1","extra":1}]}"#,
            r#"{"queue":{"id":"a","owner":"p1"}}"#,
        ] {
            assert!(serde_json::from_str::<Row>(bad).is_err(), "{bad}");
        }
    }
}
