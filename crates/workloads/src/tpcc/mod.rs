//! TPC-C (standard specification v5.11): the nine tables, the population
//! of clause 4.3 scaled by warehouses, the five transactions in the
//! standard mix (or another [`TpccMix`], reported as non-standard), and
//! consistency conditions 1-6 of clause 3.3.2.
//!
//! WAREHOUSE, DISTRICT, CUSTOMER, HISTORY, ITEM and STOCK are only read and
//! written by key, so they are hash tables; NEW-ORDER, ORDER and ORDER-LINE,
//! which the transactions range-scan, are ordered. Code that must visit a
//! hash table whole (the check's cardinalities) uses
//! `Database::for_each_row`.
//!
//! Keys are big-endian composites built with [`KeyBuilder`](pmtx_engine::KeyBuilder) (warehouse ids
//! `u32`, district ids `u8`, customer/order ids `u32`, order-line numbers
//! `u8`); values are the fixed layouts of [`rows`]. Secondary indexes:
//! customer by (w, d, last, first) for selection by last name, order by
//! (w, d, c) for the customer's last order (the engine appends the primary
//! key, so a reverse scan finds the highest order id).
//!
//! Deviations, all allowed or harmless: one Delivery transaction delivers
//! all ten districts; Delivery starts its oldest-new-order scan at a shared,
//! in-memory lower bound per district (the last delivered order id + 1, as
//! in Silo's implementation) because deleted rows stay in the index as
//! placeholders that every scan from the district's start would walk — the
//! bounds live in the [`Tpcc`] value, are reset by `load` and recomputed by
//! `check` (run it after reopening a crashed database, or use a fresh
//! value); terminals have no keying/think times (a benchmark driver
//! runs them back to back); money is kept in integer cents; NewOrder and
//! Payment read and write their hot rows (the warehouse, which every
//! Payment writes and every NewOrder reads, and the district) after their
//! other rows rather than first — the operations commute, the results are
//! the same, and an optimistic engine's window for a conflict on those
//! rows shrinks from the whole transaction to its last steps.

mod check;
mod client;
mod load;
pub mod rows;

use crate::gen::{child_seed, rng, Mix};
use crate::{CheckReport, Client, Workload, WorkloadError, WorkloadOptions};
use pmtx_engine::{Database, TableSchema};
use rand::Rng;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

pub use client::TpccClient;

/// Standard number of items (and stock rows per warehouse).
pub const STANDARD_ITEMS: u32 = 100_000;
/// Standard number of customers (and initial orders) per district.
pub const STANDARD_CUSTOMERS_PER_DISTRICT: u32 = 3000;
/// Districts per warehouse.
pub const DISTRICTS_PER_WAREHOUSE: u8 = 10;

/// Transaction type names (the index is the type index).
pub const TRANSACTION_TYPES: [&str; 5] = ["new_order", "payment", "order_status", "delivery", "stock_level"];
/// Weights of the standard mix (clause 5.2.3 minimums with NewOrder taking
/// the rest), in the order of [`TRANSACTION_TYPES`].
pub const MIX: [u32; 5] = [45, 43, 4, 4, 4];
/// Type index of NewOrder.
pub const NEW_ORDER: usize = 0;
/// Type index of Payment.
pub const PAYMENT: usize = 1;
/// Type index of OrderStatus.
pub const ORDER_STATUS: usize = 2;
/// Type index of Delivery.
pub const DELIVERY: usize = 3;
/// Type index of StockLevel.
pub const STOCK_LEVEL: usize = 4;

/// A TPC-C transaction mix: one weight per type, in the order of
/// [`TRANSACTION_TYPES`]; a type of weight 0 never runs. Anything but the
/// proportions of [`MIX`] is a **non-standard** mix (e.g. the NewOrder +
/// Payment mix other papers report), which benchmark reports must say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TpccMix(pub [u32; 5]);

impl Default for TpccMix {
    fn default() -> Self {
        Self(MIX)
    }
}

