//! The engine grammar `ENGINE[:key=value...]`: an engine name (or a preset
//! name of the engine catalog), optionally followed by options
//! (`dbxn:nt=off:pad64=off`, `zen:cc=no-wait`). `pmtx bench`, `soak`,
//! `crashtest` and `reproduce` all read engines with it.
//!
//! Every engine takes `cc=<protocol>`, its concurrency-control protocol
//! ([`CcProtocol`]); the other keys are the engine's own, listed in its
//! catalog entry ([`crate::engine_catalog`]), and the rules on them are the
//! ones [`DbOptions`] applies (`crate::options`).
//!
//! The label of a spec is the text as given (booleans written `on`/`off`),
//! so runs of one engine with different options stay apart in tables,
//! JSON and CSV; [`EngineSpec::file_label`] is the same label made safe for
//! a file name. [`EngineSpec`]'s `Display` is its label, and parsing the
//! label gives the spec back.

use crate::cc::CcProtocol;
use crate::engine::EngineKind;
use crate::engine_catalog::{self as catalog, EngineEntry, Isolation, Named, OptionKey, PresetEntry};
use crate::options::{DbOptions, DbxnOptions, LogMedium, ReadOnlySnapshot, ZenPlusOptions};
use pmtx_htm::{HtmBackendKind, HtmConfig, PER_MILLION};
use std::collections::BTreeMap;
use std::time::Duration;

pub use crate::options::{check_cc, check_medium};

/// The HTM choice of a DBXN engine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HtmChoice {
    /// Backend.
    pub backend: HtmBackendKind,
    /// `sim`: injected aborts per million attempts.
    pub abort_per_million: u32,
}

/// One engine with its options.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineSpec {
    /// The name given: the engine's, or a preset's
    /// ([`crate::engine_catalog::PRESETS`]).
    pub name: &'static str,
    /// The engine.
    pub kind: EngineKind,
    /// The options given, in order: (key, value as shown in the label).
    pub given: Vec<(String, String)>,
    /// DBXN log-write options (defaults unless given).
    pub dbxn: DbxnOptions,
    /// DBXN HTM backend.
    pub htm: HtmChoice,
    /// Zen Met-Cache budget, if given.
    pub zen_cache_bytes: Option<u64>,
    /// `mmdb`'s DRAM budget of its tables, if given.
    pub mmdb_dram_bytes: Option<u64>,
    /// wbl group-commit window, if given.
    pub wbl_window: Option<std::time::Duration>,
    /// `zen+`'s thresholds and soft partitions (defaults unless given).
    pub zen_plus: ZenPlusOptions,
    /// Concurrency-control protocol.
    pub cc: CcProtocol,
}

impl EngineSpec {
    /// The engine with its default options.
    pub fn plain(kind: EngineKind) -> Self {
        Self {
            name: kind.name(),
            kind,
            given: Vec::new(),
            dbxn: DbxnOptions::default(),
            htm: HtmChoice { backend: HtmBackendKind::None, abort_per_million: 0 },
            zen_cache_bytes: None,
            mmdb_dram_bytes: None,
            wbl_window: None,
            zen_plus: ZenPlusOptions::default(),
            cc: kind.default_cc(),
        }
    }

    /// The label of its runs: the engine name and the options given.
    pub fn label(&self) -> String {
        let mut label = self.name.to_string();
        for (key, value) in &self.given {
            label.push(':');
            label.push_str(key);
            label.push('=');
            label.push_str(value);
        }
        label
    }

    /// [`EngineSpec::label`] made safe for a file name (`:` becomes `.`,
    /// `=` becomes `-`, anything but ASCII letters, digits, `.`, `-` and
    /// `_` becomes `_`).
    pub fn file_label(&self) -> String {
        self.label()
            .chars()
            .map(|c| match c {
                ':' => '.',
                '=' => '-',
                c if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' => c,
                _ => '_',
            })
            .collect()
    }

    /// Every option of the engine with the value in effect (defaults
    /// included), for the JSON report (every engine has at least `cc`).
    pub fn effective_options(&self) -> BTreeMap<String, String> {
        self.kind
            .entry()
            .option_keys()
            .filter_map(|key| Some((key.name.to_string(), self.value_of(key.name)?)))
            .collect()
    }

