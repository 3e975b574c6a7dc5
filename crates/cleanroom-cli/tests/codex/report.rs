//! What one run of the interop scenario found: its checked steps, and the recording proxy's
//! log (which exec-server methods the real client called and what the server answered),
//! printed as the report the tests show and optionally dumped as JSON lines.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use super::exec_server::Target;
use super::proxy::{Answer, Exchange, Passed};

/// One checked step of the scenario.
pub struct Step {
    pub name: &'static str,
    pub outcome: Result<(), String>,
}

/// What one run of the scenario found.
pub struct Report {
    pub target: Target,
    pub steps: Vec<Step>,
    pub exchanges: Vec<Exchange>,
    pub notifications: BTreeMap<String, usize>,
    pub closes: Vec<String>,
    pub notes: Vec<String>,
}

impl Report {
    /// The names of the steps that failed.
    pub fn failing(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.steps
            .iter()
            .filter(|s| s.outcome.is_err())
            .map(|s| s.name)
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "== Codex client against {}", self.target.name())?;
        for step in &self.steps {
            match &step.outcome {
                Ok(()) => writeln!(f, "  pass  {}", step.name)?,
                Err(why) => writeln!(f, "  FAIL  {}: {why}", step.name)?,
            }
        }
        writeln!(
            f,
            "-- exec-server methods the client called (answer: count | answered in: median, max)"
        )?;
        for (method, answers) in method_table(&self.exchanges) {
            writeln!(f, "  {method}: {answers}")?;
        }
        writeln!(f, "-- notifications: {:?}", self.notifications)?;
        writeln!(f, "-- close frames: {:?}", self.closes)?;
        for note in &self.notes {
            writeln!(f, "-- {note}")?;
        }
        Ok(())
    }
}

/// Per method, in first-use order: "ok ×N" and each distinct error "CODE message ×N", then how
/// long the server took to answer (median and max).
fn method_table(exchanges: &[Exchange]) -> Vec<(String, String)> {
    let mut table: Vec<(String, Vec<(String, usize)>)> = Vec::new();
    let mut took: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    for exchange in exchanges {
        let answer = match &exchange.answer {
            Answer::Result(_) => "ok".to_string(),
            Answer::Error { code, message } => format!("{code} {}", shorten(message, 160)),
            Answer::None => "no answer".to_string(),
        };
        let row = match table.iter().position(|(m, _)| *m == exchange.method) {
            Some(i) => &mut table[i].1,
            None => {
                table.push((exchange.method.clone(), Vec::new()));
                &mut table.last_mut().unwrap().1
            }
        };
        match row.iter_mut().find(|(a, _)| *a == answer) {
            Some((_, n)) => *n += 1,
            None => row.push((answer, 1)),
        }
        if let Some(t) = exchange.took {
            took.entry(&exchange.method).or_default().push(t);
        }
    }
    table
        .into_iter()
        .map(|(method, answers)| {
            let answers: Vec<String> = answers.iter().map(|(a, n)| format!("{a} ×{n}")).collect();
            let mut times = took.remove(method.as_str()).unwrap_or_default();
            times.sort();
            let timing = match (times.get(times.len() / 2), times.last()) {
                (Some(median), Some(max)) => {
                    format!(" | {:.1} ms, {:.1} ms", ms(*median), ms(*max))
                }
                _ => String::new(),
            };
            (method, format!("{}{timing}", answers.join("; ")))
        })
        .collect()
}

/// `text` on one line, cut after `limit` characters.
pub fn shorten(text: &str, limit: usize) -> String {
    let text = text.replace('\n', "⏎");
    match text.char_indices().nth(limit) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// Writes `exchanges` and the notifications that `passed` as JSON lines to
/// `dir/<server>.jsonl`, in time order (`atMs` since the proxy started; a request's `tookMs`).
pub fn dump(dir: &Path, target: Target, exchanges: &[Exchange], passed: &[Passed]) {
    let mut lines: Vec<(Duration, Value)> = exchanges
        .iter()
        .map(|exchange| {
            let answer = match &exchange.answer {
                Answer::Result(result) => json!({"result": result}),
                Answer::Error { code, message } => {
                    json!({"error": {"code": code, "message": message}})
                }
                Answer::None => json!(null),
            };
            let line = json!({"atMs": ms(exchange.at), "tookMs": exchange.took.map(ms),
                "method": exchange.method, "params": exchange.params, "answer": answer});
            (exchange.at, line)
        })
        .collect();
    lines.extend(passed.iter().map(|p| {
        let line = json!({"atMs": ms(p.at), "notification": p.method, "from": p.from,
            "processId": p.process_id});
        (p.at, line)
    }));
    lines.sort_by_key(|(at, _)| *at);
    let lines: String = lines.iter().map(|(_, line)| format!("{line}\n")).collect();
    let path = dir.join(format!("{}.jsonl", target.name().replace(' ', "-")));
    std::fs::write(&path, lines).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
