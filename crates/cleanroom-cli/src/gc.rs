//! `cleanroom gc` and `cleanroom list`: human and JSON output over `cleanroom::reclaim`.
//!
//! Exit status: 0 when everything that was stale is gone (or nothing was), 1 when some removal
//! failed (the leftovers are named and the next gc retries them), 125 for cleanroom's own
//! failures (for example an unsafe state directory).

use std::io::IsTerminal;

use cleanroom::reclaim::{self, Budget, EntryState, GcOptions};
use cleanroom::{Error, Namespace};

use crate::Global;

/// Options of `cleanroom gc`.
#[derive(clap::Args, Debug)]
pub struct GcArgs {
    /// Show what would be removed; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// Also reclaim roots kept with --keep-root (their owner must still be dead).
    #[arg(long)]
    kept: bool,
}

/// Options of `cleanroom list`.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Show the disk usage of each entry (walks every tree).
    #[arg(long)]
    sizes: bool,
}

/// Opens the namespace, or `None` when it does not exist yet (nothing to do).
fn open(global: &Global) -> Result<Option<Namespace>, Error> {
    let path = global.namespace_path();
    match Namespace::open(&path) {
        Ok(ns) => Ok(Some(ns)),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reclaims stale roots.
pub fn gc_main(args: GcArgs, global: &Global) -> u8 {
    let ns = match open(global) {
        Ok(Some(ns)) => ns,
        Ok(None) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string(&reclaim::GcSummary::default()).expect("json")
                );
            } else {
                eprintln!(
                    "cleanroom: nothing to do: {} does not exist",
                    global.namespace_path().display()
                );
            }
            return 0;
        }
        Err(e) => return crate::fail(e),
    };
    let options = GcOptions {
        dry_run: args.dry_run,
        include_kept: args.kept,
        budget: Budget::UNLIMITED,
    };
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::hidden();
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} reclaiming stale roots: {pos}/{len} entries {wide_bar} {eta}",
            )
            .expect("template"),
        );
        bar
    });
    let mut progress = |done: usize, total: usize| {
        if let Some(bar) = &bar {
            if total >= 50 && bar.is_hidden() {
                bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            }
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        }
    };
    let summary = reclaim::gc(&ns, &options, &mut progress);
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary).expect("json"));
    } else {
        let verb = if summary.dry_run {
            "would remove"
        } else {
            "removed"
        };
        for name in &summary.removed_names {
            println!("{verb} {}", ns.path().join(name).display());
        }
        for process in &summary.killed {
            println!("killed orphan pid {}: {}", process.id.pid, process.command);
        }
        for error in &summary.errors {
            eprintln!("cleanroom: could not remove {error}");
        }
        println!(
            "scanned {}, {verb} {}, skipped live {}, kept {}, foreign {}, errors {}, truncated {}, freed {}",
            summary.scanned,
            summary.removed,
            summary.skipped_live,
            summary.kept,
            summary.foreign,
            summary.errors.len(),
            if summary.truncated { "yes" } else { "no" },
            human_bytes(summary.bytes_freed)
        );
    }
    if summary.errors.is_empty() {
        0
    } else {
        1
    }
}

/// Lists the namespace.
pub fn list_main(args: ListArgs, global: &Global) -> u8 {
    let ns = match open(global) {
        Ok(ns) => ns,
        Err(e) => return crate::fail(e),
    };
    let entries = ns
        .as_ref()
        .map(|ns| reclaim::list(ns, args.sizes))
        .unwrap_or_default();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&entries).expect("json"));
        return 0;
    }
    for e in &entries {
        let state = match e.state {
            EntryState::Live => "live",
            EntryState::Stale => "stale",
            EntryState::Kept => "kept",
            EntryState::Leftover => "leftover",
            EntryState::Locks => "locks",
            EntryState::Foreign => "foreign",
        };
        let pid = e
            .owner_pid
            .map(|p| p.to_string())
            .unwrap_or_else(|| "-".into());
        let age = e.age_secs.map(human_age).unwrap_or_else(|| "-".into());
        let size = e.size_bytes.map(human_bytes).unwrap_or_default();
        println!(
            "{state:<8} {pid:>7} {age:>6} {size:>9} {}  {}  ({})",
            e.name,
            e.command.join(" "),
            e.reason
        );
    }
    if let Some(ns) = &ns {
        match cleanroom::lock::list(ns) {
            Ok(locks) => {
                for lock in locks {
                    println!(
                        "lock     {}:{}  {}",
                        lock.record.scope,
                        lock.record.name,
                        lock.describe()
                    );
                }
            }
            Err(e) => eprintln!("cleanroom: cannot list locks: {e}"),
        }
    }
    0
}

fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn human_age(secs: u64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}
