//! `--engine` of `pmtx bench` and `soak`: a list of engine specifications
//! of the engine grammar (`pmtx_engine::spec`, `ENGINE[:key=value...]`:
//! `dbxn:nt=off:pad64=off`, `zen:cc=no-wait`), or bench presets that expand
//! to several of them (`dbxn-ablation`, `zen-cc-matrix`), and
//! `--nvm-dram-ratio`, which sets every engine's DRAM budget.
//!
//! The label of a run is the specification as given (booleans written
//! `on`/`off`), so runs of one engine with different options stay apart in
//! the table, the JSON and the CSV; [`EngineSpec::file_label`] is the same
//! label made safe for a file name.

use pmtx_engine::spec::engine_names;
use pmtx_engine::{CcProtocol, EngineKind};

pub use pmtx_engine::spec::{parse_cc, EngineSpec};

/// An `--engine` preset: a name that expands to several specifications.
pub struct Preset {
    /// The name given to `--engine`.
    pub name: &'static str,
    /// What the rows are, for `--help`.
    pub description: &'static str,
    /// The specifications it expands to, in order.
    specs: fn() -> Vec<String>,
}

impl Preset {
    /// The specifications this preset expands to, in order.
    pub fn specs(&self) -> Vec<String> {
        (self.specs)()
    }
}

/// `--engine` presets.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "dbxn-ablation",
        description: "the rows of the DBXN paper's Fig. 11: DBX-DRAM, +durability (group commit), +synchronous log \
                      (Disk), +synchronous log (NVM), +parity version, +64 alignment, +nt-store, +256 alignment",
        specs: dbxn_ablation,
    },
    Preset {
        name: "zen-cc-matrix",
        description: "the rows of the Zen paper's Fig. 22: Zen's heap under each of the ten concurrency-control \
                      protocols",
        specs: zen_cc_matrix,
    },
    Preset {
        name: "zen-designs",
        description: "the OLTP engine designs the Zen paper compares (§5.1): mmdb, wbl, foedus, zen",
        specs: zen_designs,
    },
    Preset {
        name: "cc-matrix",
        description: "the protocols of zen-cc-matrix on silo's DRAM records, no durability",
        specs: silo_cc_matrix,
    },
    Preset {
        name: "sp3-micro",
        description: "the engines of the SP^3 paper's micro-benchmark figures, to run with each of --workload sps, \
                      sp3-queue, hash, rbtree, btree (the defaults are the paper's: --entry-size 128 --theta 0.99 \
                      --insert-percent 50)",
        specs: sp3_micro,
    },
    Preset {
        name: "phytm-baselines",
        description: "the engines of the PHyTM paper's figures with simulated HTM: phytm, phtm and 2pl (run with \
                      --workload ycsb --ycsb srq --long-threads 1 for its long-transaction experiment, Fig. 5e)",
        specs: phytm_engines,
    },
];

fn phytm_engines() -> Vec<String> {
    ["phytm:htm=sim", "phtm:htm=sim", "2pl"].map(String::from).to_vec()
}

fn dbxn_ablation() -> Vec<String> {
    [
        "silo",
        "group-commit",
        "dbx-naive:nt=off:pad64=off:align256=off:medium=disk",
        "dbx-naive:nt=off:pad64=off:align256=off",
        "dbxn:nt=off:pad64=off:align256=off",
        "dbxn:nt=off:pad64=on:align256=off",
        "dbxn:nt=on:pad64=on:align256=off",
        "dbxn",
    ]
    .map(String::from)
    .to_vec()
}

/// The engines of `sp3-micro`, in order.
///
/// SP3-MICRO ENGINES: `sp3`, `nvm-tx` and `nvm-ideal` are the paper's
/// systems; they join the preset by themselves once `EngineKind::parse`
/// knows these names (names it does not know yet are left out). An engine
/// with another name, or options, goes into this list.
const SP3_MICRO_ENGINES: &[&str] = &["silo", "group-commit", "sp3", "nvm-tx", "nvm-ideal"];

fn sp3_micro() -> Vec<String> {
    SP3_MICRO_ENGINES
        .iter()
        .filter(|spec| EngineKind::parse(spec.split(':').next().unwrap_or_default()).is_some())
        .map(|spec| spec.to_string())
        .collect()
}

/// `ENGINE:cc=P` for every protocol P, in [`CcProtocol::ALL`] order.
fn cc_matrix(engine: EngineKind) -> Vec<String> {
    CcProtocol::ALL.iter().map(|protocol| format!("{}:cc={}", engine.name(), protocol.name())).collect()
}

fn zen_cc_matrix() -> Vec<String> {
    cc_matrix(EngineKind::Zen)
}

fn zen_designs() -> Vec<String> {
    ["mmdb", "wbl", "foedus", "zen"].map(String::from).to_vec()
}

fn silo_cc_matrix() -> Vec<String> {
    cc_matrix(EngineKind::Silo)
}

