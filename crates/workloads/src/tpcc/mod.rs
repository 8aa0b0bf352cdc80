//! TPC-C (standard specification v5.11): the nine tables, the population
//! of clause 4.3 scaled by warehouses, the five transactions in the
//! standard mix, and consistency conditions 1-6 of clause 3.3.2.
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
//! runs them back to back); money is kept in integer cents.

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

/// Key encodings (big-endian composites).
pub mod keys {
    use pmtx_engine::KeyBuilder;

    /// WAREHOUSE key.
    pub fn warehouse(w: u32) -> Vec<u8> {
        KeyBuilder::new().u32(w).build()
    }
    /// DISTRICT key; also the prefix of every per-district key.
    pub fn district(w: u32, d: u8) -> Vec<u8> {
        KeyBuilder::new().u32(w).u8(d).build()
    }
    /// CUSTOMER key.
    pub fn customer(w: u32, d: u8, c: u32) -> Vec<u8> {
        KeyBuilder::new().u32(w).u8(d).u32(c).build()
    }
    /// Prefix of the customer-by-name secondary keys of a last name.
    pub fn customer_name_prefix(w: u32, d: u8, last: &[u8]) -> Vec<u8> {
        KeyBuilder::new().u32(w).u8(d).fixed(last, 16).build()
    }
    /// HISTORY key: `origin` 0 for loaded rows (sequence = customer id),
    /// worker index + 1 for rows of Payment.
    pub fn history(w: u32, d: u8, origin: u32, sequence: u64) -> Vec<u8> {
        KeyBuilder::new().u32(w).u8(d).u32(origin).u64(sequence).build()
    }
    /// NEW-ORDER key.
    pub fn new_order(w: u32, d: u8, o: u32) -> Vec<u8> {
        KeyBuilder::new().u32(w).u8(d).u32(o).build()
    }
    /// ORDER key; also the prefix of the order's lines.
    pub fn order(w: u32, d: u8, o: u32) -> Vec<u8> {
        KeyBuilder::new().u32(w).u8(d).u32(o).build()
    }
    /// Prefix of the order-by-customer secondary keys of a customer.
    pub fn order_customer_prefix(w: u32, d: u8, c: u32) -> Vec<u8> {
        KeyBuilder::new().u32(w).u8(d).u32(c).build()
    }
    /// ORDER-LINE key.
    pub fn order_line(w: u32, d: u8, o: u32, number: u8) -> Vec<u8> {
        KeyBuilder::new().u32(w).u8(d).u32(o).u8(number).build()
    }
    /// ITEM key.
    pub fn item(i: u32) -> Vec<u8> {
        KeyBuilder::new().u32(i).build()
    }
    /// STOCK key.
    pub fn stock(w: u32, i: u32) -> Vec<u8> {
        KeyBuilder::new().u32(w).u32(i).build()
    }
    /// The order id of a NEW-ORDER, ORDER or ORDER-LINE key.
    pub fn order_id_of(key: &[u8]) -> Option<u32> {
        Some(u32::from_be_bytes(key.get(5..9)?.try_into().ok()?))
    }
    /// The (w, d) of any per-district key.
    pub fn district_of(key: &[u8]) -> Option<(u32, u8)> {
        Some((u32::from_be_bytes(key.get(0..4)?.try_into().ok()?), *key.get(4)?))
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
    /// Per (w, d): every new-order row below this id is gone for good.
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
                mix: Mix::new(&MIX),
                delivery_hints: hints.collect(),
            }),
        })
    }

    /// The scale.
    pub fn scale(&self) -> TpccScale {
        self.shared.scale
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
        vec![
            TableSchema::ordered(table::NAMES[0]).max_value_len(Warehouse::LEN),
            TableSchema::ordered(table::NAMES[1]).max_value_len(District::LEN),
            TableSchema::ordered(table::NAMES[2])
                .max_value_len(Customer::LEN)
                .secondary("customer_by_name", customer_by_name),
            TableSchema::ordered(table::NAMES[3]).max_value_len(History::LEN),
            TableSchema::ordered(table::NAMES[4]).max_value_len(1),
            TableSchema::ordered(table::NAMES[5])
                .max_value_len(Order::LEN)
                .secondary("order_by_customer", order_by_customer),
            TableSchema::ordered(table::NAMES[6]).max_value_len(OrderLine::LEN),
            TableSchema::ordered(table::NAMES[7]).max_value_len(Item::LEN),
            TableSchema::ordered(table::NAMES[8]).max_value_len(Stock::LEN),
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
