//! `bakery migrate`: move PostgreSQL / MariaDB id generators onto a bakery
//! sequence in the store `--uri` names (plan, apply, hand back).

use std::io::Write;
use std::sync::Arc;

use bakery::VersionedStore;
use bakery_migrate::{Action, BackStep, Fence, Migrator, Options, Selection, Step};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use crate::output::{self, CliError};

/// Arguments of `bakery migrate`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("what").required(true).multiple(true).args(["all", "schema", "sequence"])))]
pub struct MigrateArgs {
    /// The database whose generators move: `postgres://user:pass@host/db`
    /// (sequences, serial and identity columns) or, when built with the
    /// `mariadb` feature, `mysql://…` (AUTO_INCREMENT tables, sequences).
    #[arg(
        long,
        value_name = "URI",
        env = "BAKERY_MIGRATE_FROM",
        hide_env_values = true
    )]
    pub from: String,

    /// Every generator in the source (in the --schema given, if any).
    #[arg(long)]
    pub all: bool,

    /// Only generators of this schema (PostgreSQL) or database (MariaDB).
    #[arg(long, value_name = "SCHEMA")]
    pub schema: Vec<String>,

    /// This generator, by qualified name (`public.orders_id_seq`,
    /// `shop.orders`); may be repeated.
    #[arg(long, value_name = "NAME")]
    pub sequence: Vec<String>,

    /// Name the bakery sequence of SOURCE differently (default: the
    /// source's qualified name); may be repeated.
    #[arg(long = "name", value_name = "SOURCE=TARGET", value_parser = parse_rename)]
    pub names: Vec<(String, String)>,

    /// Skip this many ids above the source's last one.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub margin: u64,

    /// Only show the plan; nothing is written (the default).
    #[arg(long, conflicts_with_all = ["apply", "rollback"])]
    pub dry_run: bool,

    /// Write: fence the source, read it, raise the bakery sequences.
    /// Without it, only the plan is shown (nothing is written).
    #[arg(long, conflicts_with = "rollback")]
    pub apply: bool,

    /// Fence the source so a forgotten writer fails instead of colliding
    /// (the default; accepted for clarity).
    #[arg(long, conflicts_with = "no_fence")]
    pub fence: bool,

    /// Do not fence: safe only when nothing writes to the source any more.
    #[arg(long)]
    pub no_fence: bool,

    /// Accept generators whose increment is not 1 (bakery's ids are
    /// consecutive above them).
    #[arg(long)]
    pub allow_increment: bool,

    /// Hand the generators back to the source: bakery stops reserving, the
    /// fence is lifted, the source continues above bakery's ids.
    #[arg(long)]
    pub rollback: bool,

    /// Generators handled at once (and source connections).
    #[arg(long, default_value_t = 8, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=256))]
    pub concurrency: u64,
}

fn parse_rename(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((source, target)) if !source.is_empty() && !target.is_empty() => {
            bakery::validate_name(target).map_err(|e| e.to_string())?;
            Ok((source.to_string(), target.to_string()))
        }
        _ => Err(format!("{text:?} is not SOURCE=TARGET")),
    }
}

/// Run `bakery migrate`; exits 1 unless every selected generator is safe.
pub async fn run(
    store: Arc<dyn VersionedStore>,
    args: &MigrateArgs,
    json: bool,
) -> Result<(), CliError> {
    let options = Options {
        margin: args.margin,
        fence: !args.no_fence,
        allow_increment: args.allow_increment,
        concurrency: usize::try_from(args.concurrency).unwrap_or(8),
        names: args.names.iter().cloned().collect(),
    };
    let selection = Selection {
        all: args.all,
        schemas: args.schema.clone(),
        names: args.sequence.clone(),
    };
    let shown = bakery::redact(&args.from);
    let migrator = Migrator::connect(&args.from, store, options)
        .await
        .map_err(|e| CliError::with_context(e, format!("source {shown}")))?;
    if args.rollback {
        let steps = migrator.back(&selection).await?;
        return print_back(&steps, json);
    }
    let steps = if args.apply {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let steps = migrator
            .apply(&selection, &|step: &Step, total: usize| {
                bar.set_length(total as u64);
                bar.set_message(step.source.clone());
                bar.inc(1);
            })
            .await?;
        bar.finish_and_clear();
        steps
    } else {
        migrator.plan(&selection).await?
    };
    print_steps(&steps, args.apply, json)?;
    let unsafe_count = steps.iter().filter(|s| !s.action.is_safe()).count();
    if unsafe_count > 0 {
        return Err(CliError::Message(format!(
            "{unsafe_count} of {} generators are not safe (see the table above)",
            steps.len()
        )));
    }
    Ok(())
}

