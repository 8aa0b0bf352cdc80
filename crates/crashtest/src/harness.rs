//! Harness-driven transactions and the model of their acknowledged effects.
//!
//! The workload's own random clients do not say which rows a transaction
//! touched, so the harness runs its own deterministic transactions through
//! the public API, over the workload's tables and with the workload's
//! semantics:
//!
//! * **Smallbank**: DepositChecking, TransactSavings (positive amounts),
//!   SendPayment (unconditional) and Balance over shared accounts (half the
//!   accesses go to 8 hot accounts, so workers conflict). Deposits add to the
//!   worker's ledger row, so the workload's conservation check holds. Every
//!   effect is a pure delta, hence the balances after any set of committed
//!   transactions are exact whatever their serial order.
//! * **YCSB**: 8 operations; reads of any row, whole-row writes of rows owned
//!   by the worker (`key % threads == worker`) with values derived from
//!   `(seed, worker, sequence, key)`: the last value of each row is exact.
//! * **TPC-C**: the workload's random client runs Payment, OrderStatus,
//!   Delivery and StockLevel; whenever it draws NewOrder the harness runs
//!   its own NewOrder (same logic) and remembers the order id it got, so the
//!   recovered orders must be exactly the baseline plus the recovered
//!   NewOrders.
//!
//! Transaction `s` of worker `w` (from 1) also stores `s` in the row `w` of
//! the table `crashtest.acks`, after checking the row held `s - 1`. Its
//! parameters are a function of `(seed, w, s)`, so a parent process can
//! replay a killed child's transactions. About one in twenty is preceded by
//! a *doomed* transaction that writes garbage (and a wrong sequence) and
//! rolls back: none of it may ever be visible.

use crate::state::{hex, DbState, TableRows};
use crate::{derive, Finding};
use pmtx_engine::{
    AbortReason, Database, DbError, KeyBuilder, Outcome, TableId, TableSchema, Transaction, TxError, TxResult, Worker,
};
use pmtx_workloads::smallbank::{self, account_name, custid_key, ledger_key, LEDGER_CLIENT};
use pmtx_workloads::tpcc::{self, keys, rows, Tpcc, TpccClient};
use pmtx_workloads::{ycsb, Workload, WorkloadOptions, YcsbVariant};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The harness's own table: worker (u32 BE) -> last sequence (u64 LE).
pub const ACKS_TABLE: &str = "crashtest.acks";
/// Tags of harness transactions are `TAG_BASE + sequence`; the workload's
/// random client tags with its type index (below this).
pub const TAG_BASE: u32 = 1 << 24;
/// Hot Smallbank accounts (half of the accesses).
const HOT_ACCOUNTS: u64 = 8;
/// YCSB row layout of the harness.
const YCSB_FIELDS: usize = 4;
const YCSB_FIELD_SIZE: usize = 16;
const YCSB_OPS: usize = 8;
/// How long a worker waits for acknowledgements before reporting a stall.
const ACK_TIMEOUT: Duration = Duration::from_secs(60);

/// The workloads the harness drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkloadKind {
    /// Smallbank.
    Smallbank,
    /// YCSB (harness read/write transactions).
    Ycsb,
    /// TPC-C at a reduced scale.
    Tpcc,
}

impl WorkloadKind {
    /// Every workload.
    pub const ALL: [WorkloadKind; 3] = [WorkloadKind::Smallbank, WorkloadKind::Ycsb, WorkloadKind::Tpcc];

    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::Smallbank => "smallbank",
            WorkloadKind::Ycsb => "ycsb",
            WorkloadKind::Tpcc => "tpcc",
        }
    }

    /// Parses a name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.name().eq_ignore_ascii_case(name))
    }
}

impl std::fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Database size of the harness runs (tiny on purpose).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    /// Smallbank accounts.
    pub accounts: u64,
    /// YCSB rows.
    pub records: u64,
    /// TPC-C items and stock rows (non-standard scale).
    pub tpcc_items: u32,
    /// TPC-C customers per district (non-standard scale).
    pub tpcc_customers: u32,
}

impl Default for Scale {
    fn default() -> Self {
        Self { accounts: 200, records: 500, tpcc_items: 1000, tpcc_customers: 30 }
    }
}

/// The `pmtx crashtest` flags of the non-default parts of `scale`.
pub fn scale_flags(scale: &Scale) -> String {
    let default = Scale::default();
    let mut flags = String::new();
    if scale.accounts != default.accounts {
        flags.push_str(&format!(" --accounts {}", scale.accounts));
    }
    if scale.records != default.records {
        flags.push_str(&format!(" --records {}", scale.records));
    }
    if scale.tpcc_items != default.tpcc_items {
        flags.push_str(&format!(" --tpcc-items {}", scale.tpcc_items));
    }
    if scale.tpcc_customers != default.tpcc_customers {
        flags.push_str(&format!(" --tpcc-customers {}", scale.tpcc_customers));
    }
    flags
}