    /// The value in effect of option `key`, as [`EngineSpec::effective_options`]
    /// shows it; `None` for `htm-abort` without `htm=sim`.
    fn value_of(&self, key: &str) -> Option<String> {
        let on_off = |value: bool| if value { "on" } else { "off" }.to_string();
        let plus = &self.zen_plus;
        Some(match key {
            "cc" => self.cc.name().into(),
            "nt" => on_off(self.dbxn.non_temporal),
            "pad64" => on_off(self.dbxn.pad_small_to_line),
            "align256" => on_off(self.dbxn.align_large_to_256),
            "medium" => self.dbxn.medium.name().into(),
            "htm" => self.htm.backend.name().into(),
            "htm-abort" if self.htm.backend == HtmBackendKind::Sim => {
                let percent = f64::from(self.htm.abort_per_million) * 100.0 / f64::from(PER_MILLION);
                format!("{percent}")
            }
            "htm-abort" => return None,
            "dram" => self.mmdb_dram_bytes.unwrap_or(crate::options::MmdbOptions::default().dram_bytes).to_string(),
            "cache" => self.zen_cache_bytes.unwrap_or(crate::options::ZenOptions::default().cache_bytes).to_string(),
            "window" => {
                let window = self.wbl_window.unwrap_or(crate::options::WblOptions::default().window);
                format!("{}us", window.as_micros())
            }
            "alpha" => plus.alpha_percent.to_string(),
            "beta" => plus.beta_percent.to_string(),
            "gamma" => plus.gamma_tuples.to_string(),
            "numa" => plus.numa_nodes.to_string(),
            "partitions" => plus.partitions.to_string(),
            "delta" => plus.delta.to_string(),
            "eta" => plus.eta.to_string(),
            "snapshot" => plus.read_only_snapshot.name().into(),
            other => unreachable!("option {other} has no value"),
        })
    }

    /// Sets the options on `options` (`seed`: of the simulated HTM aborts).
    pub fn apply(&self, options: &mut DbOptions, seed: u64) {
        options.dbxn = self.dbxn;
        options.htm = match self.htm.backend {
            HtmBackendKind::None => HtmConfig::software(),
            HtmBackendKind::Sim => HtmConfig::sim(seed, self.htm.abort_per_million),
            HtmBackendKind::Rtm => HtmConfig::rtm(),
        };
        if let Some(bytes) = self.zen_cache_bytes {
            // `cache=` is the DRAM budget of the engines that have one:
            // Zen's Met-Cache, foedus's volatile pages.
            options.zen.cache_bytes = bytes;
            options.foedus.cache_bytes = bytes;
        }
        if let Some(bytes) = self.mmdb_dram_bytes {
            options.mmdb.dram_bytes = bytes;
        }
        if let Some(window) = self.wbl_window {
            options.wbl.window = window;
        }
        options.zen_plus = self.zen_plus.clone();
        options.cc = self.cc;
    }

    /// The HTM backend name for reports ("none" for engines without HTM
    /// regions).
    pub fn htm_backend(&self) -> &'static str {
        self.htm.backend.name()
    }
}

impl std::fmt::Display for EngineSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label())
    }
}

/// Parses the value of `cc`.
pub fn parse_cc(value: &str) -> Result<CcProtocol, String> {
    let name = value.trim().to_ascii_lowercase();
    CcProtocol::parse(&name).ok_or_else(|| {
        format!(
            "unknown concurrency-control protocol {value:?}; protocols: {}",
            protocol_names(CcProtocol::ALL.into_iter())
        )
    })
}

/// Parses an integer option value in `range`.
fn parse_integer<T>(key: &str, value: &str, range: std::ops::RangeInclusive<T>, what: &str) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    value.trim().replace('_', "").parse::<T>().ok().filter(|number| range.contains(number)).ok_or_else(|| {
        format!(
            "invalid value {value:?} for engine option {key}: expected {what} from {} to {}",
            range.start(),
            range.end()
        )
    })
}

/// Parses a decimal option value in `range`.
fn parse_decimal(key: &str, value: &str, range: std::ops::RangeInclusive<f64>, what: &str) -> Result<f64, String> {
    value.trim().parse::<f64>().ok().filter(|number| number.is_finite() && range.contains(number)).ok_or_else(|| {
        format!(
            "invalid value {value:?} for engine option {key}: expected {what} from {} to {}",
            range.start(),
            range.end()
        )
    })
}

fn parse_on_off(key: &str, value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Ok(true),
        "off" | "false" | "no" | "0" => Ok(false),
        _ => Err(format!("invalid value {value:?} for engine option {key}: expected on or off")),
    }
}

impl std::str::FromStr for EngineSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Self::parse(text)
    }
}

