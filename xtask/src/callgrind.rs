//! A reader of callgrind's output format (valgrind's
//! `docs/callgrind-format`): per function, its self cost and the inclusive
//! cost of each call it makes, summed over every context the file lists the
//! function in.
//!
//! Only what `valgrind --tool=callgrind` writes by default is handled: name
//! compression (`fn=(id) name`, later `fn=(id)`), relative positions (`+n`,
//! `-n`, `*`), cost lines with fewer costs than events (the rest are 0) and
//! `calls=` lines, whose following cost line is the call's inclusive cost.

use std::collections::HashMap;

/// The costs of one profile, by function name.
#[derive(Debug, Default)]
pub struct Profile {
    /// The event names, in the order of every cost vector (`events:`).
    pub events: Vec<String>,
    /// The whole profile's cost (`totals:` or `summary:`; else the sum of
    /// self costs).
    pub totals: Vec<u64>,
    /// Functions by name.
    pub functions: HashMap<String, Function>,
}

/// One function's costs.
#[derive(Debug, Default, Clone)]
pub struct Function {
    /// Cost of its own instructions (after inlining: what the compiler
    /// inlined into it counts here).
    pub self_cost: Vec<u64>,
    /// Inclusive cost of its calls, by callee name (calls of itself left
    /// out: their cost is in this function's inclusive cost already).
    pub calls: HashMap<String, Vec<u64>>,
}

impl Function {
    /// Self cost plus every call's inclusive cost.
    pub fn inclusive(&self) -> Vec<u64> {
        let mut sum = self.self_cost.clone();
        for cost in self.calls.values() {
            add(&mut sum, cost);
        }
        sum
    }
}

/// Adds `cost` into `sum` element by element (growing `sum` if needed).
pub fn add(sum: &mut Vec<u64>, cost: &[u64]) {
    if sum.len() < cost.len() {
        sum.resize(cost.len(), 0);
    }
    for (total, value) in sum.iter_mut().zip(cost) {
        *total += value;
    }
}

impl Profile {
    /// The index of event `name` (e.g. "Ir").
    pub fn event(&self, name: &str) -> Option<usize> {
        self.events.iter().position(|event| event == name)
    }

    /// Parses a callgrind output file's text.
    pub fn parse(text: &str) -> Result<Profile, String> {
        let mut profile = Profile::default();
        // Compressed names: (id) -> name, one table for fn= and cfn=.
        let mut names: HashMap<String, String> = HashMap::new();
        let mut current: Option<String> = None;
        let mut callee: Option<String> = None;
        // A `calls=` line was read: the next cost line is the call's cost.
        let mut call_pending = false;
        let mut summary = None;
        let mut totals = None;
        for (number, line) in text.lines().enumerate() {
            let line = line.trim_end();
            let context = || format!("line {}: {line}", number + 1);
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(rest) = line.strip_prefix("events:") {
                profile.events = rest.split_whitespace().map(str::to_string).collect();
            } else if let Some(rest) = line.strip_prefix("summary:") {
                summary = Some(numbers(rest).ok_or_else(context)?);
            } else if let Some(rest) = line.strip_prefix("totals:") {
                totals = Some(numbers(rest).ok_or_else(context)?);
            } else if let Some(rest) = line.strip_prefix("fn=") {
                current = Some(resolve(&mut names, rest).ok_or_else(context)?);
                call_pending = false;
            } else if let Some(rest) = line.strip_prefix("cfn=") {
                callee = Some(resolve(&mut names, rest).ok_or_else(context)?);
            } else if line.starts_with("calls=") {
                call_pending = true;
            } else if line.starts_with(|c: char| c.is_ascii_digit() || c == '+' || c == '-' || c == '*') {
                let cost = cost_line(line).ok_or_else(context)?;
                let name = current.as_ref().ok_or_else(|| format!("{}: a cost before any fn=", context()))?;
                let function = profile.functions.entry(name.clone()).or_default();
                if call_pending {
                    call_pending = false;
                    let callee = callee.take().ok_or_else(|| format!("{}: calls= without cfn=", context()))?;
                    if &callee != name {
                        add(function.calls.entry(callee).or_default(), &cost);
                    }
                } else {
                    add(&mut function.self_cost, &cost);
                }
            } else if line.contains('=') || line.contains(':') {
                // ob=, fl=, fi=, fe=, cob=, cfi=, cfl=, jump=, headers: not needed.
                if line.starts_with("jump=") || line.starts_with("jcnd=") {
                    return Err(format!("{}: jump costs are not supported (run without --collect-jumps)", context()));
                }
            } else {
                return Err(format!("{}: not a callgrind line", context()));
            }
        }
        if profile.events.is_empty() {
            return Err("no `events:` line: not a callgrind output file".to_string());
        }
        profile.totals = match totals.or(summary) {
            Some(totals) => totals,
            None => {
                let mut sum = Vec::new();
                for function in profile.functions.values() {
                    add(&mut sum, &function.self_cost);
                }
                sum
            }
        };
        profile.totals.resize(profile.events.len(), 0);
        Ok(profile)
    }
}