/// One harness transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    /// Smallbank DepositChecking.
    Deposit {
        /// Customer id.
        account: u64,
        /// Cents.
        amount: i64,
    },
    /// Smallbank TransactSavings (a deposit into savings).
    Savings {
        /// Customer id.
        account: u64,
        /// Cents.
        amount: i64,
    },
    /// Smallbank SendPayment (checking to checking, unconditional).
    Send {
        /// Payer.
        from: u64,
        /// Payee.
        to: u64,
        /// Cents.
        amount: i64,
    },
    /// Smallbank Balance (reads both balances).
    Balance {
        /// Customer id.
        account: u64,
    },
    /// YCSB: `(key, write)` operations.
    Ycsb {
        /// Operations in order.
        ops: Vec<(u64, bool)>,
    },
    /// TPC-C NewOrder.
    NewOrder {
        /// District.
        d: u8,
        /// Customer.
        c: u32,
        /// (item, quantity) per line.
        lines: Vec<(u32, u8)>,
    },
}

/// How a harness transaction is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecMode {
    /// `run_pipelined`: acknowledged later by `drain_acknowledged`.
    Pipelined,
    /// `run`: returns once durable.
    Sync,
}

/// The modelled state at the start of a run (or kill iteration).
#[derive(Clone, Debug, Default)]
pub struct Baseline {
    /// Last sequence per worker.
    pub seqs: Vec<u64>,
    /// Rows of the modelled tables, by table name.
    pub modelled: Vec<(String, TableRows)>,
    /// TPC-C: every ORDER key.
    pub orders: BTreeSet<Vec<u8>>,
}

/// Per worker: the recovered sequence must lie in `lower..=upper`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Last sequence acknowledged before the crash.
    pub lower: Vec<u64>,
    /// Last sequence started before the crash.
    pub upper: Vec<u64>,
}

/// Which harness transactions a worker runs (see [`Harness::run_worker`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerPlan {
    /// Worker slot (and harness worker index).
    pub id: usize,
    /// Sequence of the first transaction (the recovered sequence + 1).
    pub first: u64,
    /// How many (`None`: until stopped).
    pub count: Option<u64>,
    /// Report pipelined commits as acknowledged when they return (the
    /// deliberately broken acknowledgement).
    pub fake_ack: bool,
}

/// Why a worker loop stopped early.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkerError {
    /// The pool is full (`DbError::OutOfSpace`): the run outgrew the pool,
    /// not a consistency problem.
    OutOfSpace(String),
    /// Anything else: a failed transaction, a stalled acknowledgement.
    Failed(String),
}

impl std::fmt::Display for WorkerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkerError::OutOfSpace(message) | WorkerError::Failed(message) => f.write_str(message),
        }
    }
}

/// What a worker loop reports.
pub trait WorkerEvents {
    /// The worker was opened (or failed to open) and is about to run its
    /// first transaction.
    fn ready(&mut self) {}
    /// Transaction `s` is about to start (its first attempt).
    fn started(&mut self, s: u64);
    /// Transaction `s` committed (`run`/`run_pipelined` returned); `order` is
    /// the TPC-C order id of a NewOrder.
    fn committed(&mut self, s: u64, order: Option<u32>);
    /// Transaction `s` was acknowledged (durable).
    fn acknowledged(&mut self, s: u64);
}

/// A workload plus the harness transactions and model over it.
pub struct Harness {
    kind: WorkloadKind,
    scale: Scale,
    threads: usize,
    seed: u64,
    options: WorkloadOptions,
    workload: Box<dyn Workload>,
    tpcc: Option<Tpcc>,
    tables: Vec<TableSchema>,
    acks: TableId,
}

fn workload_error(error: pmtx_workloads::WorkloadError) -> String {
    error.to_string()
}

impl Harness {
    /// A harness for `kind` at `scale` with `threads` workers; all
    /// transaction parameters derive from `seed`.
    pub fn new(kind: WorkloadKind, scale: Scale, threads: usize, seed: u64) -> Result<Self, String> {
        if threads == 0 || threads > 64 {
            return Err(format!("threads must be 1..=64, got {threads}"));
        }
        let options = WorkloadOptions {
            accounts: scale.accounts,
            records: scale.records,
            ycsb: YcsbVariant::A,
            theta: 0.0,
            fields: YCSB_FIELDS,
            field_size: YCSB_FIELD_SIZE,
            load_seed: derive(seed, &[0x10AD]),
            ..WorkloadOptions::default()
        }
        .tpcc_scale_for_tests(scale.tpcc_items, scale.tpcc_customers);
        match kind {
            WorkloadKind::Smallbank if scale.accounts < 2 => return Err("smallbank needs at least 2 accounts".into()),
            WorkloadKind::Ycsb if scale.records < threads as u64 => {
                return Err(format!("ycsb needs at least one record per thread ({threads})"))
            }
            WorkloadKind::Tpcc if scale.tpcc_items < 2 || scale.tpcc_customers < 2 => {
                return Err("tpcc needs at least 2 items and 2 customers per district".into())
            }
            _ => {}
        }
        let (workload, tpcc): (Box<dyn Workload>, Option<Tpcc>) = match kind {
            WorkloadKind::Tpcc => (
                Box::new(Tpcc::new(&options).map_err(workload_error)?),
                Some(Tpcc::new(&options).map_err(workload_error)?),
            ),
            other => (pmtx_workloads::by_name(other.name(), &options).map_err(workload_error)?, None),
        };
        let mut tables = workload.tables();
        let acks = TableId(tables.len() as u32);
        tables.push(TableSchema::ordered(ACKS_TABLE).max_key_len(4).max_value_len(8));
        Ok(Self { kind, scale, threads, seed, options, workload, tpcc, tables, acks })
    }

