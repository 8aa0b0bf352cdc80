//! A persistent key-value store with range scans, one command per run.
//!
//! ```sh
//! cargo run --release -p pmtx-engine --example kv -- /tmp/kv.pool put apple red
//! cargo run --release -p pmtx-engine --example kv -- /tmp/kv.pool put banana yellow
//! cargo run --release -p pmtx-engine --example kv -- /tmp/kv.pool get apple
//! cargo run --release -p pmtx-engine --example kv -- /tmp/kv.pool scan a c
//! cargo run --release -p pmtx-engine --example kv -- /tmp/kv.pool delete apple
//! ```
//!
//! The first `put` creates the pool (engine `zen`, log-free); every other
//! run reopens it from the schema stored in the pool.

use pmtx_engine::{Database, DbError, DbOptions, EngineKind, ScanDirection, TableSchema};
use std::ops::Bound;
use std::path::Path;

const MAX_KEY: usize = 64;
const MAX_VALUE: usize = 1024;

/// What one command printed, one line per entry.
type Lines = Vec<String>;

fn open(path: &Path, create: bool) -> Result<Database, DbError> {
    if path.exists() || !create {
        return Database::open_existing(path);
    }
    let tables = vec![TableSchema::ordered("kv").max_key_len(MAX_KEY).max_value_len(MAX_VALUE)];
    Database::open(DbOptions::new(EngineKind::Zen, tables, path).create_if_missing(true))
}

fn command(path: &Path, args: &[&str]) -> Result<Lines, DbError> {
    let db = open(path, args.first() == Some(&"put"))?;
    let kv = db.table_id("kv")?;
    let lines = match args {
        ["put", key, value] => {
            db.run(|tx| tx.put(kv, key.as_bytes(), value.as_bytes()))?;
            vec![format!("{key} = {value}")]
        }
        ["get", key] => match db.run_read_only(|tx| tx.get(kv, key.as_bytes()))?.committed().flatten() {
            Some(value) => vec![String::from_utf8_lossy(&value).into_owned()],
            None => vec![format!("{key}: not found")],
        },
        ["delete", key] => {
            let existed = db.run(|tx| tx.delete(kv, key.as_bytes()))?.committed().unwrap_or(false);
            vec![format!("{key}: {}", if existed { "deleted" } else { "not found" })]
        }
        ["scan", rest @ ..] if rest.len() <= 2 => {
            let from = rest.first().map_or(Bound::Unbounded, |from| Bound::Included(from.as_bytes()));
            let to = rest.get(1).map_or(Bound::Unbounded, |to| Bound::Excluded(to.as_bytes()));
            // Scans are limited per call; a scan that needs more rows
            // continues after the last key it got.
            let rows = db
                .run_read_only(|tx| tx.scan(kv, (from, to), ScanDirection::Forward, 10_000))?
                .committed()
                .unwrap_or_default();
            rows.into_iter()
                .map(|(key, value)| format!("{} = {}", String::from_utf8_lossy(&key), String::from_utf8_lossy(&value)))
                .collect()
        }
        _ => {
            return Err(DbError::InvalidConfig(
                "usage: kv POOL put KEY VALUE | get KEY | delete KEY | scan [FROM [TO]]".into(),
            ))
        }
    };
    db.close()?;
    Ok(lines)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((pool, rest)) = args.split_first() else {
        eprintln!("usage: kv POOL put KEY VALUE | get KEY | delete KEY | scan [FROM [TO]]");
        std::process::exit(2);
    };
    let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
    match command(Path::new(pool), &rest) {
        Ok(lines) => lines.iter().for_each(|line| println!("{line}")),
        Err(error) => {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_persist_across_runs() {
        let dir = tempfile::tempdir().unwrap();
        let pool = dir.path().join("kv.pool");
        // Reading a store that does not exist is an error, not a new store.
        assert!(matches!(command(&pool, &["get", "a"]), Err(DbError::PoolNotFound { .. })));
        for (key, value) in [("banana", "yellow"), ("apple", "red"), ("cherry", "dark red"), ("apple", "green")] {
            command(&pool, &["put", key, value]).unwrap();
        }
        assert_eq!(command(&pool, &["get", "apple"]).unwrap(), ["green"]);
        assert_eq!(command(&pool, &["scan", "a", "c"]).unwrap(), ["apple = green", "banana = yellow"]);
        assert_eq!(command(&pool, &["delete", "banana"]).unwrap(), ["banana: deleted"]);
        assert_eq!(command(&pool, &["delete", "banana"]).unwrap(), ["banana: not found"]);
        assert_eq!(command(&pool, &["scan"]).unwrap(), ["apple = green", "cherry = dark red"]);
        assert!(matches!(command(&pool, &["frobnicate"]), Err(DbError::InvalidConfig(_))));
        let too_long = "v".repeat(MAX_VALUE + 1);
        assert!(matches!(command(&pool, &["put", "big", &too_long]), Err(DbError::ValueTooLarge { .. })));
    }
}