impl TpccMix {
    /// Largest weight accepted (keeps the total far from overflowing).
    pub const MAX_WEIGHT: u32 = 1_000_000;

    /// A mix of these weights: at least one positive, none above
    /// [`TpccMix::MAX_WEIGHT`].
    pub fn new(weights: [u32; 5]) -> Result<Self, WorkloadError> {
        if weights.iter().all(|&weight| weight == 0) {
            return Err(WorkloadError::InvalidOption("tpcc: the transaction mix needs a positive weight".into()));
        }
        if let Some(position) = weights.iter().position(|&weight| weight > Self::MAX_WEIGHT) {
            return Err(WorkloadError::InvalidOption(format!(
                "tpcc: weight {} of {} is above {}",
                weights[position],
                TRANSACTION_TYPES[position],
                Self::MAX_WEIGHT
            )));
        }
        Ok(Self(weights))
    }

    /// Parses `type=weight,...`, e.g. `new_order=50,payment=50`: a non-empty
    /// list of distinct names of [`TRANSACTION_TYPES`], each with a positive
    /// integer weight; types not listed never run.
    pub fn parse(text: &str) -> Result<Self, WorkloadError> {
        let invalid = |message: String| {
            Err(WorkloadError::InvalidOption(format!(
                "invalid TPC-C mix {text:?}: {message} (expected TYPE=WEIGHT,... with TYPE one of {} and WEIGHT a \
                 positive integer, e.g. new_order=50,payment=50)",
                TRANSACTION_TYPES.join(", ")
            )))
        };
        let weights = crate::gen::parse_weights(text, &TRANSACTION_TYPES, Self::MAX_WEIGHT).or_else(invalid)?;
        Self::new(weights.try_into().expect("one weight per type"))
    }

    /// Whether the weights are in the proportions of the standard mix.
    pub fn is_standard(&self) -> bool {
        let (total, standard_total): (u64, u64) =
            (self.0.iter().map(|&w| w as u64).sum(), MIX.iter().map(|&w| w as u64).sum());
        self.0.iter().zip(MIX).all(|(&weight, standard)| weight as u64 * standard_total == standard as u64 * total)
    }

    /// (type name, weight) of the types that run.
    pub fn entries(&self) -> impl Iterator<Item = (&'static str, u32)> + '_ {
        TRANSACTION_TYPES.iter().zip(self.0).filter(|(_, weight)| *weight > 0).map(|(name, weight)| (*name, weight))
    }
}

impl std::fmt::Display for TpccMix {
    /// `new_order=50,payment=50` (what [`TpccMix::parse`] reads).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (index, (name, weight)) in self.entries().enumerate() {
            write!(f, "{}{name}={weight}", if index == 0 { "" } else { "," })?;
        }
        Ok(())
    }
}

/// Table ids: positions in [`Tpcc::tables`](crate::Workload::tables).
pub mod table {
    use pmtx_engine::TableId;
    /// WAREHOUSE: (w).
    pub const WAREHOUSE: TableId = TableId(0);
    /// DISTRICT: (w, d).
    pub const DISTRICT: TableId = TableId(1);
    /// CUSTOMER: (w, d, c); secondary 0 = by name.
    pub const CUSTOMER: TableId = TableId(2);
    /// HISTORY: (w, d, origin, sequence) — the spec gives it no key.
    pub const HISTORY: TableId = TableId(3);
    /// NEW-ORDER: (w, d, o).
    pub const NEW_ORDER: TableId = TableId(4);
    /// ORDER: (w, d, o); secondary 0 = by customer.
    pub const ORDER: TableId = TableId(5);
    /// ORDER-LINE: (w, d, o, number).
    pub const ORDER_LINE: TableId = TableId(6);
    /// ITEM: (i).
    pub const ITEM: TableId = TableId(7);
    /// STOCK: (w, i).
    pub const STOCK: TableId = TableId(8);
    /// Table names, by id.
    pub const NAMES: [&str; 9] =
        ["warehouse", "district", "customer", "history", "new_order", "order", "order_line", "item", "stock"];
    /// Position of the customer-by-name secondary index.
    pub const CUSTOMER_BY_NAME: u32 = 0;
    /// Position of the order-by-customer secondary index.
    pub const ORDER_BY_CUSTOMER: u32 = 0;
}

