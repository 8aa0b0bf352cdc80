//! Smallbank (Alomari et al., ICDE 2008; the H-Store / OLTP-Bench version):
//! accounts (name -> customer id), savings and checking balances, six
//! transactions in the usual mix.
//!
//! Money is integer cents (`i64`). To make conservation checkable, every
//! transaction that changes the total (DepositChecking, TransactSavings,
//! WriteCheck) adds the change to its worker's row of a `ledger` table in
//! the same transaction, and every load transaction adds the money it
//! created to its load thread's ledger row. Hence
//! `sum(savings) + sum(checking) == sum(ledger)` holds exactly after a load,
//! a run or a crash recovery.

use crate::common::{insert_all, load_parallel, scan_pages, verify_tables};
use crate::gen::{child_seed, rng, Mix, WorkloadRng};
use crate::{CheckReport, Client, TxnSummary, Workload, WorkloadError, WorkloadOptions};
use pmtx_engine::{Database, DbError, Outcome, TableId, TableSchema, Transaction, TxError, Worker};
use rand::Rng;
use std::sync::Arc;

/// Transaction type names (the index is the type index).
pub const TRANSACTION_TYPES: [&str; 6] =
    ["amalgamate", "balance", "deposit_checking", "send_payment", "transact_savings", "write_check"];
/// Weights of the usual mix, in the order of [`TRANSACTION_TYPES`].
pub const MIX: [u32; 6] = [15, 15, 15, 25, 15, 15];
/// Type index of Amalgamate.
pub const AMALGAMATE: usize = 0;
/// Type index of Balance.
pub const BALANCE: usize = 1;
/// Type index of DepositChecking.
pub const DEPOSIT_CHECKING: usize = 2;
/// Type index of SendPayment.
pub const SEND_PAYMENT: usize = 3;
/// Type index of TransactSavings.
pub const TRANSACT_SAVINGS: usize = 4;
/// Type index of WriteCheck.
pub const WRITE_CHECK: usize = 5;

/// Smallest initial balance (cents) of each account.
pub const MIN_BALANCE: i64 = 10_000;
/// Largest initial balance (cents) of each account.
pub const MAX_BALANCE: i64 = 50_000;
/// WriteCheck's overdraft penalty (cents).
pub const OVERDRAFT_PENALTY: i64 = 100;

/// Table ids: positions in [`Smallbank::tables`](crate::Workload::tables).
pub mod table {
    use pmtx_engine::TableId;
    /// ACCOUNTS: name -> customer id (hash index).
    pub const ACCOUNTS: TableId = TableId(0);
    /// SAVINGS: customer id -> balance.
    pub const SAVINGS: TableId = TableId(1);
    /// CHECKING: customer id -> balance.
    pub const CHECKING: TableId = TableId(2);
    /// LEDGER: (kind, index) -> money added by that worker / load thread.
    pub const LEDGER: TableId = TableId(3);
    /// Table names, by id.
    pub const NAMES: [&str; 4] = ["accounts", "savings", "checking", "ledger"];
}

/// Ledger rows of clients (index = worker index).
pub const LEDGER_CLIENT: u8 = 0;
/// Ledger rows of load threads (index = worker slot).
pub const LEDGER_LOAD: u8 = 1;

/// The name of account `custid` (< 10^12): "cust" and 12 digits.
pub fn account_name(custid: u64) -> [u8; 16] {
    debug_assert!(custid < 1_000_000_000_000);
    let mut name = *b"cust000000000000";
    let mut rest = custid;
    for digit in name[4..].iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    name
}

/// The key of a customer id in SAVINGS and CHECKING.
pub fn custid_key(custid: u64) -> [u8; 8] {
    custid.to_be_bytes()
}

/// A LEDGER key.
pub fn ledger_key(kind: u8, index: u32) -> [u8; 5] {
    let mut key = [kind, 0, 0, 0, 0];
    key[1..].copy_from_slice(&index.to_be_bytes());
    key
}

fn money(bytes: &[u8]) -> Result<i64, DbError> {
    Ok(i64::from_le_bytes(
        bytes.try_into().map_err(|_| DbError::Corrupt(format!("smallbank: balance of {} bytes", bytes.len())))?,
    ))
}

struct Shared {
    accounts: u64,
    hotspot: Option<u64>,
    hotspot_probability: f64,
    load_seed: u64,
    mix: Mix,
}

