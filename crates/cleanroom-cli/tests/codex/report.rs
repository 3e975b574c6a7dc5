//! What one run of the interop scenario found: its checked steps, and the recording proxy's
//! log (which exec-server methods the real client called and what the server answered),
//! printed as the report the tests show and optionally dumped as JSON lines.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;

use super::exec_server::Target;
use super::proxy::{Answer, Exchange};

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
            "-- exec-server methods the client called (answer: count)"
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

/// Per method, in first-use order: "ok ×N" and each distinct error "CODE message ×N".
fn method_table(exchanges: &[Exchange]) -> Vec<(String, String)> {
    let mut table: Vec<(String, Vec<(String, usize)>)> = Vec::new();
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
    }
    table
        .into_iter()
        .map(|(method, answers)| {
            let answers: Vec<String> = answers.iter().map(|(a, n)| format!("{a} ×{n}")).collect();
            (method, answers.join("; "))
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

/// Writes `exchanges` as JSON lines to `dir/<server>.jsonl`.
pub fn dump(dir: &Path, target: Target, exchanges: &[Exchange]) {
    let lines: String = exchanges
        .iter()
        .map(|exchange| {
            let answer = match &exchange.answer {
                Answer::Result(result) => json!({"result": result}),
                Answer::Error { code, message } => {
                    json!({"error": {"code": code, "message": message}})
                }
                Answer::None => json!(null),
            };
            let line =
                json!({"method": exchange.method, "params": exchange.params, "answer": answer});
            format!("{line}\n")
        })
        .collect();
    let path = dir.join(format!("{}.jsonl", target.name().replace(' ', "-")));
    std::fs::write(&path, lines).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}