/// Key encodings (big-endian composites), as fixed-size arrays so that
/// transactions build keys on the stack.
pub mod keys {
    /// Big-endian bytes of `parts` laid end to end into an `N`-byte key.
    macro_rules! key {
        ($n:expr; $($part:expr),*) => {{
            let mut key = [0u8; $n];
            let mut at = 0;
            $(
                let bytes = $part.to_be_bytes();
                key[at..at + bytes.len()].copy_from_slice(&bytes);
                at += bytes.len();
            )*
            debug_assert_eq!(at, $n);
            key
        }};
    }

    /// WAREHOUSE key.
    pub fn warehouse(w: u32) -> [u8; 4] {
        key!(4; w)
    }
    /// DISTRICT key; also the prefix of every per-district key.
    pub fn district(w: u32, d: u8) -> [u8; 5] {
        key!(5; w, d)
    }
    /// CUSTOMER key.
    pub fn customer(w: u32, d: u8, c: u32) -> [u8; 9] {
        key!(9; w, d, c)
    }
    /// Prefix of the customer-by-name secondary keys of a last name (cut or
    /// zero-padded to 16 bytes, so it compares like its text).
    pub fn customer_name_prefix(w: u32, d: u8, last: &[u8]) -> [u8; 21] {
        let mut key = [0u8; 21];
        key[..5].copy_from_slice(&district(w, d));
        let take = last.len().min(16);
        key[5..5 + take].copy_from_slice(&last[..take]);
        key
    }
    /// HISTORY key: `origin` 0 for loaded rows (sequence = customer id),
    /// worker index + 1 for rows of Payment.
    pub fn history(w: u32, d: u8, origin: u32, sequence: u64) -> [u8; 17] {
        key!(17; w, d, origin, sequence)
    }
    /// Width of NEW-ORDER and ORDER keys.
    pub const ORDER_KEY_LEN: usize = 9;
    /// Width of ORDER-LINE keys.
    pub const ORDER_LINE_KEY_LEN: usize = 10;

    /// NEW-ORDER key.
    pub fn new_order(w: u32, d: u8, o: u32) -> [u8; ORDER_KEY_LEN] {
        key!(9; w, d, o)
    }
    /// ORDER key; also the prefix of the order's lines.
    pub fn order(w: u32, d: u8, o: u32) -> [u8; ORDER_KEY_LEN] {
        key!(9; w, d, o)
    }
    /// Prefix of the order-by-customer secondary keys of a customer.
    pub fn order_customer_prefix(w: u32, d: u8, c: u32) -> [u8; 9] {
        key!(9; w, d, c)
    }
    /// ORDER-LINE key.
    pub fn order_line(w: u32, d: u8, o: u32, number: u8) -> [u8; ORDER_LINE_KEY_LEN] {
        key!(10; w, d, o, number)
    }
    /// ITEM key.
    pub fn item(i: u32) -> [u8; 4] {
        key!(4; i)
    }
    /// STOCK key.
    pub fn stock(w: u32, i: u32) -> [u8; 8] {
        key!(8; w, i)
    }
    /// The order id of a NEW-ORDER, ORDER or ORDER-LINE key.
    pub fn order_id_of(key: &[u8]) -> Option<u32> {
        Some(u32::from_be_bytes(key.get(5..9)?.try_into().ok()?))
    }
    /// The (w, d) of any per-district key.
    pub fn district_of(key: &[u8]) -> Option<(u32, u8)> {
        Some((u32::from_be_bytes(key.get(0..4)?.try_into().ok()?), *key.get(4)?))
    }
    /// The customer id of a CUSTOMER key.
    pub fn customer_id_of(key: &[u8]) -> Option<u32> {
        order_id_of(key)
    }