/// The Smallbank workload.
pub struct Smallbank {
    shared: Arc<Shared>,
}

impl Smallbank {
    /// Smallbank with `options.accounts` accounts and the optional hotspot.
    pub fn new(options: &WorkloadOptions) -> Result<Self, WorkloadError> {
        if options.accounts < 2 || options.accounts >= 1_000_000_000_000 {
            return Err(WorkloadError::InvalidOption(format!(
                "smallbank: accounts must be 2..10^12, got {}",
                options.accounts
            )));
        }
        if let Some(hot) = options.hotspot {
            if hot == 0 || hot > options.accounts {
                return Err(WorkloadError::InvalidOption(format!(
                    "smallbank: hotspot must be 1..={} accounts, got {hot}",
                    options.accounts
                )));
            }
        }
        if !(0.0..=1.0).contains(&options.hotspot_probability) {
            return Err(WorkloadError::InvalidOption(format!(
                "smallbank: hotspot probability must be in [0, 1], got {}",
                options.hotspot_probability
            )));
        }
        Ok(Self {
            shared: Arc::new(Shared {
                accounts: options.accounts,
                hotspot: options.hotspot,
                hotspot_probability: options.hotspot_probability,
                load_seed: options.load_seed,
                mix: Mix::new(&MIX),
            }),
        })
    }

    /// A concrete client (what [`Workload::client`] boxes).
    pub fn smallbank_client(&self, worker_index: usize, seed: u64) -> SmallbankClient {
        SmallbankClient {
            shared: Arc::clone(&self.shared),
            rng: rng(child_seed(seed, worker_index as u64)),
            ledger: ledger_key(LEDGER_CLIENT, worker_index as u32),
        }
    }
}

const ACCOUNTS_PER_TASK: u64 = 100;