/// `--nvm-dram-ratio P`: sets every engine's DRAM budget to
/// `loaded_bytes / P` (the Met-Cache of the tuple-heap engines and
/// `foedus`'s volatile rows, both `cache=`; the DRAM tables of `mmdb`) and
/// returns it. Refuses an engine that was given its
/// own budget (`cache=`, `dram=`): the run compares engines at one P.
pub fn apply_nvm_dram_ratio(engines: &mut [EngineSpec], ratio: f64, loaded_bytes: u64) -> Result<u64, String> {
    if !(ratio.is_finite() && ratio >= 1.0) {
        return Err(format!("--nvm-dram-ratio {ratio}: P must be a number of at least 1"));
    }
    if let Some(engine) =
        engines.iter().find(|engine| engine.given.iter().any(|(key, _)| key == "cache" || key == "dram"))
    {
        return Err(format!(
            "--nvm-dram-ratio sets every engine's DRAM budget; {} gives its own (cache= or dram=): drop one of them",
            engine.label()
        ));
    }
    let budget = (loaded_bytes as f64 / ratio).floor() as u64;
    for engine in engines.iter_mut() {
        engine.zen_cache_bytes = Some(budget);
        engine.mmdb_dram_bytes = Some(budget);
    }
    Ok(budget)
}

/// The engines of one `--engine` list entry (a preset gives several).
#[derive(Clone, Debug, PartialEq)]
pub struct EngineEntry(pub Vec<EngineSpec>);

fn preset_names() -> String {
    PRESETS.iter().map(|preset| preset.name).collect::<Vec<_>>().join(", ")
}

/// Parses one `--engine` entry: a preset name or `ENGINE[:KEY=VALUE]...`.
pub fn parse_entry(text: &str) -> Result<EngineEntry, String> {
    let text = text.trim();
    if let Some(preset) = PRESETS.iter().find(|preset| preset.name == text) {
        return preset.specs().iter().map(|spec| parse_spec(spec)).collect::<Result<Vec<_>, _>>().map(EngineEntry);
    }
    parse_spec(text).map(|spec| EngineEntry(vec![spec]))
}

/// Parses `ENGINE[:KEY=VALUE]...` (the engine grammar; an unknown name
/// also lists the bench presets).
pub fn parse_spec(text: &str) -> Result<EngineSpec, String> {
    let name = text.trim().split(':').next().unwrap_or_default().trim();
    if !pmtx_engine::spec::is_engine_name(name) {
        return Err(format!("unknown engine {name:?}; valid engines: {}; presets: {}", engine_names(), preset_names()));
    }
    EngineSpec::parse(text)
}

/// The `--help` text of `--engine`.
pub fn long_help() -> String {
    let mut help = format!(
        "Engines to compare, comma-separated: {}.\n\n\
         Each entry may carry options as ENGINE:KEY=VALUE[:KEY=VALUE...]; the entry as given is the run's \
         label (table, JSON \"engine\", CSV, pool file name), and the JSON also has \"engine_name\" and \
         \"engine_options\" (every option in effect).\n",
        engine_names()
    );
    help.push_str(&pmtx_engine::spec::options_help());
    help.push_str("\nPresets (expand in place):\n");
    for preset in PRESETS {
        help.push_str(&format!("  {}: {}:\n    {}\n", preset.name, preset.description, preset.specs().join(",")));
    }
    help.push_str("\nExample: --engine group-commit,dbxn:nt=off,zen:cache=0,zen:cc=no-wait");
    help
}