    /// The workload.
    pub fn kind(&self) -> WorkloadKind {
        self.kind
    }

    /// The scale.
    pub fn scale(&self) -> Scale {
        self.scale
    }

    /// Worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The tables to open the database with: the workload's, then the acks
    /// table.
    pub fn tables(&self) -> Vec<TableSchema> {
        self.tables.clone()
    }

    /// Keys of hash table `table` that must exist (Smallbank's account
    /// names, TPC-C's static rows), for [`crate::state::read_state`]: it
    /// reads every row the engine's dump lists and also point-reads these,
    /// so a row the dump misses is caught.
    pub fn hash_keys(&self, table: TableId) -> Vec<Vec<u8>> {
        let (items, customers) = (self.scale.tpcc_items, self.scale.tpcc_customers);
        let districts = || 1..=tpcc::DISTRICTS_PER_WAREHOUSE;
        match self.kind {
            WorkloadKind::Smallbank if table == smallbank::table::ACCOUNTS => {
                (0..self.scale.accounts).map(|account| account_name(account).to_vec()).collect()
            }
            // One warehouse (the options' default).
            WorkloadKind::Tpcc if table == tpcc::table::WAREHOUSE => vec![keys::warehouse(1).to_vec()],
            WorkloadKind::Tpcc if table == tpcc::table::DISTRICT => {
                districts().map(|d| keys::district(1, d).to_vec()).collect()
            }
            WorkloadKind::Tpcc if table == tpcc::table::CUSTOMER => {
                districts().flat_map(|d| (1..=customers).map(move |c| keys::customer(1, d, c).to_vec())).collect()
            }
            WorkloadKind::Tpcc if table == tpcc::table::ITEM => (1..=items).map(|i| keys::item(i).to_vec()).collect(),
            WorkloadKind::Tpcc if table == tpcc::table::STOCK => {
                (1..=items).map(|i| keys::stock(1, i).to_vec()).collect()
            }
            _ => Vec::new(),
        }
    }

    /// Reads (and structurally checks) the whole state of `db`.
    pub fn read_state(&self, db: &Database) -> Result<DbState, Finding> {
        crate::state::read_state(db, &self.tables, &|table| self.hash_keys(table))
    }

    /// Loads the workload's initial database (`threads` loaders).
    pub fn load(&self, db: &std::sync::Arc<Database>) -> Result<(), String> {
        self.workload.load(db, self.threads, &|_, _| {}).map_err(workload_error)
    }

    /// Runs the workload's consistency check (on a fresh workload value, so
    /// TPC-C's in-memory delivery hints of the run are not disturbed).
    pub fn check_workload(&self, db: &std::sync::Arc<Database>) -> Result<(), Finding> {
        let fresh = pmtx_workloads::by_name(self.kind.name(), &self.options)
            .map_err(|error| Finding::new("workload-check", error.to_string()))?;
        match fresh.check(db) {
            Ok(report) if report.passed() => Ok(()),
            Ok(report) => {
                let failed: Vec<String> =
                    report.failures().map(|(name, _, detail)| format!("{name}: {detail}")).collect();
                Err(Finding::new("workload-check", failed.join("; ")))
            }
            Err(error) => Err(Finding::new("workload-check", format!("the check failed to run: {error}"))),
        }
    }

    fn acks_key(worker: usize) -> Vec<u8> {
        KeyBuilder::new().u32(worker as u32).build()
    }

