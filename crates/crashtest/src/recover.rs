//! Recovering one pool image in a fresh engine instance and checking the
//! oracles.

use crate::harness::{Baseline, Bounds, Harness};
use crate::state::DbState;
use crate::{derive, panics, Finding};
use pmtx_engine::{Database, DbOptions};
use pmtx_pm::sim::{CapturePolicy, ImageBudget};
use pmtx_pm::{Direct, PmBackend, Pool, Sim};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

/// What the model expects of a recovered image.
pub struct Expectation<'a> {
    /// The state the run started from.
    pub baseline: &'a Baseline,
    /// Bounds of each worker's recovered sequence.
    pub bounds: Bounds,
    /// Order id of NewOrder `s` of worker `w`, if known.
    pub order_of: &'a (dyn Fn(usize, u64) -> Option<u32> + Sync),
}

/// Result of one recovery.
pub struct Recovered<B: PmBackend> {
    /// The recovered state, if recovery and reading succeeded.
    pub state: Option<DbState>,
    /// Violations.
    pub findings: Vec<Finding>,
    /// The pool after the engine was dropped (for simulator inspection).
    pub pool: Option<Arc<Pool<B>>>,
}

/// Recovers `bytes` on backend `B` with `options` (engine, tables,
/// workers), then checks: no panic, no error, pool metadata, structure,
/// the model (`expect`) and, with `workload_check`, the workload's own
/// consistency check. `configure` runs on the pool before the engine opens
/// (to set a capture policy).
pub fn recover_image<B: PmBackend>(
    harness: &Harness,
    options: &DbOptions,
    bytes: &[u8],
    expect: Option<&Expectation<'_>>,
    workload_check: bool,
    configure: impl FnOnce(&Pool<B>),
) -> Recovered<B> {
    recover_with(
        harness,
        options,
        || Pool::<B>::open_image(bytes, &options.pm),
        expect,
        workload_check,
        false,
        configure,
    )
}

/// [`recover_image`] over a pool from `open` (e.g. `Pool::open` of a file);
/// with `clean_close` the database is closed cleanly after the checks
/// instead of dropped (a crash).
pub fn recover_with<B: PmBackend>(
    harness: &Harness,
    options: &DbOptions,
    open: impl FnOnce() -> pmtx_pm::PoolResult<Pool<B>>,
    expect: Option<&Expectation<'_>>,
    workload_check: bool,
    clean_close: bool,
    configure: impl FnOnce(&Pool<B>),
) -> Recovered<B> {
    let mut findings = Vec::new();
    let mut kept_pool = None;
    let outcome = panics::catch(|| -> Option<DbState> {
        let pool = match open() {
            Ok(pool) => Arc::new(pool),
            Err(error) => {
                findings.push(Finding::new("recovery-error", format!("the pool does not open: {error}")));
                return None;
            }
        };
        kept_pool = Some(Arc::clone(&pool));
        configure(&pool);
        let db = match Database::open_on_pool(options.clone(), Arc::clone(&pool)) {
            Ok(db) => Arc::new(db),
            Err(error) => {
                findings.push(Finding::new("recovery-error", format!("recovery failed: {error}")));
                return None;
            }
        };
        if let Err(error) = pool.check_metadata() {
            findings.push(Finding::new("pool-metadata", error.to_string()));
        }
        let state = match harness.read_state(&db) {
            Ok(state) => state,
            Err(finding) => {
                findings.push(finding);
                return None;
            }
        };
        if let Some(expect) = expect {
            findings.extend(harness.verify(&state, expect.baseline, &expect.bounds, expect.order_of));
        }
        if workload_check {
            if let Err(finding) = harness.check_workload(&db) {
                findings.push(finding);
            }
        }
        if clean_close {
            match Arc::try_unwrap(db) {
                Ok(db) => {
                    if let Err(error) = db.close() {
                        findings.push(Finding::new("close-error", format!("clean close failed: {error}")));
                    }
                }
                Err(_) => findings.push(Finding::new("close-error", "the database is still shared")),
            }
        } else {
            drop(db);
        }
        Some(state)
    });
    let state = match outcome {
        Ok(state) => state,
        Err(message) => {
            findings.push(Finding::new("recovery-panic", message));
            None
        }
    };
    Recovered { state, findings, pool: kept_pool }
}

/// Budget of images per crash state captured during recovery.
const RECOVERY_BUDGET: ImageBudget =
    ImageBudget { random_subsets: 1, random_prefixes: 2, exhaustive_limit: 4, all_but_lines: 1 };

/// Oracle 5 for one image whose recovery gave `first`: recover it again on a
/// capturing simulator (must give `first`); crash right after that recovery
/// (the persisted image) and recover (must give `first`); pick
/// `crash_states` states captured *during* the second recovery, recover one
/// image of each (must give `first`). Returns findings and the number of
/// extra images recovered.
pub fn check_recovery_determinism(
    harness: &Harness,
    options: &DbOptions,
    bytes: &[u8],
    first: &DbState,
    seed: u64,
    crash_states: usize,
) -> (Vec<Finding>, u64) {
    let mut findings = Vec::new();
    let mut images = 0u64;
    let second = recover_image::<Sim>(harness, options, bytes, None, false, |pool| {
        pool.backend().set_capture(CapturePolicy { max_states: 4_000, ..CapturePolicy::all() })
    });
    images += 1;
    findings.extend(second.findings);
    let (Some(state), Some(pool)) = (second.state, second.pool) else {
        return (findings, images);
    };
    if state != *first {
        findings.push(Finding::new(
            "recover-twice",
            format!("recovering the same image twice gave different states: {}", first.first_difference(&state)),
        ));
        return (findings, images);
    }
    let after = pool.backend().persisted_image();
    let captured = pool.backend().take_crash_states();
    drop(pool);
    let third = recover_image::<Direct>(harness, options, &after, None, false, |_| {});
    images += 1;
    findings.extend(
        third
            .findings
            .into_iter()
            .map(|f| Finding::new(f.oracle, format!("after a crash right after recovery: {}", f.detail))),
    );
    if let Some(state) = third.state {
        if state != *first {
            findings.push(Finding::new(
                "recovery-not-durable",
                format!(
                    "a crash right after recovery returned (nothing pending written back) recovers to another \
                     state: {}",
                    first.first_difference(&state)
                ),
            ));
        }
    }
    if captured.is_empty() || crash_states == 0 {
        return (findings, images);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(derive(seed, &[7]));
    for pick in 0..crash_states.min(captured.len()) {
        let crash = &captured[rng.gen_range(0..captured.len())];
        let image_seed = derive(seed, &[8, pick as u64]);
        // One of the first few images (nothing extra, everything,
        // flushed-but-not-fenced, all but one line, random).
        let nth = rng.gen_range(0..5);
        let Some(image) = crash
            .images(image_seed, RECOVERY_BUDGET)
            .nth(nth)
            .or_else(|| crash.images(image_seed, RECOVERY_BUDGET).next())
        else {
            continue;
        };
        let again = recover_image::<Direct>(harness, options, &image.bytes, None, false, |_| {});
        images += 1;
        for finding in again.findings {
            findings.push(Finding::new(
                "crash-during-recovery",
                format!("{} (crash during recovery at {})", finding.detail, image.description),
            ));
        }
        if let Some(state) = again.state {
            if state != *first {
                findings.push(Finding::new(
                    "crash-during-recovery",
                    format!(
                        "a crash during recovery at {} recovers to another state: {}",
                        image.description,
                        first.first_difference(&state)
                    ),
                ));
            }
        }
    }
    (findings, images)
}