impl EngineSpec {
    /// Parses `ENGINE[:KEY=VALUE]...`; `ENGINE` is an engine's name or a
    /// preset's ([`catalog::PRESETS`]).
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::parse_in(text, catalog::PRESETS)
    }

    /// [`EngineSpec::parse`] with the presets of `presets`.
    fn parse_in(text: &str, presets: &'static [PresetEntry]) -> Result<Self, String> {
        let mut parts = text.trim().split(':');
        let name = parts.next().unwrap_or_default().trim();
        let named = catalog::lookup_in(name, presets)
            .ok_or_else(|| format!("unknown engine {name:?}; valid engines: {}", engine_names()))?;
        let kind = named.kind();
        let entry = kind.entry();
        let mut spec = Self { name: named.name(), ..Self::plain(kind) };
        let mut htm_abort = None;
        if let Named::Preset(preset) = named {
            for (key, value) in preset.options {
                let option = entry
                    .option_key(key)
                    .unwrap_or_else(|| panic!("preset {}: {} takes no option {key}", preset.name, kind.name()));
                spec.set(option, value, &mut htm_abort)
                    .unwrap_or_else(|error| panic!("preset {}: {error}", preset.name));
            }
        }
        for part in parts {
            let part = part.trim();
            let Some((key, value)) = part.split_once('=') else {
                return Err(format!(
                    "engine option {part:?} of {name} is not KEY=VALUE; valid keys of {name}: {}",
                    valid_keys(entry)
                ));
            };
            let (key, value) = (key.trim().to_ascii_lowercase(), value.trim());
            let Some(option) = entry.option_key(&key) else {
                return Err(format!(
                    "unknown option {key:?} of engine {name}; valid keys of {name}: {}",
                    valid_keys(entry)
                ));
            };
            if spec.given.iter().any(|(given, _)| *given == key) {
                return Err(format!("engine option {key} given twice in {text:?}"));
            }
            let shown = spec.set(option, value, &mut htm_abort)?;
            spec.given.push((key, shown));
        }
        crate::options::check_cc(kind, spec.cc).map_err(|error| format!("{error} (in {text:?})"))?;
        if let Some(rate) = htm_abort {
            if spec.htm.backend != HtmBackendKind::Sim {
                return Err(format!("engine option htm-abort needs htm=sim (in {text:?})"));
            }
            spec.htm.abort_per_million = rate;
        }
        Ok(spec)
    }

    /// Sets `option` to `value`; returns the value as the label shows it.
    /// `htm-abort` goes to `htm_abort`, checked once `htm` is known.
    fn set(&mut self, option: &OptionKey, value: &str, htm_abort: &mut Option<u32>) -> Result<String, String> {
        let key = option.name;
        Ok(match key {
            "nt" | "pad64" | "align256" => {
                let on = parse_on_off(key, value)?;
                match key {
                    "nt" => self.dbxn.non_temporal = on,
                    "pad64" => self.dbxn.pad_small_to_line = on,
                    _ => self.dbxn.align_large_to_256 = on,
                }
                if on { "on" } else { "off" }.to_string()
            }
            "htm" => {
                let backend: HtmBackendKind = value
                    .parse()
                    .map_err(|_| format!("invalid value {value:?} for engine option htm: expected none, sim or rtm"))?;
                if backend == HtmBackendKind::Rtm && !pmtx_htm::rtm_support().is_available() {
                    return Err(format!(
                        "htm=rtm: this CPU cannot run RTM transactions ({}); use htm=sim or htm=none",
                        pmtx_htm::rtm_support()
                    ));
                }
                self.htm.backend = backend;
                backend.name().to_string()
            }
            "htm-abort" => {
                let number = value.strip_suffix('%').unwrap_or(value).trim();
                let percent: f64 =
                    number.parse().ok().filter(|percent: &f64| (0.0..=100.0).contains(percent)).ok_or_else(|| {
                        format!(
                            "invalid value {value:?} for engine option htm-abort: expected a percentage from 0 to 100"
                        )
                    })?;
                *htm_abort = Some((percent * f64::from(PER_MILLION) / 100.0).round() as u32);
                number.to_string()
            }
            "medium" => {
                let medium = LogMedium::parse(&value.to_ascii_lowercase())
                    .ok_or_else(|| format!("invalid value {value:?} for engine option medium: expected pm or disk"))?;
                self.dbxn.medium = medium;
                medium.name().to_string()
            }
            "cache" => {
                self.zen_cache_bytes =
                    Some(parse_size(value).map_err(|error| format!("engine option cache: {error}"))?);
                value.to_string()
            }
            "dram" => {
                self.mmdb_dram_bytes = Some(parse_size(value).map_err(|error| format!("engine option dram: {error}"))?);
                value.to_string()
            }
            "window" => {
                self.wbl_window =
                    Some(parse_duration(value).map_err(|error| format!("engine option window: {error}"))?);
                value.to_string()
            }
            "cc" => {
                self.cc = parse_cc(value).map_err(|error| format!("engine option cc: {error}"))?;
                self.cc.name().to_string()
            }
            "alpha" => {
                let percent = value.strip_suffix('%').unwrap_or(value);
                self.zen_plus.alpha_percent =
                    parse_integer(key, percent, ZenPlusOptions::ALPHA_PERCENT, "a percentage")?;
                self.zen_plus.alpha_percent.to_string()
            }
            "beta" => {
                let percent = value.strip_suffix('%').unwrap_or(value);
                self.zen_plus.beta_percent = parse_integer(key, percent, ZenPlusOptions::BETA_PERCENT, "a percentage")?;
                self.zen_plus.beta_percent.to_string()
            }
            "gamma" => {
                self.zen_plus.gamma_tuples = parse_integer(key, value, 0..=u64::MAX, "a tuple count")?;
                self.zen_plus.gamma_tuples.to_string()
            }
            "numa" => {
                self.zen_plus.numa_nodes = parse_integer(key, value, ZenPlusOptions::NUMA_NODES, "a node count")?;
                self.zen_plus.numa_nodes.to_string()
            }
            "partitions" => {
                self.zen_plus.partitions = parse_integer(key, value, ZenPlusOptions::PARTITIONS, "a partition count")?;
                self.zen_plus.partitions.to_string()
            }
            "delta" => {
                self.zen_plus.delta = parse_decimal(key, value, ZenPlusOptions::DELTA, "a fraction")?;
                value.to_string()
            }
            "eta" => {
                self.zen_plus.eta = parse_decimal(key, value, ZenPlusOptions::ETA_MIN..=1e6, "a factor")?;
                value.to_string()
            }
            "snapshot" => {
                self.zen_plus.read_only_snapshot =
                    ReadOnlySnapshot::parse(&value.to_ascii_lowercase()).ok_or_else(|| {
                        format!("invalid value {value:?} for engine option snapshot: expected oldest or current")
                    })?;
                self.zen_plus.read_only_snapshot.name().to_string()
            }
            other => unreachable!("option {other} has no parser"),
        })
    }
}

