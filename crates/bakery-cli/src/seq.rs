//! `bakery seq next` and `bakery seq show`.

use std::io::Write;
use std::sync::Arc;

use bakery::{IdBatch, Sequence, SequenceState, VersionedStore};

use crate::cli::{NextArgs, ShowArgs};
use crate::output::{self, CliError};

/// Reserve `--count` ids with ONE sequence handle and print them.
///
/// The block size defaults to the count, and prefetching is off: a
/// short-lived process must not reserve ids it will never print. With a
/// smaller `--block-size`, each write to the store reserves exactly one block.
pub async fn next(
    store: Arc<dyn VersionedStore>,
    args: &NextArgs,
    json: bool,
) -> Result<(), CliError> {
    let block = args.block_size.unwrap_or(args.count);
    let sequence = Sequence::builder(store, &args.name)
        .block_size(block)
        .prefetch(false)
        .build()?;
    let mut batches = Vec::new();
    let mut left = args.count;
    while left > 0 {
        let take = left.min(block);
        batches.push(sequence.next_batch(take).await?);
        left -= take;
    }
    // All awaiting is done: from here on, plain blocking writes to stdout.
    let mut out = output::stdout();
    let ids = batches.iter().flat_map(IdBatch::iter);
    write_ids(&mut out, sequence.name(), ids, json)?;
    out.flush()?;
    Ok(())
}

/// Write the ids one per line, or as `{"name":…,"ids":[…]}` (streamed, so
/// ten million ids never sit in memory as one string).
fn write_ids(
    out: &mut impl Write,
    name: &str,
    ids: impl Iterator<Item = u64>,
    json: bool,
) -> std::io::Result<()> {
    if json {
        out.write_all(b"{\"name\":")?;
        serde_json::to_writer(&mut *out, name)?;
        out.write_all(b",\"ids\":[")?;
        for (i, id) in ids.enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            write!(out, "{id}")?;
        }
        out.write_all(b"]}\n")
    } else {
        for id in ids {
            writeln!(out, "{id}")?;
        }
        Ok(())
    }
}

/// Print the stored state of a sequence; a missing one is an error (exit 1).
/// `store_uri` is only displayed, and must already be redacted.
pub async fn show(
    store: &dyn VersionedStore,
    store_uri: &str,
    args: &ShowArgs,
    json: bool,
) -> Result<(), CliError> {
    let state = output::found(Sequence::inspect(store, &args.name).await?, || {
        format!("sequence {} does not exist", args.name)
    })?;
    let value = output::json_if(json, || show_json(&args.name, &state))?;
    output::print(value, |out| {
        writeln!(out, "sequence    {}", args.name)?;
        writeln!(
            out,
            "next        {}  (first id not yet reserved)",
            state.next
        )?;
        writeln!(out, "node        {}  (last to reserve)", state.node)?;
        writeln!(out, "version     {}", state.version)?;
        writeln!(
            out,
            "block size  {}  (of the last reservation)",
            state.block_size
        )?;
        writeln!(out, "store       {store_uri}")
    })
}

/// The JSON form of `bakery seq show`: the state's own fields, plus `name`.
fn show_json(name: &str, state: &SequenceState) -> serde_json::Result<serde_json::Value> {
    let mut value = serde_json::to_value(state)?;
    if let Some(fields) = value.as_object_mut() {
        fields
            .entry("name")
            .or_insert_with(|| serde_json::Value::from(name));
    }
    Ok(value)
}