    fn modelled_tables(&self) -> &'static [&'static str] {
        match self.kind {
            WorkloadKind::Smallbank => &["savings", "checking", "ledger"],
            WorkloadKind::Ycsb => &["usertable"],
            WorkloadKind::Tpcc => &[],
        }
    }

    /// The recovered sequence of every worker (absent row = 0).
    pub fn seqs_of(&self, state: &DbState) -> Result<Vec<u64>, Finding> {
        let mut seqs = vec![0u64; self.threads];
        for (key, value) in state.table(ACKS_TABLE) {
            let worker = <[u8; 4]>::try_from(key.as_slice()).map(u32::from_be_bytes).ok();
            let seq = <[u8; 8]>::try_from(value.as_slice()).map(u64::from_le_bytes).ok();
            match (worker, seq) {
                (Some(worker), Some(seq)) if (worker as usize) < self.threads => seqs[worker as usize] = seq,
                _ => {
                    return Err(Finding::new(
                        "model",
                        format!("{ACKS_TABLE} holds an unexpected row {} = {}", hex(key), hex(value)),
                    ))
                }
            }
        }
        Ok(seqs)
    }

    /// The baseline of a (quiescent, verified) state.
    pub fn baseline_of(&self, state: &DbState) -> Result<Baseline, Finding> {
        let seqs = self.seqs_of(state)?;
        let modelled =
            self.modelled_tables().iter().map(|name| (name.to_string(), state.table(name).clone())).collect();
        let orders = match self.kind {
            WorkloadKind::Tpcc => state.table("order").keys().cloned().collect(),
            _ => BTreeSet::new(),
        };
        Ok(Baseline { seqs, modelled, orders })
    }

    fn spec_rng(&self, stream: u64, worker: usize, s: u64) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(derive(self.seed, &[stream, worker as u64, s]))
    }

    fn account(&self, rng: &mut ChaCha8Rng) -> u64 {
        let accounts = self.scale.accounts;
        if rng.gen_bool(0.5) {
            rng.gen_range(0..HOT_ACCOUNTS.min(accounts))
        } else {
            rng.gen_range(0..accounts)
        }
    }

    /// The parameters of transaction `s` (from 1) of `worker`.
    pub fn spec(&self, worker: usize, s: u64) -> Spec {
        let mut rng = self.spec_rng(1, worker, s);
        match self.kind {
            WorkloadKind::Smallbank => match rng.gen_range(0..10u32) {
                0..=2 => Spec::Deposit { account: self.account(&mut rng), amount: rng.gen_range(1..=500) },
                3..=4 => Spec::Savings { account: self.account(&mut rng), amount: rng.gen_range(1..=500) },
                5..=8 => {
                    let from = self.account(&mut rng);
                    let mut to = self.account(&mut rng);
                    if to == from {
                        to = (from + 1) % self.scale.accounts;
                    }
                    Spec::Send { from, to, amount: rng.gen_range(1..=500) }
                }
                _ => Spec::Balance { account: self.account(&mut rng) },
            },
            WorkloadKind::Ycsb => {
                let records = self.scale.records;
                let threads = self.threads as u64;
                let owned = (records - worker as u64).div_ceil(threads);
                let ops = (0..YCSB_OPS)
                    .map(|_| {
                        if rng.gen_bool(0.5) {
                            let hot = rng.gen_bool(0.5);
                            (if hot { rng.gen_range(0..32.min(records)) } else { rng.gen_range(0..records) }, false)
                        } else {
                            let hot = rng.gen_bool(0.5);
                            let index = if hot { rng.gen_range(0..4.min(owned)) } else { rng.gen_range(0..owned) };
                            (index * threads + worker as u64, true)
                        }
                    })
                    .collect();
                Spec::Ycsb { ops }
            }
            WorkloadKind::Tpcc => {
                let d = rng.gen_range(1..=tpcc::DISTRICTS_PER_WAREHOUSE);
                let c = rng.gen_range(1..=self.scale.tpcc_customers);
                let count = rng.gen_range(5..=15usize);
                let lines =
                    (0..count).map(|_| (rng.gen_range(1..=self.scale.tpcc_items), rng.gen_range(1..=10u8))).collect();
                Spec::NewOrder { d, c, lines }
            }
        }
    }

    /// Whether transaction `s` of `worker` is preceded by a doomed
    /// (rolled-back) transaction.
    pub fn doomed(&self, worker: usize, s: u64) -> bool {
        derive(self.seed, &[2, worker as u64, s]).is_multiple_of(20)
    }

    fn ycsb_value(&self, worker: usize, s: u64, key: u64) -> Vec<u8> {
        let mut value = vec![0u8; YCSB_FIELDS * YCSB_FIELD_SIZE];
        self.spec_rng(3 ^ (key << 8), worker, s).fill_bytes(&mut value);
        let header = ycsb::ROW_HEADER;
        value[header..header + 8].copy_from_slice(&(worker as u64).to_le_bytes());
        value[header + 8..header + 16].copy_from_slice(&s.to_le_bytes());
        // The workload's check verifies every row's header: the write
        // version here is the writer's sequence.
        ycsb::seal_row(&ycsb::key(key), s, &mut value);
        value
    }

    /// TPC-C home warehouse of a worker.
    fn home_warehouse(&self, _worker: usize) -> u32 {
        1
    }

    fn bump_ack(&self, tx: &mut Transaction<'_>, worker: usize, s: u64) -> TxResult<()> {
        let key = Self::acks_key(worker);
        let previous = match tx.get(self.acks, &key)? {
            None => 0,
            Some(bytes) => <[u8; 8]>::try_from(bytes.as_slice())
                .map(u64::from_le_bytes)
                .map_err(|_| corrupt(format!("{ACKS_TABLE}[{worker}] holds {} bytes", bytes.len())))?,
        };
        if previous != s - 1 {
            return Err(corrupt(format!(
                "{ACKS_TABLE}[{worker}] holds {previous} but transaction {s} expects {} (a committed transaction of \
                 this worker is missing or a rolled-back one is visible)",
                s - 1
            )));
        }
        tx.put(self.acks, &key, &s.to_le_bytes())
    }

    fn body(
        &self,
        tx: &mut Transaction<'_>,
        worker: usize,
        s: u64,
        spec: &Spec,
        doomed: bool,
    ) -> TxResult<Option<u32>> {
        if doomed {
            // Garbage that must never become visible.
            tx.put(self.acks, &Self::acks_key(worker), &(s + (1 << 40)).to_le_bytes())?;
        } else {
            self.bump_ack(tx, worker, s)?;
        }
        let result = match spec {
            Spec::Deposit { account, amount } => {
                let custid = custid(tx, *account)?;
                let checking = balance(tx, smallbank::table::CHECKING, custid)?;
                tx.update(smallbank::table::CHECKING, &custid_key(custid), &(checking + amount).to_le_bytes())?;
                add_to_ledger(tx, worker, *amount)?;
                None
            }
            Spec::Savings { account, amount } => {
                let custid = custid(tx, *account)?;
                let savings = balance(tx, smallbank::table::SAVINGS, custid)?;
                tx.update(smallbank::table::SAVINGS, &custid_key(custid), &(savings + amount).to_le_bytes())?;
                add_to_ledger(tx, worker, *amount)?;
                None
            }
            Spec::Send { from, to, amount } => {
                let a = custid(tx, *from)?;
                let b = custid(tx, *to)?;
                let checking_a = balance(tx, smallbank::table::CHECKING, a)?;
                let checking_b = balance(tx, smallbank::table::CHECKING, b)?;
                tx.update(smallbank::table::CHECKING, &custid_key(a), &(checking_a - amount).to_le_bytes())?;
                tx.update(smallbank::table::CHECKING, &custid_key(b), &(checking_b + amount).to_le_bytes())?;
                None
            }
            Spec::Balance { account } => {
                let custid = custid(tx, *account)?;
                balance(tx, smallbank::table::SAVINGS, custid)?;
                balance(tx, smallbank::table::CHECKING, custid)?;
                None
            }
            Spec::Ycsb { ops } => {
                for &(key, write) in ops {
                    let row = ycsb::key(key);
                    if write {
                        let value = if doomed {
                            vec![0xEE; YCSB_FIELDS * YCSB_FIELD_SIZE]
                        } else {
                            self.ycsb_value(worker, s, key)
                        };
                        if !tx.update(ycsb::table::USERTABLE, &row, &value)? {
                            return Err(corrupt(format!("ycsb row {key} is missing")));
                        }
                    } else if tx.get(ycsb::table::USERTABLE, &row)?.is_none() {
                        return Err(corrupt(format!("ycsb row {key} is missing")));
                    }
                }
                None
            }
            Spec::NewOrder { d, c, lines } => {
                let mut lines = lines.clone();
                if doomed {
                    // TPC-C's own rollback: an unused item id on the last line.
                    if let Some(last) = lines.last_mut() {
                        last.0 = self.scale.tpcc_items + 1;
                    }
                }
                Some(new_order(tx, self.home_warehouse(worker), *d, *c, &lines)?)
            }
        };
        if doomed {
            if let Spec::Deposit { account, .. } | Spec::Savings { account, .. } | Spec::Balance { account } = spec {
                tx.update(smallbank::table::CHECKING, &custid_key(*account), &(1i64 << 50).to_le_bytes())?;
            }
            return Err(tx.rollback());
        }
        Ok(result)
    }

    /// Runs transaction `s` of `worker` (which must be the worker's next).
    pub fn execute(&self, worker: &mut Worker, id: usize, s: u64, mode: ExecMode) -> Result<Option<u32>, DbError> {
        let spec = self.spec(id, s);
        let body = |tx: &mut Transaction<'_>| self.body(tx, id, s, &spec, false);
        let outcome = match mode {
            ExecMode::Pipelined => worker.run_pipelined(TAG_BASE + s as u32, false, body)?.0,
            ExecMode::Sync => worker.run(body)?.outcome,
        };
        match outcome {
            Outcome::Committed(order) => Ok(order),
            Outcome::RolledBack => Err(DbError::Corrupt(format!("harness transaction {s} of worker {id} rolled back"))),
        }
    }

    /// Runs the doomed transaction before `s` (it must roll back).
    pub fn run_doomed(&self, worker: &mut Worker, id: usize, s: u64) -> Result<(), DbError> {
        let spec = self.spec(id, s);
        let (outcome, _) = worker.run_pipelined(0, false, |tx| self.body(tx, id, s, &spec, true))?;
        match outcome {
            Outcome::RolledBack => Ok(()),
            Outcome::Committed(_) => {
                Err(DbError::Corrupt(format!("doomed transaction before {s} of worker {id} committed")))
            }
        }
    }

    /// The TPC-C random client of `worker` (other workloads: none). Every
    /// client of a harness shares its in-memory delivery hints.
    pub fn random_client(&self, worker: usize) -> Option<TpccClient> {
        self.tpcc.as_ref().map(|tpcc| tpcc.tpcc_client(worker, self.threads, derive(self.seed, &[5, worker as u64])))
    }

    /// The worker loop: harness transactions `first..first + count` (or
    /// until `stop`), mixed with the TPC-C random client's other
    /// transactions. One in eight runs synchronously (`run`), the others
    /// pipelined. With `fake_ack` a pipelined commit is reported as
    /// acknowledged when `run_pipelined` returns — the deliberately broken
    /// acknowledgement the oracle must catch.
    pub fn run_worker(
        &self,
        db: &Database,
        plan: WorkerPlan,
        stop: &AtomicBool,
        events: &mut dyn WorkerEvents,
    ) -> Result<(), WorkerError> {
        let WorkerPlan { id, first, count, fake_ack } = plan;
        let worker = db.worker(id);
        events.ready();
        let mut worker = worker.map_err(|error| WorkerError::Failed(format!("worker {id}: {error}")))?;
        let mut client = self.random_client(id);
        let mut rng = self.spec_rng(4, id, first);
        let end = count.map(|count| first + count);
        let fail = |s: u64, error: DbError| match error {
            DbError::OutOfSpace(_) => WorkerError::OutOfSpace(format!("worker {id}, transaction {s}: {error}")),
            other => WorkerError::Failed(format!("worker {id}, transaction {s}: {other}")),
        };
        let mut s = first;
        while !stop.load(Ordering::Relaxed) && end.is_none_or(|end| s < end) {
            if let Some(client) = client.as_mut() {
                let kind = client.next_type();
                if kind != tpcc::NEW_ORDER {
                    client.run_type(&mut worker, kind).map_err(|error| fail(s, error))?;
                    drain(&mut worker, fake_ack, events);
                    continue;
                }
            }
            if self.doomed(id, s) {
                self.run_doomed(&mut worker, id, s).map_err(|error| fail(s, error))?;
            }
            if rng.gen_ratio(1, 8) {
                // Keep acknowledgements in commit order.
                wait_all(&mut worker, fake_ack, events).map_err(WorkerError::Failed)?;
                events.started(s);
                let order = self.execute(&mut worker, id, s, ExecMode::Sync).map_err(|error| fail(s, error))?;
                events.committed(s, order);
                events.acknowledged(s);
            } else {
                events.started(s);
                let order = self.execute(&mut worker, id, s, ExecMode::Pipelined).map_err(|error| fail(s, error))?;
                events.committed(s, order);
                if fake_ack {
                    events.acknowledged(s);
                }
            }
            drain(&mut worker, fake_ack, events);
            if rng.gen_ratio(1, 24) {
                wait_all(&mut worker, fake_ack, events).map_err(WorkerError::Failed)?;
            }
            s += 1;
        }
        wait_all(&mut worker, fake_ack, events).map_err(WorkerError::Failed)
    }

    /// Checks a recovered state against the model: bounds of every worker's
    /// recovered sequence, the modelled rows, and (TPC-C) the orders.
    /// `order_of(w, s)` is the order id NewOrder `s` of `w` got, if known.
    pub fn verify(
        &self,
        state: &DbState,
        baseline: &Baseline,
        bounds: &Bounds,
        order_of: &dyn Fn(usize, u64) -> Option<u32>,
    ) -> Vec<Finding> {
        let mut findings = Vec::new();
        let seqs = match self.seqs_of(state) {
            Ok(seqs) => seqs,
            Err(finding) => return vec![finding],
        };
        let mut model_ok = true;
        for (worker, ((&s, &lower), &upper)) in seqs.iter().zip(&bounds.lower).zip(&bounds.upper).enumerate() {
            if s < lower {
                findings.push(Finding::new(
                    "acknowledged-lost",
                    format!(
                        "worker {worker}: recovered through transaction {s}, but transaction {lower} was acknowledged \
                         before the crash point"
                    ),
                ));
            }
            if s > upper {
                model_ok = false;
                findings.push(Finding::new(
                    "unstarted-visible",
                    format!("worker {worker}: recovered through transaction {s}, but only {upper} had started"),
                ));
            }
            if s < baseline.seqs[worker] {
                model_ok = false;
            }
        }
        if !model_ok {
            return findings;
        }
        let describe =
            || format!("recovered worker sequences {seqs:?}, bounds {:?}..={:?}", bounds.lower, bounds.upper);
        // Modelled rows.
        let mut expected: BTreeMap<String, TableRows> = baseline.modelled.iter().cloned().collect();
        for (worker, &s) in seqs.iter().enumerate() {
            for t in baseline.seqs[worker] + 1..=s {
                self.apply(&mut expected, worker, t);
            }
        }
        for (name, rows) in &expected {
            let actual = state.table(name);
            if actual != rows {
                let mine = DbState { tables: vec![(name.clone(), actual.clone())] };
                let model = DbState { tables: vec![(name.clone(), rows.clone())] };
                findings.push(Finding::new(
                    "model",
                    format!(
                        "recovered rows differ from the acknowledged-effects model (partial, lost or rolled-back \
                         effects): {} (recovered vs model); {}",
                        mine.first_difference(&model),
                        describe()
                    ),
                ));
            }
        }
        if self.kind == WorkloadKind::Tpcc {
            findings.extend(self.verify_orders(state, baseline, &seqs, order_of, &describe));
        }
        findings
    }

    fn apply(&self, tables: &mut BTreeMap<String, TableRows>, worker: usize, s: u64) {
        let add = |tables: &mut BTreeMap<String, TableRows>, table: &str, key: Vec<u8>, delta: i64| {
            let rows = tables.entry(table.to_string()).or_default();
            let current =
                rows.get(&key).and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok()).map_or(0, i64::from_le_bytes);
            rows.insert(key, (current + delta).to_le_bytes().to_vec());
        };
        let ledger = ledger_key(LEDGER_CLIENT, worker as u32).to_vec();
        match self.spec(worker, s) {
            Spec::Deposit { account, amount } => {
                add(tables, "checking", custid_key(account).to_vec(), amount);
                add(tables, "ledger", ledger, amount);
            }
            Spec::Savings { account, amount } => {
                add(tables, "savings", custid_key(account).to_vec(), amount);
                add(tables, "ledger", ledger, amount);
            }
            Spec::Send { from, to, amount } => {
                add(tables, "checking", custid_key(from).to_vec(), -amount);
                add(tables, "checking", custid_key(to).to_vec(), amount);
            }
            Spec::Balance { .. } | Spec::NewOrder { .. } => {}
            Spec::Ycsb { ops } => {
                let rows = tables.entry("usertable".to_string()).or_default();
                for (key, write) in ops {
                    if write {
                        rows.insert(ycsb::key(key).to_vec(), self.ycsb_value(worker, s, key));
                    }
                }
            }
        }
    }

    fn verify_orders(
        &self,
        state: &DbState,
        baseline: &Baseline,
        seqs: &[u64],
        order_of: &dyn Fn(usize, u64) -> Option<u32>,
        describe: &dyn Fn() -> String,
    ) -> Vec<Finding> {
        let mut findings = Vec::new();
        let orders = state.table("order");
        if let Some(lost) = baseline.orders.iter().find(|key| !orders.contains_key(*key)) {
            findings
                .push(Finding::new("model", format!("order {} of the baseline is gone; {}", hex(lost), describe())));
        }
        let mut new: BTreeMap<&Vec<u8>, &Vec<u8>> =
            orders.iter().filter(|(key, _)| !baseline.orders.contains(*key)).collect();
        // (w, d, c, ol_cnt) of recovered NewOrders whose order id is unknown.
        let mut unknown: Vec<(u32, u8, u32, u8, usize, u64)> = Vec::new();
        for (worker, &s) in seqs.iter().enumerate() {
            for t in baseline.seqs[worker] + 1..=s {
                let Spec::NewOrder { d, c, lines } = self.spec(worker, t) else { continue };
                let w = self.home_warehouse(worker);
                let Some(o) = order_of(worker, t) else {
                    unknown.push((w, d, c, lines.len() as u8, worker, t));
                    continue;
                };
                let key = keys::order(w, d, o).to_vec();
                match new.remove(&key).map(|value| rows::Order::decode(value)) {
                    Some(Ok(order)) if order.c_id == c && order.ol_cnt as usize == lines.len() => {}
                    Some(other) => findings.push(Finding::new(
                        "model",
                        format!(
                            "order ({w}, {d}, {o}) of NewOrder {t} of worker {worker} holds {other:?}, expected customer \
                             {c} with {} lines; {}",
                            lines.len(),
                            describe()
                        ),
                    )),
                    None => findings.push(Finding::new(
                        "model",
                        format!(
                            "order ({w}, {d}, {o}) of recovered NewOrder {t} of worker {worker} is missing (partial \
                             transaction); {}",
                            describe()
                        ),
                    )),
                }
            }
        }
        for (w, d, c, ol_cnt, worker, t) in unknown {
            let found = new.iter().find_map(|(key, value)| {
                let matches = keys::district_of(key) == Some((w, d))
                    && rows::Order::decode(value).is_ok_and(|order| order.c_id == c && order.ol_cnt == ol_cnt);
                matches.then(|| (*key).clone())
            });
            match found {
                Some(key) => {
                    new.remove(&key);
                }
                None => findings.push(Finding::new(
                    "model",
                    format!(
                        "no order of recovered NewOrder {t} of worker {worker} (district {d}, customer {c}); {}",
                        describe()
                    ),
                )),
            }
        }
        if let Some((key, _)) = new.iter().next() {
            findings.push(Finding::new(
                "model",
                format!(
                    "{} recovered orders were made by no recovered NewOrder (unacknowledged or rolled-back effects), \
                     first {}; {}",
                    new.len(),
                    hex(key),
                    describe()
                ),
            ));
        }
        findings
    }
}