impl Workload for Smallbank {
    fn name(&self) -> &'static str {
        "smallbank"
    }

    fn tables(&self) -> Vec<TableSchema> {
        vec![
            TableSchema::hashed(table::NAMES[0]).max_key_len(16).max_value_len(8),
            TableSchema::ordered(table::NAMES[1]).max_key_len(8).max_value_len(8),
            TableSchema::ordered(table::NAMES[2]).max_key_len(8).max_value_len(8),
            TableSchema::ordered(table::NAMES[3]).max_key_len(5).max_value_len(8),
        ]
    }

    fn transaction_types(&self) -> &'static [&'static str] {
        &TRANSACTION_TYPES
    }

    fn load(
        &self,
        db: &Arc<Database>,
        threads: usize,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<(), WorkloadError> {
        verify_tables(db, &self.tables())?;
        let accounts = self.shared.accounts;
        let tasks: Vec<u64> = (0..accounts).step_by(ACCOUNTS_PER_TASK as usize).collect();
        load_parallel(db, threads, &tasks, accounts * 3, progress, |worker, slot, index, &first| {
            let mut rng = rng(child_seed(self.shared.load_seed, index as u64));
            let mut rows = Vec::with_capacity(3 * ACCOUNTS_PER_TASK as usize);
            let mut created = 0i64;
            for custid in first..(first + ACCOUNTS_PER_TASK).min(accounts) {
                let savings = rng.gen_range(MIN_BALANCE..=MAX_BALANCE);
                let checking = rng.gen_range(MIN_BALANCE..=MAX_BALANCE);
                created += savings + checking;
                rows.push((table::ACCOUNTS, account_name(custid).to_vec(), custid.to_le_bytes().to_vec()));
                rows.push((table::SAVINGS, custid_key(custid).to_vec(), savings.to_le_bytes().to_vec()));
                rows.push((table::CHECKING, custid_key(custid).to_vec(), checking.to_le_bytes().to_vec()));
            }
            let ledger = ledger_key(LEDGER_LOAD, slot as u32);
            worker.run_pipelined(0, false, |tx| {
                insert_all(tx, &rows)?;
                add_to_ledger(tx, &ledger, created)
            })?;
            Ok(rows.len() as u64)
        })
    }

    fn client(&self, worker_index: usize, _threads: usize, seed: u64) -> Box<dyn Client> {
        Box::new(self.smallbank_client(worker_index, seed))
    }

    fn check(&self, db: &Arc<Database>) -> Result<CheckReport, WorkloadError> {
        verify_tables(db, &self.tables())?;
        let accounts = self.shared.accounts;
        let mut worker = db.worker(0)?;
        let mut report = CheckReport::default();

        // Every name maps to its customer id (hash table: point reads). A
        // batch that rolls back is run again; one that keeps rolling back
        // is reported unchecked, which fails the check.
        let (mut missing, mut wrong, mut unchecked) = (0u64, 0u64, 0u64);
        for first in (0..accounts).step_by(1000) {
            let last = (first + 1000).min(accounts);
            let mut checked = false;
            for _ in 0..CHECK_BATCH_ATTEMPTS {
                let (outcome, _) = worker.run_pipelined(0, true, |tx| {
                    let (mut missing, mut wrong) = (0u64, 0u64);
                    for custid in first..last {
                        match tx.get(table::ACCOUNTS, &account_name(custid))? {
                            None => missing += 1,
                            Some(value) if value != custid.to_le_bytes() => wrong += 1,
                            Some(_) => {}
                        }
                    }
                    Ok((missing, wrong))
                })?;
                worker.drain_acknowledged(|_, _| {});
                if let Outcome::Committed((m, w)) = outcome {
                    missing += m;
                    wrong += w;
                    checked = true;
                    break;
                }
            }
            unchecked += (!checked) as u64 * (last - first);
        }
        report.push(
            "accounts",
            missing == 0 && wrong == 0 && unchecked == 0,
            format!(
                "{accounts} names: {missing} missing, {wrong} with a wrong customer id, {unchecked} not checked (their \
                 read-only batch rolled back {CHECK_BATCH_ATTEMPTS} times)"
            ),
        );

        let mut totals = [0i64; 2];
        for (position, id) in [table::SAVINGS, table::CHECKING].into_iter().enumerate() {
            let (mut rows, mut out_of_range, mut negative) = (0u64, 0u64, 0u64);
            let mut total = 0i64;
            scan_pages(&mut worker, id, &[], None, |key, value| {
                rows += 1;
                let custid = key.try_into().map(u64::from_be_bytes).unwrap_or(u64::MAX);
                out_of_range += (custid >= accounts) as u64;
                let balance = money(value)?;
                negative += (balance < 0) as u64;
                total += balance;
                Ok(())
            })?;
            totals[position] = total;
            let name = table::NAMES[id.0 as usize];
            report.push(
                format!("{name} rows"),
                rows == accounts && out_of_range == 0,
                format!("{rows} rows ({out_of_range} with a bad key), expected {accounts}"),
            );
            if id == table::SAVINGS {
                report.push(
                    "savings non-negative",
                    negative == 0,
                    format!("{negative} accounts with negative savings"),
                );
            }
        }
        let mut ledger = 0i64;
        scan_pages(&mut worker, table::LEDGER, &[], None, |_, value| {
            ledger += money(value)?;
            Ok(())
        })?;
        let held = totals[0] + totals[1];
        report.push(
            "conservation",
            held == ledger,
            format!(
                "savings {} + checking {} = {held} cents; ledger (loaded + net deposits) = {ledger} cents",
                totals[0], totals[1]
            ),
        );
        Ok(report)
    }
}

/// Runs of a rolled-back batch of the check's account reads before its
/// accounts are reported unchecked.
const CHECK_BATCH_ATTEMPTS: u32 = 3;

/// Adds `amount` to the ledger row `key` (inserting it the first time).
fn add_to_ledger(tx: &mut Transaction<'_>, key: &[u8], amount: i64) -> Result<(), TxError> {
    match tx.update_with(table::LEDGER, key, |row| add_money(row, amount))? {
        Some(added) => added,
        None => tx.put(table::LEDGER, key, &amount.to_le_bytes()),
    }
}

/// A Smallbank client.
pub struct SmallbankClient {
    shared: Arc<Shared>,
    rng: WorkloadRng,
    ledger: [u8; 5],
}

/// The balance in a SAVINGS, CHECKING or LEDGER row.
fn read_money(row: &[u8]) -> Result<i64, TxError> {
    Ok(money(row)?)
}

/// Adds `amount` to the balance in `row`, in place.
fn add_money(row: &mut [u8], amount: i64) -> Result<(), TxError> {
    let balance = read_money(row)?;
    row.copy_from_slice(&(balance + amount).to_le_bytes());
    Ok(())
}