    /// The exclusive upper bound of the keys that start with `prefix`, as
    /// `pmtx_engine::prefix_range` computes it but on the stack: the
    /// prefix without its trailing 0xFF bytes, last byte incremented, and
    /// its length (`None` if every byte is 0xFF: no upper bound).
    pub fn prefix_end<const N: usize>(prefix: &[u8; N]) -> Option<([u8; N], usize)> {
        let mut end = *prefix;
        let mut len = N;
        while len > 0 {
            if end[len - 1] == 0xFF {
                len -= 1;
            } else {
                end[len - 1] += 1;
                return Some((end, len));
            }
        }
        None
    }
}

/// Secondary key of a customer: (w, d, C_LAST, C_FIRST).
fn customer_by_name(primary_key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(37);
    key.extend_from_slice(&primary_key[..primary_key.len().min(5)]);
    let mut names = [0u8; 32];
    let take = value.len().min(32);
    names[..take].copy_from_slice(&value[..take]);
    key.extend_from_slice(&names);
    key
}

/// Secondary key of an order: (w, d, O_C_ID big-endian).
fn order_by_customer(primary_key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(9);
    key.extend_from_slice(&primary_key[..primary_key.len().min(5)]);
    let mut c_id = [0u8; 4];
    let take = value.len().min(4);
    c_id[..take].copy_from_slice(&value[..take]);
    key.extend_from_slice(&u32::from_le_bytes(c_id).to_be_bytes());
    key
}

/// The run-time constants C of NURand (clause 2.1.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TpccConstants {
    /// C for C_LAST at load time.
    pub c_last_load: u64,
    /// C for C_LAST at run time (valid delta to `c_last_load`, 2.1.6.1).
    pub c_last_run: u64,
    /// C for C_ID.
    pub c_id: u64,
    /// C for OL_I_ID.
    pub ol_i_id: u64,
}

impl TpccConstants {
    /// Constants drawn from `seed`.
    pub fn from_seed(seed: u64) -> Self {
        let mut rng = rng(child_seed(seed, 0xC0_C0));
        let c_last_load = rng.gen_range(0..=255);
        let c_last_run = loop {
            let candidate = rng.gen_range(0..=255);
            if Self::delta_is_valid(c_last_load, candidate) {
                break candidate;
            }
        };
        Self { c_last_load, c_last_run, c_id: rng.gen_range(0..=1023), ol_i_id: rng.gen_range(0..=8191) }
    }

    /// Clause 2.1.6.1: `|C_RUN - C_LOAD|` in 65..=119, neither 96 nor 112.
    pub fn delta_is_valid(load: u64, run: u64) -> bool {
        let delta = load.abs_diff(run);
        (65..=119).contains(&delta) && delta != 96 && delta != 112
    }
}

/// The scale of a TPC-C database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TpccScale {
    /// Warehouses.
    pub warehouses: u32,
    /// Items, and stock rows per warehouse.
    pub items: u32,
    /// Customers per district (and initial orders).
    pub customers: u32,
    /// Initial orders per district.
    pub orders: u32,
    /// Initial undelivered orders per district (the last ones).
    pub new_orders: u32,
}

impl TpccScale {
    /// Orders delivered at load (carrier set): ids `1..=delivered()`.
    pub fn delivered(&self) -> u32 {
        self.orders - self.new_orders
    }