/// The short `-h` text of `--engine`.
pub fn short_help() -> String {
    format!(
        "Engines to compare, comma-separated: {} (ENGINE:KEY=VALUE... sets engine options; preset: {}; see --help)",
        engine_names(),
        preset_names()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmtx_engine::{DbOptions, LogMedium};

    #[test]
    fn nvm_dram_ratio_sets_one_budget_for_every_engine() {
        let mut engines: Vec<EngineSpec> = ["zen", "mmdb", "wbl", "silo"].map(|name| parse_spec(name).unwrap()).into();
        let budget = apply_nvm_dram_ratio(&mut engines, 4.0, 1_000_000).unwrap();
        assert_eq!(budget, 250_000);
        for engine in &engines {
            let mut options = DbOptions::in_memory(engine.kind, Vec::new());
            engine.apply(&mut options, 0);
            assert_eq!((options.zen.cache_bytes, options.mmdb.dram_bytes), (250_000, 250_000), "{engine}");
        }
        assert_eq!(engines[0].effective_options()["cache"], "250000");
        assert_eq!(engines[1].effective_options()["dram"], "250000");
        // Labels (which the reproduce claims name) do not change.
        assert_eq!(engines.iter().map(EngineSpec::label).collect::<Vec<_>>(), ["zen", "mmdb", "wbl", "silo"]);
    }

    #[test]
    fn nvm_dram_ratio_refuses_an_engine_with_its_own_budget() {
        for own in ["zen:cache=1MiB", "mmdb:dram=1MiB", "wbl:cache=0"] {
            let mut engines = vec![parse_spec("zen").unwrap(), parse_spec(own).unwrap()];
            let error = apply_nvm_dram_ratio(&mut engines, 4.0, 1 << 20).unwrap_err();
            assert!(error.contains(own) && error.contains("drop one"), "{error}");
        }
        let mut engines = vec![parse_spec("zen").unwrap()];
        assert!(apply_nvm_dram_ratio(&mut engines, 0.5, 1 << 20).unwrap_err().contains("at least 1"));
        assert!(apply_nvm_dram_ratio(&mut engines, f64::NAN, 1 << 20).unwrap_err().contains("at least 1"));
    }

    #[test]
    fn plain_engines_parse() {
        for kind in EngineKind::ALL {
            let spec = parse_spec(kind.name()).unwrap();
            assert_eq!(spec, EngineSpec::plain(kind));
            assert_eq!(spec.label(), kind.name());
        }
        let error = parse_spec("nope").unwrap_err();
        assert!(
            error.contains("valid engines") && error.contains("silo") && error.contains("dbxn-ablation"),
            "{error}"
        );
    }

    #[test]
    fn presets_expand_to_valid_specs() {
        let EngineEntry(specs) = parse_entry("dbxn-ablation").unwrap();
        let labels: Vec<String> = specs.iter().map(EngineSpec::label).collect();
        assert_eq!(labels.len(), 8);
        assert_eq!(labels[0], "silo");
        assert_eq!(labels[1], "group-commit");
        // Each row adds one thing to the one before: the synchronous log
        // starts on disk with plain writes, then moves to NVM, as in the
        // paper.
        assert_eq!(labels[2], "dbx-naive:nt=off:pad64=off:align256=off:medium=disk");
        assert_eq!(specs[2].dbxn.medium, LogMedium::Disk);
        assert_eq!(labels[3], "dbx-naive:nt=off:pad64=off:align256=off");
        assert_eq!(specs[3].dbxn.medium, LogMedium::Pm);
        assert_eq!(labels[4], "dbxn:nt=off:pad64=off:align256=off");
        assert_eq!(labels[7], "dbxn");
        assert_eq!(parse_entry(" zen ").unwrap(), EngineEntry(vec![EngineSpec::plain(EngineKind::Zen)]));
        assert!(long_help().contains("dbxn-ablation") && long_help().contains("align256=on|off"));
    }

    #[test]
    fn sp3_micro_has_the_engines_built_so_far() {
        let EngineEntry(specs) = parse_entry("sp3-micro").unwrap();
        let labels: Vec<String> = specs.iter().map(EngineSpec::label).collect();
        assert_eq!(labels[..2], ["silo", "group-commit"]);
        for name in ["sp3", "nvm-tx", "nvm-ideal"] {
            assert_eq!(labels.contains(&name.to_string()), EngineKind::parse(name).is_some(), "{name}");
        }
        assert!(long_help().contains("sp3-micro") && short_help().contains("sp3-micro"));
    }

    #[test]
    fn the_help_states_each_protocol_s_isolation() {
        let help = long_help();
        for protocol in CcProtocol::ALL {
            assert!(help.contains(&format!("  {}: {}", protocol.name(), protocol.isolation())), "{protocol}");
        }
        assert!(help.contains("nvm-ideal, which validates nothing and is not serializable"));
    }

    #[test]
    fn cc_matrices_have_one_row_per_protocol() {
        let built: Vec<CcProtocol> = CcProtocol::ALL.to_vec();
        for (preset, kind) in [("zen-cc-matrix", EngineKind::Zen), ("cc-matrix", EngineKind::Silo)] {
            let EngineEntry(specs) = parse_entry(preset).unwrap();
            assert_eq!(specs.len(), built.len(), "{preset}");
            assert_eq!(specs.iter().map(|spec| spec.cc).collect::<Vec<_>>(), built, "{preset}");
            assert!(specs.iter().all(|spec| spec.kind == kind), "{preset}");
            assert_eq!(specs[0].label(), format!("{}:cc=silo", kind.name()));
        }
        let help = long_help();
        assert!(help.contains("zen-cc-matrix") && help.contains("zen:cc=silo,zen:cc=occ"), "{help}");
        assert!(help.contains("cc=<protocol>") && short_help().contains("cc-matrix"), "{help}");
    }

    #[test]
    fn the_help_lists_every_option_group() {
        let help = long_help();
        assert!(help.contains("medium=pm|disk"));
        assert!(help.contains("Options of zen+") && help.contains("eta=<factor>"));
        let EngineEntry(specs) = parse_entry("zen-designs").unwrap();
        assert_eq!(specs.iter().map(EngineSpec::label).collect::<Vec<_>>(), ["mmdb", "wbl", "foedus", "zen"]);
    }
}