/// The customer id of `name`; rolls back if there is none (as the original).
fn custid_of(tx: &mut Transaction<'_>, name: &[u8]) -> Result<u64, TxError> {
    let custid = tx.get_with(table::ACCOUNTS, name, |value| {
        <[u8; 8]>::try_from(value)
            .map(u64::from_le_bytes)
            .map_err(|_| TxError::Db(DbError::Corrupt("smallbank: bad account row".into())))
    })?;
    match custid {
        Some(custid) => custid,
        None => Err(tx.rollback()),
    }
}

fn no_balance_row(custid: u64) -> TxError {
    TxError::Db(DbError::Corrupt(format!("smallbank: no balance row for customer {custid}")))
}

fn balance(tx: &mut Transaction<'_>, table: TableId, custid: u64) -> Result<i64, TxError> {
    tx.get_with(table, &custid_key(custid), read_money)?.unwrap_or_else(|| Err(no_balance_row(custid)))
}

/// Changes the balance of `custid` in place to `change(balance)` and returns
/// the old balance; `change` returning `None` leaves it as it was.
fn change_balance(
    tx: &mut Transaction<'_>,
    table: TableId,
    custid: u64,
    change: impl FnOnce(i64) -> Option<i64>,
) -> Result<(i64, bool), TxError> {
    let result = tx.update_with(table, &custid_key(custid), |row| {
        let old = read_money(row)?;
        let new = change(old);
        if let Some(new) = new {
            row.copy_from_slice(&new.to_le_bytes());
        }
        Ok((old, new.is_some()))
    })?;
    result.unwrap_or_else(|| Err(no_balance_row(custid)))
}

impl SmallbankClient {
    /// Draws the next transaction type from the mix.
    pub fn next_type(&mut self) -> usize {
        self.shared.mix.pick(&mut self.rng)
    }

    /// An account: with the hotspot, a hot one (`0..hot`) with the hotspot
    /// probability, else a cold one; otherwise uniform.
    pub fn account(&mut self) -> u64 {
        let n = self.shared.accounts;
        match self.shared.hotspot {
            Some(hot) if hot >= n || self.rng.gen_bool(self.shared.hotspot_probability) => self.rng.gen_range(0..hot),
            Some(hot) => self.rng.gen_range(hot..n),
            None => self.rng.gen_range(0..n),
        }
    }

    fn two_accounts(&mut self) -> (u64, u64) {
        let first = self.account();
        loop {
            let second = self.account();
            if second != first {
                return (first, second);
            }
        }
    }

    /// Runs one transaction of type `type_index`.
    pub fn run_type(&mut self, worker: &mut Worker, type_index: usize) -> Result<TxnSummary, DbError> {
        // One function per type, never inlined: an instruction counter
        // attributes each type's cost by its name (`cargo xtask instructions`).
        let (committed, attempts) = match type_index {
            AMALGAMATE => self.amalgamate(worker)?,
            BALANCE => self.balance(worker)?,
            DEPOSIT_CHECKING => self.deposit_checking(worker)?,
            SEND_PAYMENT => self.send_payment(worker)?,
            TRANSACT_SAVINGS => self.transact_savings(worker)?,
            WRITE_CHECK => self.write_check(worker)?,
            other => return Err(DbError::InvalidConfig(format!("smallbank: no transaction type {other}"))),
        };
        Ok(TxnSummary { type_index, committed, attempts })
    }

    #[inline(never)]
    fn amalgamate(&mut self, worker: &mut Worker) -> Result<(bool, u32), DbError> {
        let (a, b) = self.two_accounts();
        let (name_a, name_b) = (account_name(a), account_name(b));
        run(worker, AMALGAMATE, false, |tx| {
            let a = custid_of(tx, &name_a)?;
            let b = custid_of(tx, &name_b)?;
            let (savings_a, _) = change_balance(tx, table::SAVINGS, a, |_| Some(0))?;
            let (checking_a, _) = change_balance(tx, table::CHECKING, a, |_| Some(0))?;
            change_balance(tx, table::CHECKING, b, |checking_b| Some(checking_b + savings_a + checking_a))?;
            Ok(())
        })
    }

