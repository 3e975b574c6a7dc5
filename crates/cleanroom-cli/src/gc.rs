//! `cleanroom gc` and `cleanroom list`: human and JSON output over `cleanroom::reclaim`.
//!
//! JSON: `gc --json` prints a `cleanroom-gc` document, `list --json` a `cleanroom-list` one
//! (both version 1, described in `docs/removal.md`). Text: `list` has a header row and escapes
//! control characters in names, commands and reasons; `gc` names every killed process and every
//! entry that needs a person, then one summary line (each removed root too with `-v`).
//!
//! Exit status: 0 when everything that was stale is gone (or nothing was), 1 when some removal
//! failed (the leftovers are named and the next gc retries them), 125 for cleanroom's own
//! failures (for example an unsafe state directory).

use std::borrow::Cow;
use std::io::IsTerminal;

use cleanroom::exit::EXIT_GC_LEFTOVERS;
use cleanroom::reclaim::{self, Budget, GcOptions};
use cleanroom::text::escape_controls as escaped;
use cleanroom::{Error, Namespace};

use crate::Global;

/// Options of `cleanroom gc`.
#[derive(clap::Args, Debug)]
pub struct GcArgs {
    /// Show what would be removed and killed, and the space it would free; change nothing.
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
                    serde_json::to_string(&reclaim::GcSummary {
                        dry_run: args.dry_run,
                        ..reclaim::GcSummary::default()
                    })
                    .expect("json")
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
        print_summary(&ns, &summary, global.verbose > 0);
    }
    if summary.errors.is_empty() {
        0
    } else {
        EXIT_GC_LEFTOVERS
    }
}

/// What `gc` prints for people: every killed process, every entry that needs a person's
/// attention, the errors, and one summary line; each removed root only with `-v`.
fn print_summary(ns: &Namespace, summary: &reclaim::GcSummary, verbose: bool) {
    let (remove, kill, free) = if summary.dry_run {
        ("would remove", "would kill", "would free")
    } else {
        ("removed", "killed", "freed")
    };
    if verbose {
        for name in &summary.removed_names {
            println!(
                "{remove} {}",
                escaped(&ns.path().join(name).to_string_lossy())
            );
        }
    }
    for process in &summary.killed {
        println!(
            "{kill} orphan pid {}: {}",
            process.id.pid,
            escaped(&process.command)
        );
    }
    for locked in &summary.locked {
        println!(
            "left {}: its owner is gone, but a process outside the run holds its lock (see `cleanroom list`)",
            escaped(&ns.path().join(&locked.name).to_string_lossy())
        );
    }
    for name in &summary.unproven {
        println!(
            "left {}: named like a root, but its marker is damaged (see `cleanroom list`)",
            escaped(&ns.path().join(name).to_string_lossy())
        );
    }
    if !summary.locks_removed.is_empty() {
        if verbose {
            for name in &summary.locks_removed {
                println!(
                    "{remove} {}",
                    escaped(&ns.path().join(name).to_string_lossy())
                );
            }
        }
        println!(
            "{remove} {} entries of {} that were not lock state or belonged to no holder",
            summary.locks_removed.len(),
            escaped(
                &ns.path()
                    .join(cleanroom::namespace::LOCKS_DIR)
                    .to_string_lossy()
            )
        );
    }
    for error in &summary.errors {
        eprintln!("cleanroom: could not remove {}", escaped(error));
    }
    println!(
        "scanned {}: {remove} {}, live {}, kept {}, foreign {}, unproven {}, locked {}, errors {}{}; \
         {kill} {} process(es); {free} {}",
        summary.scanned,
        summary.removed,
        summary.skipped_live,
        summary.kept,
        summary.foreign,
        summary.unproven.len(),
        summary.locked.len(),
        summary.errors.len(),
        if summary.truncated { " (truncated)" } else { "" },
        summary.killed.len(),
        human_bytes(summary.bytes_freed)
    );
}

/// Lists the namespace.
pub fn list_main(args: ListArgs, global: &Global) -> u8 {
    let ns = match open(global) {
        Ok(ns) => ns,
        Err(e) => return crate::fail(e),
    };
    if ns.is_none() {
        // Not an error (nothing has run with it yet), but not a listing of something either.
        eprintln!(
            "cleanroom: {} does not exist: nothing has run with this state directory",
            global.namespace_path().display()
        );
    }
    let entries = ns
        .as_ref()
        .map(|ns| reclaim::list(ns, args.sizes))
        .unwrap_or_default();
    let locks = match ns.as_ref().map(cleanroom::lock::list).transpose() {
        Ok(locks) => locks.unwrap_or_default(),
        Err(e) => {
            eprintln!("cleanroom: cannot list locks: {e}");
            Vec::new()
        }
    };
    if args.json {
        let (state_dir, state_dir_bytes) =
            reclaim::lossless_name(global.namespace_path().as_os_str());
        let listing = reclaim::Listing {
            format: reclaim::LIST_FORMAT,
            version: reclaim::JSON_VERSION,
            state_dir,
            state_dir_bytes,
            entries,
            locks,
        };
        println!("{}", serde_json::to_string_pretty(&listing).expect("json"));
        return 0;
    }
    println!(
        "{:<8} {:>7} {:>6} {:>9} NAME  COMMAND  (REASON)",
        "STATE", "PID", "AGE", "SIZE"
    );
    for e in &entries {
        let pid = e
            .owner_pid
            .map(|p| p.to_string())
            .unwrap_or_else(|| "-".into());
        let age = e.age_secs.map(human_age).unwrap_or_else(|| "-".into());
        let size = e.size_bytes.map(human_bytes).unwrap_or_else(|| "-".into());
        println!(
            "{:<8} {pid:>7} {age:>6} {size:>9} {}  {}  ({})",
            e.state.as_str(),
            shell_word(e.raw_name.as_encoded_bytes()),
            escaped(&e.command.join(" ")),
            escaped(&e.reason)
        );
    }
    print_locks(&locks);
    0
}

/// A name as one shell word: as it is when it is plain printable text, else in `$'…'` quoting
/// (as `ls` shows it), where control characters and invalid UTF-8 are escaped.
fn shell_word(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.chars().any(|c| c.is_control() || c == '\'') && !text.is_empty() => {
            Cow::Borrowed(text)
        }
        _ => {
            let mut out = String::from("$'");
            for chunk in bytes.utf8_chunks() {
                for c in chunk.valid().chars() {
                    match c {
                        '\'' | '\\' => {
                            out.push('\\');
                            out.push(c);
                        }
                        '\n' => out.push_str("\\n"),
                        '\t' => out.push_str("\\t"),
                        c if c.is_control() => {
                            let mut buf = [0; 4];
                            for b in c.encode_utf8(&mut buf).bytes() {
                                out.push_str(&format!("\\x{b:02x}"));
                            }
                        }
                        c => out.push(c),
                    }
                }
                for b in chunk.invalid() {
                    out.push_str(&format!("\\x{b:02x}"));
                }
            }
            out.push('\'');
            Cow::Owned(out)
        }
    }
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

/// One line per exclusive lock, in `list`'s table.
fn print_locks(locks: &[cleanroom::lock::LockInfo]) {
    for lock in locks {
        println!(
            "{:<8} {:>7} {:>6} {:>9} {}:{}  {}",
            "lock",
            lock.record.owner.pid,
            "-",
            "-",
            lock.record.scope,
            escaped(&lock.record.name),
            escaped(&lock.describe())
        );
    }
}