/// `(id) name` defines a compressed name, `(id)` uses one, `name` is plain.
fn resolve(names: &mut HashMap<String, String>, text: &str) -> Option<String> {
    let text = text.trim();
    if let Some(rest) = text.strip_prefix('(') {
        let (id, name) = rest.split_once(')')?;
        let name = name.trim();
        if name.is_empty() {
            names.get(id).cloned()
        } else {
            names.insert(id.to_string(), name.to_string());
            Some(name.to_string())
        }
    } else {
        Some(text.to_string())
    }
}

fn numbers(text: &str) -> Option<Vec<u64>> {
    text.split_whitespace().map(|number| number.parse().ok()).collect()
}

/// A cost line: a position (absolute, `+n`, `-n` or `*`), then costs.
fn cost_line(line: &str) -> Option<Vec<u64>> {
    let mut fields = line.split_whitespace();
    let position = fields.next()?;
    let valid_position = position == "*"
        || position.strip_prefix(['+', '-']).unwrap_or(position).chars().all(|c| c.is_ascii_digit() || c == 'x');
    if !valid_position {
        return None;
    }
    fields.map(|number| number.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "# callgrind format
version: 1
positions: line
events: Ir Dr

fl=(1) main.rs
fn=(1) outer
10 5 1
cfn=(2) inner
calls=3 20
+2 300 30
cfn=(1)
calls=1 10
* 99 9

fn=(2)
20 300 30
fn=(3) leaf
-5 7
fn=(2)
* 1

totals: 412 40
";

    #[test]
    fn self_and_call_costs() {
        let profile = Profile::parse(SAMPLE).unwrap();
        assert_eq!(profile.events, ["Ir", "Dr"]);
        assert_eq!(profile.totals, [412, 40]);
        let outer = &profile.functions["outer"];
        assert_eq!(outer.self_cost, [5, 1]);
        assert_eq!(outer.calls["inner"], [300, 30]);
        // The recursive call is in the inclusive cost already.
        assert!(!outer.calls.contains_key("outer"));
        assert_eq!(outer.inclusive(), [305, 31]);
        // A compressed name used again, and a cost line with one cost.
        assert_eq!(profile.functions["inner"].self_cost, [301, 30]);
        assert_eq!(profile.functions["leaf"].self_cost, [7]);
    }

    #[test]
    fn rejects_what_is_not_callgrind() {
        assert!(Profile::parse("hello world\n").is_err());
        assert!(Profile::parse("positions: line\n").unwrap_err().contains("events"));
        assert!(Profile::parse("events: Ir\n10 5\n").unwrap_err().contains("before any fn="));
        assert!(Profile::parse("events: Ir\nfn=(1) f\njump=1 2\n").unwrap_err().contains("jump"));
    }
}