    #[inline(never)]
    fn balance(&mut self, worker: &mut Worker) -> Result<(bool, u32), DbError> {
        let name = account_name(self.account());
        run(worker, BALANCE, true, |tx| {
            let custid = custid_of(tx, &name)?;
            Ok(balance(tx, table::SAVINGS, custid)? + balance(tx, table::CHECKING, custid)?)
        })
    }

    #[inline(never)]
    fn deposit_checking(&mut self, worker: &mut Worker) -> Result<(bool, u32), DbError> {
        let ledger = self.ledger;
        let ledger = &ledger[..];
        let name = account_name(self.account());
        let amount: i64 = self.rng.gen_range(1..=5_000);
        run(worker, DEPOSIT_CHECKING, false, |tx| {
            if amount < 0 {
                return Err(tx.rollback());
            }
            let custid = custid_of(tx, &name)?;
            change_balance(tx, table::CHECKING, custid, |checking| Some(checking + amount))?;
            add_to_ledger(tx, ledger, amount)
        })
    }

    #[inline(never)]
    fn send_payment(&mut self, worker: &mut Worker) -> Result<(bool, u32), DbError> {
        let (a, b) = self.two_accounts();
        let (name_a, name_b) = (account_name(a), account_name(b));
        let amount: i64 = self.rng.gen_range(1..=5_000);
        run(worker, SEND_PAYMENT, false, |tx| {
            let a = custid_of(tx, &name_a)?;
            let b = custid_of(tx, &name_b)?;
            let (_, paid) = change_balance(tx, table::CHECKING, a, |checking_a| {
                (checking_a >= amount).then(|| checking_a - amount)
            })?;
            if !paid {
                return Err(tx.rollback());
            }
            change_balance(tx, table::CHECKING, b, |checking_b| Some(checking_b + amount))?;
            Ok(())
        })
    }

    #[inline(never)]
    fn transact_savings(&mut self, worker: &mut Worker) -> Result<(bool, u32), DbError> {
        let ledger = self.ledger;
        let ledger = &ledger[..];
        let name = account_name(self.account());
        let amount: i64 = self.rng.gen_range(-5_000..=5_000);
        run(worker, TRANSACT_SAVINGS, false, |tx| {
            let custid = custid_of(tx, &name)?;
            let (_, changed) = change_balance(tx, table::SAVINGS, custid, |savings| {
                (savings + amount >= 0).then(|| savings + amount)
            })?;
            if !changed {
                return Err(tx.rollback());
            }
            add_to_ledger(tx, ledger, amount)
        })
    }

    #[inline(never)]
    fn write_check(&mut self, worker: &mut Worker) -> Result<(bool, u32), DbError> {
        let ledger = self.ledger;
        let ledger = &ledger[..];
        let name = account_name(self.account());
        let amount: i64 = self.rng.gen_range(1..=5_000);
        run(worker, WRITE_CHECK, false, |tx| {
            let custid = custid_of(tx, &name)?;
            let savings = balance(tx, table::SAVINGS, custid)?;
            let debit = |checking: i64| if savings + checking < amount { amount + OVERDRAFT_PENALTY } else { amount };
            let (checking, _) =
                change_balance(tx, table::CHECKING, custid, |checking| Some(checking - debit(checking)))?;
            add_to_ledger(tx, ledger, -debit(checking))
        })
    }
}

fn run<R>(
    worker: &mut Worker,
    type_index: usize,
    read_only: bool,
    body: impl FnMut(&mut Transaction<'_>) -> Result<R, TxError>,
) -> Result<(bool, u32), DbError> {
    let (outcome, attempts) = worker.run_pipelined(type_index as u32, read_only, body)?;
    Ok((matches!(outcome, Outcome::Committed(_)), attempts))
}

impl Client for SmallbankClient {
    fn run_next(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let type_index = self.next_type();
        self.run_type(worker, type_index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmtx_engine::KeyBuilder;

    #[test]
    fn keys_keep_their_encoding() {
        assert_eq!(&account_name(42), b"cust000000000042");
        assert_eq!(&account_name(999_999_999_999), b"cust999999999999");
        assert_eq!(custid_key(0x0102), KeyBuilder::new().u64(0x0102).build()[..]);
        assert_eq!(ledger_key(LEDGER_LOAD, 7), KeyBuilder::new().u8(LEDGER_LOAD).u32(7).build()[..]);
    }
}