/// Whether `name` names an engine or a preset of the catalog.
pub fn is_engine_name(name: &str) -> bool {
    catalog::lookup(name).is_some()
}

/// The names of the engines and of the catalog's presets, comma-separated
/// (engines in [`EngineKind::ALL`] order).
pub fn engine_names() -> String {
    EngineKind::ALL
        .iter()
        .map(|kind| kind.name())
        .chain(catalog::PRESETS.iter().map(|preset| preset.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `key=values` of every key of `entry`, for error messages.
fn valid_keys(entry: &EngineEntry) -> String {
    entry.option_keys().map(|key| format!("{}={}", key.name, key.values)).collect::<Vec<_>>().join(", ")
}

fn protocol_names(protocols: impl Iterator<Item = CcProtocol>) -> String {
    protocols.map(CcProtocol::name).collect::<Vec<_>>().join(", ")
}

/// The option groups `--help` lists, in order (`mmdb`'s `dram=` is named
/// in its error messages only, as before).
const HELP_GROUPS: &[&[OptionKey]] = &[
    catalog::DBXN_KEYS,
    catalog::DBX_NAIVE_KEYS,
    catalog::HYBRID_KEYS,
    catalog::ZEN_KEYS,
    catalog::WBL_KEYS,
    catalog::ZEN_PLUS_KEYS,
];

/// The `--help` text of the options: each group of keys with the engines
/// that take it, the protocols of `cc=` and their isolation.
pub fn options_help() -> String {
    let mut help = String::new();
    let mut section = |engines: &str, keys: &[OptionKey]| {
        help.push_str(&format!("\nOptions of {engines}:\n"));
        for key in keys {
            help.push_str(&format!("  {}={}: {}\n", key.name, key.values, key.description));
        }
    };
    section("every engine", catalog::COMMON_KEYS);
    for group in HELP_GROUPS {
        let takers: Vec<&EngineEntry> = EngineKind::ALL
            .iter()
            .map(|kind| kind.entry())
            .filter(|entry| entry.option_groups.iter().any(|taken| taken == group))
            .collect();
        let mut engines = takers.iter().map(|entry| entry.name).collect::<Vec<_>>().join(", ");
        // A protocol other than the common default that every taker is
        // bound to goes into the heading.
        let only: Vec<CcProtocol> = takers
            .iter()
            .filter_map(|entry| match entry.cc {
                catalog::CcRule::Only { protocol, .. } => Some(protocol),
                catalog::CcRule::Any(_) => None,
            })
            .collect();
        if only.len() == takers.len() && only.first().is_some_and(|first| only.iter().all(|p| p == first)) {
            if let Some(protocol) = only.first().filter(|protocol| **protocol != CcProtocol::Silo) {
                engines.push_str(&format!(" (cc={protocol} only, its default)"));
            }
        }
        section(&engines, group);
    }
    help.push_str(&format!("\nConcurrency-control protocols (cc=): {}\n", protocol_names(CcProtocol::ALL.into_iter())));
    let with_isolation = |isolation: Isolation| -> Vec<&str> {
        EngineKind::ALL.iter().filter(|kind| kind.entry().isolation() == isolation).map(|kind| kind.name()).collect()
    };
    help.push_str(&format!(
        "Isolation (every engine but {}, which validates nothing and is not serializable, and {}, snapshot \
         isolation with write skew, not serializable):\n",
        with_isolation(Isolation::Uncontrolled).join(", "),
        with_isolation(Isolation::Snapshot).join(", ")
    ));
    for protocol in CcProtocol::ALL {
        help.push_str(&format!("  {}: {}\n", protocol.name(), protocol.isolation()));
    }
    help
}

const UNITS: [(&str, u64); 5] = [("b", 1), ("kib", 1 << 10), ("mib", 1 << 20), ("gib", 1 << 30), ("tib", 1 << 40)];

/// Parses a byte size: plain bytes (`4096`) or an integer with a binary
/// suffix `B`, `KiB`, `MiB`, `GiB`, `TiB` (case-insensitive, optional space).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let split = trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len());
    let (digits, suffix) = trimmed.split_at(split);
    let suffix = suffix.trim();
    let hint = "expected bytes or an integer with KiB, MiB, GiB or TiB, e.g. 64MiB";
    if digits.is_empty() {
        return Err(format!("invalid size {text:?}: {hint}"));
    }
    let value: u64 = digits.parse().map_err(|_| format!("invalid size {text:?}: number too large"))?;
    let multiplier = if suffix.is_empty() {
        1
    } else {
        UNITS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(suffix))
            .map(|(_, multiplier)| *multiplier)
            .ok_or_else(|| format!("invalid size {text:?}: unknown unit {suffix:?}; {hint}"))?
    };
    value.checked_mul(multiplier).ok_or_else(|| format!("invalid size {text:?}: too large"))
}

/// Parses a duration with a unit: `us` (or `µs`), `ms` or `s` after a
/// (possibly fractional) number, e.g. `100us`, `0.5ms`; more than 0 and at
/// most 60 s.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let hint = "expected a number with us, ms or s, e.g. 100us or 2ms";
    let split = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let number: f64 = number.parse().map_err(|_| format!("invalid duration {text:?}: {hint}"))?;
    let seconds_per_unit = match unit.trim().to_ascii_lowercase().as_str() {
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        _ => return Err(format!("invalid duration {text:?}: {hint}")),
    };
    let seconds = number * seconds_per_unit;
    if !seconds.is_finite() || seconds <= 0.0 || seconds > 60.0 {
        return Err(format!("invalid duration {text:?}: must be more than 0 and at most 60 s"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine_catalog::PresetEntry;

    #[test]
    fn mmdb_takes_a_dram_budget_and_mmdb_ideal_none() {
        let spec = EngineSpec::parse("mmdb:dram=64MiB").unwrap();
        let mut options = DbOptions::in_memory(EngineKind::Mmdb, Vec::new());
        spec.apply(&mut options, 0);
        assert_eq!(options.mmdb.dram_bytes, 64 << 20);
        assert!(EngineSpec::parse("mmdb-ideal:dram=64MiB")
            .unwrap_err()
            .contains("valid keys of mmdb-ideal: cc=<protocol>"));
        assert!(EngineSpec::parse("mmdb:dram=lots").unwrap_err().contains("invalid size"));
    }

    #[test]
    fn dbxn_options() {
        let spec = EngineSpec::parse("dbxn:nt=off:pad64=0:align256=on").unwrap();
        assert_eq!(spec.kind, EngineKind::Dbxn);
        assert_eq!(
            spec.dbxn,
            DbxnOptions {
                non_temporal: false,
                pad_small_to_line: false,
                align_large_to_256: true,
                ..Default::default()
            }
        );
        assert!(!spec.effective_options().contains_key("medium"), "only dbx-naive has a medium");
        assert_eq!(spec.label(), "dbxn:nt=off:pad64=off:align256=on");
        assert_eq!(spec.file_label(), "dbxn.nt-off.pad64-off.align256-on");
        let options = spec.effective_options();
        assert_eq!(options["nt"], "off");
        assert_eq!(options["htm"], "none");
        let mut db = DbOptions::in_memory(EngineKind::Dbxn, Vec::new());
        spec.apply(&mut db, 1);
        assert_eq!(db.dbxn, spec.dbxn);

        let sim = EngineSpec::parse("dbx-naive:htm=sim:htm-abort=10%").unwrap();
        assert_eq!(sim.htm, HtmChoice { backend: HtmBackendKind::Sim, abort_per_million: 100_000 });
        assert_eq!(sim.label(), "dbx-naive:htm=sim:htm-abort=10");
        assert_eq!(sim.effective_options()["htm-abort"], "10");
        sim.apply(&mut db, 1);
        assert_eq!(db.htm.backend, HtmBackendKind::Sim);
    }

    #[test]
    fn dbx_naive_takes_a_log_medium() {
        let spec = EngineSpec::parse("dbx-naive:medium=DISK").unwrap();
        assert_eq!(spec.dbxn.medium, LogMedium::Disk);
        assert_eq!(spec.label(), "dbx-naive:medium=disk");
        assert_eq!(spec.file_label(), "dbx-naive.medium-disk");
        assert_eq!(spec.effective_options()["medium"], "disk");
        assert_eq!(EngineSpec::plain(EngineKind::DbxNaive).effective_options()["medium"], "pm");
        let mut db = DbOptions::in_memory(EngineKind::DbxNaive, Vec::new());
        spec.apply(&mut db, 1);
        assert_eq!(db.dbxn.medium, LogMedium::Disk);
        assert!(db.logs_to_files());
    }

    #[test]
    fn zen_cache() {
        let spec = EngineSpec::parse("zen:cache=64MiB").unwrap();
        assert_eq!(spec.zen_cache_bytes, Some(64 << 20));
        assert_eq!(spec.effective_options()["cache"], (64u64 << 20).to_string());
        assert_eq!(spec.file_label(), "zen.cache-64MiB");
    }

    #[test]
    fn wbl_cache_and_window() {
        let spec = EngineSpec::parse("wbl:cache=32MiB:window=2ms").unwrap();
        assert_eq!(
            (spec.zen_cache_bytes, spec.wbl_window),
            (Some(32 << 20), Some(std::time::Duration::from_millis(2)))
        );
        let options = spec.effective_options();
        assert_eq!((options["cache"].as_str(), options["window"].as_str()), ("33554432", "2000us"));
        let mut db = DbOptions::in_memory(EngineKind::Wbl, Vec::new());
        spec.apply(&mut db, 1);
        assert_eq!((db.zen.cache_bytes, db.wbl.window), (32 << 20, std::time::Duration::from_millis(2)));
        assert_eq!(EngineSpec::plain(EngineKind::Wbl).effective_options()["window"], "100us");
        for (text, needle) in [
            ("wbl:window=fast", "expected a number with us, ms or s"),
            ("wbl:window=0us", "more than 0"),
            ("wbl:window=100", "expected a number with us, ms or s"),
            ("zen:window=1ms", "valid keys of zen: cache=<size>"),
            ("mmdb:nt=off", "valid keys of mmdb: dram=<size>, cc=<protocol>"),
        ] {
            let error = EngineSpec::parse(text).unwrap_err();
            assert!(error.contains(needle), "{text}: {error}");
        }
    }

    #[test]
    fn bad_options_name_the_valid_keys() {
        for (text, needle) in [
            ("dbxn:foo=1", "valid keys of dbxn: nt=on|off, pad64=on|off, align256=on|off"),
            ("dbxn:nt", "not KEY=VALUE"),
            ("dbxn:nt=maybe", "expected on or off"),
            ("dbxn:nt=on:nt=off", "given twice"),
            ("dbxn:htm-abort=5", "needs htm=sim"),
            ("dbxn:htm=sim:htm-abort=150", "0 to 100"),
            ("dbxn:htm=hle", "none, sim or rtm"),
            ("silo:nt=off", "valid keys of silo: cc=<protocol>"),
            ("group-commit:cache=1", "valid keys of group-commit: cc=<protocol>"),
            ("zen:nt=off", "valid keys of zen: cache=<size>"),
            ("zen:cache=lots", "invalid size"),
            ("dbx-naive:medium=ssd", "expected pm or disk"),
            ("dbxn:medium=disk", "unknown option \"medium\" of engine dbxn"),
            ("dbx-disk:medium=disk", "valid keys of dbx-disk: cc=<protocol>"),
        ] {
            let error = EngineSpec::parse(text).unwrap_err();
            assert!(error.contains(needle), "{text}: {error}");
        }
    }

    #[test]
    fn every_engine_takes_cc() {
        let spec = EngineSpec::parse("zen:cc=no-wait").unwrap();
        assert_eq!((spec.kind, spec.cc), (EngineKind::Zen, CcProtocol::NoWait));
        assert_eq!(spec.label(), "zen:cc=no-wait");
        assert_eq!(EngineSpec::parse(&spec.label()).unwrap(), spec);
        assert_eq!(spec.file_label(), "zen.cc-no-wait");
        assert_eq!(spec.effective_options()["cc"], "no-wait");
        let mut db = DbOptions::in_memory(EngineKind::Zen, Vec::new());
        spec.apply(&mut db, 1);
        assert_eq!(db.cc, CcProtocol::NoWait);
        // With the family's own keys, in any order; the label keeps the order given.
        let spec = EngineSpec::parse("dbxn:cc=WAIT-DIE:nt=off").unwrap();
        assert_eq!((spec.cc, spec.dbxn.non_temporal), (CcProtocol::WaitDie, false));
        assert_eq!(spec.label(), "dbxn:cc=wait-die:nt=off");
        for kind in EngineKind::ALL {
            for protocol in CcProtocol::ALL {
                let parsed = EngineSpec::parse(&format!("{}:cc={}", kind.name(), protocol.name()));
                if kind == EngineKind::ZenPlus && protocol != CcProtocol::Hekaton {
                    assert!(parsed.unwrap_err().contains("takes cc=hekaton only"), "{protocol}");
                    continue;
                }
                // SP^3's, PHyTM's and the PTM engines run their own
                // protocol: the grammar applies the rule DbOptions applies
                // at open.
                let own = matches!(kind.entry().cc, catalog::CcRule::Only { protocol: only, .. } if only != protocol);
                assert_eq!(
                    own,
                    (kind.is_sp3_family() || kind.is_hybrid() || kind.entry().family == catalog::Family::Ptm)
                        && protocol != CcProtocol::Silo,
                    "{kind} {protocol}"
                );
                if own {
                    let error = parsed.unwrap_err();
                    assert!(error.contains(&format!("got cc={protocol}")), "{kind} {protocol}: {error}");
                    continue;
                }
                assert_eq!(parsed.unwrap().cc, protocol, "{kind}");
            }
            let default = if kind == EngineKind::ZenPlus { "hekaton" } else { "silo" };
            assert_eq!(EngineSpec::plain(kind).effective_options()["cc"], default, "{kind}");
        }
    }

    #[test]
    fn zen_plus_options() {
        let spec =
            EngineSpec::parse("zen+:alpha=80%:beta=10:gamma=1_000:numa=2:partitions=64:delta=0.5:eta=1.5:cache=1MiB")
                .unwrap();
        assert_eq!(spec.kind, EngineKind::ZenPlus);
        assert_eq!(spec.cc, CcProtocol::Hekaton);
        let plus = &spec.zen_plus;
        assert_eq!((plus.alpha_percent, plus.beta_percent, plus.gamma_tuples), (80, 10, 1000));
        assert_eq!((plus.numa_nodes, plus.partitions, plus.delta, plus.eta), (2, 64, 0.5, 1.5));
        assert_eq!(spec.label(), "zen+:alpha=80:beta=10:gamma=1000:numa=2:partitions=64:delta=0.5:eta=1.5:cache=1MiB");
        assert_eq!(
            spec.file_label(),
            "zen_.alpha-80.beta-10.gamma-1000.numa-2.partitions-64.delta-0.5.eta-1.5.cache-1MiB"
        );
        let options = spec.effective_options();
        assert_eq!(
            (options["alpha"].as_str(), options["cc"].as_str(), options["cache"].as_str()),
            ("80", "hekaton", "1048576")
        );
        let mut db = DbOptions::in_memory(EngineKind::ZenPlus, Vec::new());
        spec.apply(&mut db, 1);
        assert_eq!(db.zen_plus, spec.zen_plus);
        assert_eq!(db.zen.cache_bytes, 1 << 20);
        let defaults = EngineSpec::plain(EngineKind::ZenPlus).effective_options();
        assert_eq!(
            (defaults["alpha"].as_str(), defaults["beta"].as_str(), defaults["gamma"].as_str()),
            ("95", "5", "16000000")
        );
        for (text, needle) in [
            ("zen+:alpha=0", "expected a percentage from 1 to 100"),
            ("zen+:alpha=101", "from 1 to 100"),
            ("zen+:beta=x", "expected a percentage from 0 to 100"),
            ("zen+:gamma=-1", "expected a tuple count"),
            ("zen+:numa=65", "expected a node count from 0 to 64"),
            ("zen+:partitions=0", "expected a partition count"),
            ("zen+:delta=2", "expected a fraction from 0 to 1"),
            ("zen+:eta=0.5", "expected a factor"),
            ("zen+:snapshot=newest", "expected oldest or current"),
            ("zen+:cc=silo", "takes cc=hekaton only"),
            ("zen+:nt=on", "valid keys of zen+: cache=<size>, alpha=<percent>, beta=<percent>, gamma=<tuples>"),
            ("zen:alpha=5", "valid keys of zen: cache=<size>"),
        ] {
            let error = EngineSpec::parse(text).unwrap_err();
            assert!(error.contains(needle), "{text}: {error}");
        }
        // Read-only snapshots: the paper's oldest by default, current on request.
        assert_eq!(defaults["snapshot"], "oldest");
        let current = EngineSpec::parse("zen+:snapshot=current").unwrap();
        assert_eq!(current.zen_plus.read_only_snapshot, ReadOnlySnapshot::Current);
        assert_eq!(current.label(), "zen+:snapshot=current");
        let mut db = DbOptions::in_memory(EngineKind::ZenPlus, Vec::new());
        current.apply(&mut db, 1);
        assert_eq!(db.zen_plus.read_only_snapshot, ReadOnlySnapshot::Current);
    }

    #[test]
    fn unknown_protocols_are_refused() {
        let error = EngineSpec::parse("zen:cc=2pl").unwrap_err();
        assert!(error.contains("unknown concurrency-control protocol \"2pl\""), "{error}");
        for protocol in CcProtocol::ALL {
            assert!(error.contains(protocol.name()), "{error}");
        }
        assert!(EngineSpec::parse("silo:cc=occ:cc=occ").unwrap_err().contains("given twice"));
    }

    /// A preset is one catalog entry: its name parses, labels its runs and
    /// sets its options as defaults that the text may override.
    #[test]
    fn a_preset_is_an_engine_with_option_defaults() {
        static TOY: [PresetEntry; 1] = [PresetEntry {
            name: "test-only-dbxn-preset",
            engine: EngineKind::Dbxn,
            options: &[("nt", "off"), ("htm", "sim"), ("htm-abort", "10")],
            summary: "dbxn with ordinary stores and simulated HTM",
        }];
        let spec = EngineSpec::parse_in("test-only-dbxn-preset", &TOY).unwrap();
        assert_eq!(
            (spec.kind, spec.name, spec.label()),
            (EngineKind::Dbxn, "test-only-dbxn-preset", "test-only-dbxn-preset".into())
        );
        assert!(!spec.dbxn.non_temporal);
        assert_eq!(spec.htm, HtmChoice { backend: HtmBackendKind::Sim, abort_per_million: 100_000 });
        assert_eq!(spec.effective_options()["nt"], "off");
        let spec = EngineSpec::parse_in("test-only-dbxn-preset:nt=on:cc=occ", &TOY).unwrap();
        assert!(spec.dbxn.non_temporal);
        assert_eq!(spec.label(), "test-only-dbxn-preset:nt=on:cc=occ");
        assert_eq!(EngineSpec::parse_in(&spec.label(), &TOY).unwrap(), spec);
        let error = EngineSpec::parse_in("test-only-dbxn-preset:cache=1", &TOY).unwrap_err();
        assert!(error.contains("valid keys of test-only-dbxn-preset: nt=on|off"), "{error}");
        assert!(EngineSpec::parse("test-only-dbxn-preset").is_err(), "the toy preset is not in the catalog");
    }

    /// Every preset of the catalog parses: its options are keys of its engine.
    #[test]
    fn catalog_presets_parse() {
        for preset in catalog::PRESETS {
            let spec = EngineSpec::parse(preset.name).unwrap();
            assert_eq!((spec.kind, spec.label()), (preset.engine, preset.name.to_string()));
        }
    }

    #[test]
    fn labels_parse_back_and_display() {
        for text in ["silo", "dbxn:nt=off:htm=sim:htm-abort=2.5", "zen+:alpha=80:snapshot=current", "wbl:window=1ms"] {
            let spec: EngineSpec = text.parse().unwrap();
            assert_eq!(spec.to_string(), text);
            assert_eq!(EngineSpec::parse(&spec.label()).unwrap(), spec);
        }
        assert_eq!(parse_size("2 mib"), Ok(2 << 20));
        assert_eq!(parse_duration("100us"), Ok(Duration::from_micros(100)));
        assert!(parse_duration("61s").is_err());
    }

    /// The rules the grammar applies are DbOptions's: a spec the grammar
    /// accepts opens, one DbOptions refuses does not parse.
    #[test]
    fn the_grammar_applies_the_open_rules() {
        let error = EngineSpec::parse("phytm:cc=occ").unwrap_err();
        let mut options = DbOptions::in_memory(EngineKind::Phytm, Vec::new());
        options.cc = CcProtocol::Occ;
        let refused = options.validate().unwrap_err().to_string();
        assert!(refused.contains(error.split(" (in ").next().unwrap()), "{error} / {refused}");
        let mut options = DbOptions::in_memory(EngineKind::Dbxn, Vec::new());
        options.dbxn.medium = LogMedium::Disk;
        assert!(options.validate().unwrap_err().to_string().contains("dbx-naive only"));
        assert!(check_medium(EngineKind::DbxNaive, LogMedium::Disk).is_ok());
    }

    #[test]
    fn options_help_lists_the_groups_with_their_engines() {
        let help = options_help();
        for heading in [
            "Options of every engine:",
            "Options of dbxn, dbxn-nvm, dbx-naive:",
            "Options of dbx-naive:",
            "Options of phytm, phytm-paper, phtm, 2pl:",
            "Options of zen, zen-naive-alloc:",
            "Options of wbl:",
            "Options of zen+ (cc=hekaton only, its default):",
            "every engine but nvm-ideal, which validates nothing",
        ] {
            assert!(help.contains(heading), "{heading}: {help}");
        }
    }
}