    /// Exact row counts right after load, by table name (order lines vary:
    /// `None`; condition 4 of the check covers them).
    pub fn initial_rows(&self) -> [(&'static str, Option<u64>); 9] {
        let w = self.warehouses as u64;
        let districts = w * DISTRICTS_PER_WAREHOUSE as u64;
        [
            ("warehouse", Some(w)),
            ("district", Some(districts)),
            ("customer", Some(districts * self.customers as u64)),
            ("history", Some(districts * self.customers as u64)),
            ("new_order", Some(districts * self.new_orders as u64)),
            ("order", Some(districts * self.orders as u64)),
            ("order_line", None),
            ("item", Some(self.items as u64)),
            ("stock", Some(w * self.items as u64)),
        ]
    }

    /// Bytes of tuple data the load writes: keys plus encoded rows of
    /// every table (secondary index entries are not tuples). Order lines
    /// are counted at their expected 10 per order (5 to 15, uniform): the
    /// load draws them at random, and this is needed before it runs.
    pub fn loaded_bytes(&self) -> u64 {
        use rows::*;
        let w = u64::from(self.warehouses);
        let districts = w * u64::from(DISTRICTS_PER_WAREHOUSE);
        let items = u64::from(self.items);
        let row = |key: usize, value: usize| (key + value) as u64;
        let orders = districts * u64::from(self.orders);
        items * row(keys::item(1).len(), Item::LEN)
            + w * row(keys::warehouse(1).len(), Warehouse::LEN)
            + districts * row(keys::district(1, 1).len(), District::LEN)
            + w * items * row(keys::stock(1, 1).len(), Stock::LEN)
            + districts * u64::from(self.customers) * row(keys::customer(1, 1, 1).len(), Customer::LEN)
            + districts * u64::from(self.customers) * row(keys::history(1, 1, 0, 1).len(), History::LEN)
            + orders * row(keys::order(1, 1, 1).len(), Order::LEN)
            + orders * 10 * row(keys::order_line(1, 1, 1, 1).len(), OrderLine::LEN)
            + districts * u64::from(self.new_orders) * row(keys::new_order(1, 1, 1).len(), NEW_ORDER_VALUE.len())
    }

    /// Number of distinct last names the run draws from
    /// (`NURand(255, 0, last_names - 1)`); 1000 at standard scale.
    pub fn last_names(&self) -> u32 {
        self.customers.min(1000)
    }
}

pub(crate) struct Shared {
    pub(crate) scale: TpccScale,
    pub(crate) constants: TpccConstants,
    pub(crate) load_seed: u64,
    pub(crate) mix: Mix,
    pub(crate) mix_weights: [u32; 5],
    /// Per (w, d): every new-order row below this id was deleted by a
    /// committed delivery (the latest of them, of row id - 1, may not be
    /// durable yet: `client.rs`, Delivery).
    pub(crate) delivery_hints: Vec<AtomicU32>,
}

impl Shared {
    pub(crate) fn hint(&self, w: u32, d: u8) -> &AtomicU32 {
        &self.delivery_hints[(w as usize - 1) * DISTRICTS_PER_WAREHOUSE as usize + (d as usize - 1)]
    }
}

/// The TPC-C workload.
pub struct Tpcc {
    shared: Arc<Shared>,
}

impl Tpcc {
    /// TPC-C with `options.warehouses` (and the non-standard scale
    /// overrides `items`, `customers_per_district`).
    pub fn new(options: &WorkloadOptions) -> Result<Self, WorkloadError> {
        if options.warehouses == 0 || options.warehouses > u16::MAX as u32 {
            return Err(WorkloadError::InvalidOption(format!(
                "tpcc: warehouses must be 1..={}, got {}",
                u16::MAX,
                options.warehouses
            )));
        }
        if options.items == 0 || options.items >= u32::MAX / 2 {
            return Err(WorkloadError::InvalidOption(format!("tpcc: items must be positive, got {}", options.items)));
        }
        if options.customers_per_district == 0 || options.customers_per_district > 1 << 24 {
            return Err(WorkloadError::InvalidOption(format!(
                "tpcc: customers per district must be 1..={}, got {}",
                1 << 24,
                options.customers_per_district
            )));
        }
        TpccMix::new(options.tpcc_mix)?;
        let customers = options.customers_per_district;
        let new_orders = (customers as u64 * 900 / 3000) as u32;
        let scale = TpccScale {
            warehouses: options.warehouses,
            items: options.items,
            customers,
            orders: customers,
            new_orders,
        };
        let hints = (0..options.warehouses as usize * DISTRICTS_PER_WAREHOUSE as usize).map(|_| AtomicU32::new(0));
        Ok(Self {
            shared: Arc::new(Shared {
                scale,
                constants: TpccConstants::from_seed(options.load_seed),
                load_seed: options.load_seed,
                mix: Mix::new(&options.tpcc_mix),
                mix_weights: options.tpcc_mix,
                delivery_hints: hints.collect(),
            }),
        })
    }