fn corrupt(message: String) -> TxError {
    TxError::Db(DbError::Corrupt(message))
}

fn custid(tx: &mut Transaction<'_>, account: u64) -> TxResult<u64> {
    match tx.get(smallbank::table::ACCOUNTS, &account_name(account))? {
        Some(value) if value == account.to_le_bytes() => Ok(account),
        Some(value) => Err(corrupt(format!("smallbank: account {account} maps to {}", hex(&value)))),
        None => Err(corrupt(format!("smallbank: account {account} is missing"))),
    }
}

fn balance(tx: &mut Transaction<'_>, table: TableId, custid: u64) -> TxResult<i64> {
    match tx.get(table, &custid_key(custid))? {
        Some(value) => <[u8; 8]>::try_from(value.as_slice())
            .map(i64::from_le_bytes)
            .map_err(|_| corrupt(format!("smallbank: balance of {} bytes", value.len()))),
        None => Err(corrupt(format!("smallbank: no balance row for customer {custid}"))),
    }
}

fn add_to_ledger(tx: &mut Transaction<'_>, worker: usize, amount: i64) -> TxResult<()> {
    let key = ledger_key(LEDGER_CLIENT, worker as u32);
    let current = match tx.get(smallbank::table::LEDGER, &key)? {
        Some(value) => <[u8; 8]>::try_from(value.as_slice())
            .map(i64::from_le_bytes)
            .map_err(|_| corrupt("smallbank: bad ledger row".to_string()))?,
        None => 0,
    };
    tx.put(smallbank::table::LEDGER, &key, &(current + amount).to_le_bytes())
}