fn print_steps(steps: &[Step], applied: bool, json: bool) -> Result<(), CliError> {
    let value = output::json_if(json, || serde_json::to_value(steps))?;
    output::print(value, |out| write_steps(out, steps, applied))
}

fn write_steps(out: &mut output::Out, steps: &[Step], applied: bool) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<28} {:<14} {:<26} {:>12} {:>12} {:<28} {:>12} {:<8} ACTION",
        "SOURCE", "KIND", "COLUMN", "NEXT VALUE", "MAX ID", "BAKERY SEQUENCE", "START", "FENCE"
    )?;
    for s in steps {
        let detail = match &s.action {
            Action::Raise { from } | Action::Reopen { from } => format!(" (from {from})"),
            Action::AlreadySafe { next } => format!(" (at {next})"),
            Action::Refused { reason } => format!(": {reason}"),
            Action::Failed { error } => format!(": {error}"),
            Action::Create => String::new(),
        };
        writeln!(
            out,
            "{:<28} {:<14} {:<26} {:>12} {:>12} {:<28} {:>12} {:<8} {}{detail}",
            s.source,
            s.origin.as_str(),
            s.column.as_deref().unwrap_or("-"),
            s.position,
            s.column_max.map_or("-".to_string(), |m| m.to_string()),
            s.target,
            s.start.map_or("-".to_string(), |v| v.to_string()),
            match s.fence {
                Fence::None => "no",
                Fence::Planned => "planned",
                Fence::Placed => "placed",
                Fence::AlreadyPlaced => "in place",
            },
            s.action.label(),
        )?;
    }
    let changed = steps
        .iter()
        .filter(|s| {
            matches!(
                s.action,
                Action::Create | Action::Raise { .. } | Action::Reopen { .. }
            )
        })
        .count();
    let safe = steps
        .iter()
        .filter(|s| matches!(s.action, Action::AlreadySafe { .. }))
        .count();
    let not_safe = steps.len() - changed - safe;
    if applied {
        writeln!(
            out,
            "{} generators: {changed} migrated, {safe} already safe (nothing written), {not_safe} not safe",
            steps.len()
        )?;
    } else {
        writeln!(
            out,
            "{} generators: {changed} to migrate, {safe} already safe, {not_safe} refused. \
             Nothing was written; run again with --apply.",
            steps.len()
        )?;
    }
    Ok(())
}

fn print_back(steps: &[BackStep], json: bool) -> Result<(), CliError> {
    let value = output::json_if(json, || serde_json::to_value(steps))?;
    output::print(value, |out| {
        writeln!(
            out,
            "{:<32} {:<32} {:>20} {:>20} CHANGED",
            "SOURCE", "BAKERY SEQUENCE", "BAKERY NEXT", "SOURCE NEXT"
        )?;
        for s in steps {
            writeln!(
                out,
                "{:<32} {:<32} {:>20} {:>20} {}",
                s.source,
                s.target,
                s.bakery_next.map_or("-".to_string(), |n| n.to_string()),
                s.source_next,
                if s.changed { "yes" } else { "no" }
            )?;
        }
        let changed = steps.iter().filter(|s| s.changed).count();
        writeln!(
            out,
            "{} generators handed back to the source ({changed} changed); bakery no longer reserves them",
            steps.len()
        )
    })
}