    /// The scale.
    pub fn scale(&self) -> TpccScale {
        self.shared.scale
    }

    /// The transaction mix the clients draw from.
    pub fn mix(&self) -> TpccMix {
        TpccMix(self.shared.mix_weights)
    }

    /// The NURand constants.
    pub fn constants(&self) -> TpccConstants {
        self.shared.constants
    }

    /// A concrete client (what [`Workload::client`] boxes).
    pub fn tpcc_client(&self, worker_index: usize, threads: usize, seed: u64) -> TpccClient {
        TpccClient::new(Arc::clone(&self.shared), worker_index, threads, seed)
    }
}

impl Workload for Tpcc {
    fn name(&self) -> &'static str {
        "tpcc"
    }

    fn tables(&self) -> Vec<TableSchema> {
        use rows::*;
        // Tables only read and written by key are hash tables (one probe,
        // no tree descent); the three tables the transactions range-scan
        // (NEW-ORDER, ORDER, ORDER-LINE) stay ordered.
        // Every key but ITEM's starts with its warehouse id: the partition
        // (H-Store's unit; ITEM is read-only and not partitioned).
        let by_warehouse = |schema: TableSchema| schema.partitioned_by_prefix(4);
        vec![
            by_warehouse(TableSchema::hashed(table::NAMES[0]).max_value_len(Warehouse::LEN)),
            by_warehouse(TableSchema::hashed(table::NAMES[1]).max_value_len(District::LEN)),
            by_warehouse(
                TableSchema::hashed(table::NAMES[2])
                    .max_value_len(Customer::LEN)
                    .secondary("customer_by_name", customer_by_name),
            ),
            by_warehouse(TableSchema::hashed(table::NAMES[3]).max_value_len(History::LEN)),
            // The ordered tables' keys are their exact widths: keys of at
            // most 16 bytes are held inline in the B+tree, whose operations
            // then need no epoch pin and may start from the worker's finger.
            by_warehouse(TableSchema::ordered(table::NAMES[4]).max_key_len(keys::ORDER_KEY_LEN).max_value_len(1)),
            by_warehouse(
                TableSchema::ordered(table::NAMES[5])
                    .max_key_len(keys::ORDER_KEY_LEN)
                    .max_value_len(Order::LEN)
                    .secondary("order_by_customer", order_by_customer),
            ),
            by_warehouse(
                TableSchema::ordered(table::NAMES[6])
                    .max_key_len(keys::ORDER_LINE_KEY_LEN)
                    .max_value_len(OrderLine::LEN),
            ),
            TableSchema::hashed(table::NAMES[7]).max_value_len(Item::LEN),
            by_warehouse(TableSchema::hashed(table::NAMES[8]).max_value_len(Stock::LEN)),
        ]
    }

    fn transaction_types(&self) -> &'static [&'static str] {
        &TRANSACTION_TYPES
    }

    fn loaded_bytes(&self) -> Option<u64> {
        Some(self.shared.scale.loaded_bytes())
    }

    fn load(
        &self,
        db: &Arc<Database>,
        threads: usize,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<(), WorkloadError> {
        crate::common::verify_tables(db, &self.tables())?;
        load::load(&self.shared, db, threads, progress)
    }

    fn client(&self, worker_index: usize, threads: usize, seed: u64) -> Box<dyn Client> {
        Box::new(self.tpcc_client(worker_index, threads, seed))
    }

    fn check(&self, db: &Arc<Database>) -> Result<CheckReport, WorkloadError> {
        crate::common::verify_tables(db, &self.tables())?;
        check::check(&self.shared, db)
    }
}