fn required(tx: &mut Transaction<'_>, table: TableId, key: &[u8], what: &str) -> TxResult<Vec<u8>> {
    tx.get(table, key)?.ok_or_else(|| corrupt(format!("tpcc: missing {what} row {}", hex(key))))
}

/// TPC-C NewOrder (clause 2.4) as the workload runs it; returns the order id.
fn new_order(tx: &mut Transaction<'_>, w: u32, d: u8, c: u32, lines: &[(u32, u8)]) -> TxResult<u32> {
    use rows::{Customer, District, Item, Order, OrderLine, Stock, Warehouse};
    let table = tpcc::table::WAREHOUSE;
    let _warehouse = Warehouse::decode(&required(tx, table, &keys::warehouse(w), "warehouse")?)?;
    let district_key = keys::district(w, d);
    let mut district = District::decode(&required(tx, tpcc::table::DISTRICT, &district_key, "district")?)?;
    let o = district.next_o_id;
    district.next_o_id += 1;
    tx.update(tpcc::table::DISTRICT, &district_key, &district.encode())?;
    let _customer = Customer::decode(&required(tx, tpcc::table::CUSTOMER, &keys::customer(w, d, c), "customer")?)?;
    let order = Order {
        c_id: c,
        entry_d: pmtx_workloads::gen::now_millis(),
        carrier_id: 0,
        ol_cnt: lines.len() as u8,
        all_local: 1,
    };
    // A taken order id means the district read was stale: retry (as the
    // workload's client does).
    if !tx.insert(tpcc::table::ORDER, &keys::order(w, d, o), &order.encode())? {
        return Err(TxError::Abort(AbortReason::ReadValidation));
    }
    if !tx.insert(tpcc::table::NEW_ORDER, &keys::new_order(w, d, o), rows::NEW_ORDER_VALUE)? {
        return Err(TxError::Abort(AbortReason::ReadValidation));
    }
    for (number, &(item_id, quantity)) in lines.iter().enumerate() {
        let Some(item) = tx.get(tpcc::table::ITEM, &keys::item(item_id))? else {
            return Err(tx.rollback());
        };
        let item = Item::decode(&item)?;
        let stock_key = keys::stock(w, item_id);
        let mut stock = Stock::decode(&required(tx, tpcc::table::STOCK, &stock_key, "stock")?)?;
        let q = quantity as i32;
        stock.quantity = if stock.quantity >= q + 10 { stock.quantity - q } else { stock.quantity - q + 91 };
        stock.ytd += quantity as u32;
        stock.order_cnt += 1;
        tx.update(tpcc::table::STOCK, &stock_key, &stock.encode())?;
        let line = OrderLine {
            i_id: item_id,
            supply_w_id: w,
            delivery_d: 0,
            quantity,
            amount: quantity as i64 * item.price,
            dist_info: stock.dist_info(d),
        };
        tx.insert(tpcc::table::ORDER_LINE, &keys::order_line(w, d, o, number as u8 + 1), &line.encode())?;
    }
    Ok(o)
}

fn drain(worker: &mut Worker, fake_ack: bool, events: &mut dyn WorkerEvents) {
    worker.drain_acknowledged(|tag, _| {
        if !fake_ack && tag >= TAG_BASE {
            events.acknowledged((tag - TAG_BASE) as u64);
        }
    });
}

fn wait_all(worker: &mut Worker, fake_ack: bool, events: &mut dyn WorkerEvents) -> Result<(), String> {
    let started = Instant::now();
    loop {
        drain(worker, fake_ack, events);
        let pending = worker.pending_acknowledgements();
        if pending == 0 {
            return Ok(());
        }
        if started.elapsed() > ACK_TIMEOUT {
            return Err(format!(
                "{pending} commits still unacknowledged after {} s (the engine stopped making commits durable)",
                ACK_TIMEOUT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}
