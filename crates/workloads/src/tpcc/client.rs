//! The five TPC-C transactions (clauses 2.4-2.8). Inputs are drawn before
//! the transaction runs, so a retried body repeats the same transaction.
//!
//! The bodies touch rows field by field: `get_with` reads the few fields a
//! transaction needs straight from the engine's copy of the row,
//! `update_with` changes the touched fields in place (the rest of the row
//! is never decoded or re-encoded), inserts are encoded into stack arrays,
//! and range scans visit rows instead of collecting them. Keys are stack
//! arrays ([`keys`]). So the common path allocates nothing per row; the
//! exceptions are the secondary-index scans (customer by last name, a
//! customer's last order), which the engine API only offers as collecting
//! scans.

use super::rows::*;
use super::{keys, table, Shared, DELIVERY, DISTRICTS_PER_WAREHOUSE, NEW_ORDER, ORDER_STATUS, PAYMENT, STOCK_LEVEL};
use crate::common::corrupt;
use crate::gen::{child_seed, last_name_fixed, now_millis, nurand, rng, text, WorkloadRng};
use crate::{Client, TxnSummary};
use pmtx_engine::{AbortReason, DbError, Outcome, ScanDirection, TableId, Transaction, TxError, Worker};
use rand::Rng;
use std::fmt::Write as _;
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How a customer is chosen (clause 2.5.1.2 / 2.6.1.2).
#[derive(Clone, Copy, Debug)]
enum CustomerBy {
    Id(u32),
    Name([u8; 16]),
}

/// One line of a NewOrder.
#[derive(Clone, Copy, Debug)]
struct Line {
    item: u32,
    supply_w: u32,
    quantity: u8,
}

/// Most lines of an order (clause 2.4.1.3).
const MAX_LINES: usize = 15;

/// A TPC-C terminal: a home warehouse (`worker_index % warehouses + 1`) and a
/// fixed StockLevel district.
pub struct TpccClient {
    shared: Arc<Shared>,
    rng: WorkloadRng,
    worker_index: usize,
    home_w: u32,
    stock_level_d: u8,
    lines: Vec<Line>,
    /// StockLevel's item ids, reused across transactions.
    items: Vec<u32>,
}

impl TpccClient {
    pub(super) fn new(shared: Arc<Shared>, worker_index: usize, _threads: usize, seed: u64) -> Self {
        let warehouses = shared.scale.warehouses as usize;
        let home_w = (worker_index % warehouses) as u32 + 1;
        let stock_level_d = ((worker_index / warehouses) % DISTRICTS_PER_WAREHOUSE as usize) as u8 + 1;
        Self {
            shared,
            rng: rng(child_seed(seed, worker_index as u64)),
            worker_index,
            home_w,
            stock_level_d,
            lines: Vec::with_capacity(MAX_LINES),
            // 20 orders of at most 15 lines.
            items: Vec::with_capacity(20 * MAX_LINES),
        }
    }

    /// The terminal's home warehouse.
    pub fn home_warehouse(&self) -> u32 {
        self.home_w
    }

    /// Draws the next transaction type from the workload's mix (the
    /// standard mix unless the workload was built with another).
    pub fn next_type(&mut self) -> usize {
        self.shared.mix.pick(&mut self.rng)
    }

    /// Runs one transaction of type `type_index` (see
    /// [`TRANSACTION_TYPES`](super::TRANSACTION_TYPES)).
    pub fn run_type(&mut self, worker: &mut Worker, type_index: usize) -> Result<TxnSummary, DbError> {
        match type_index {
            NEW_ORDER => self.new_order(worker),
            PAYMENT => self.payment(worker),
            ORDER_STATUS => self.order_status(worker),
            DELIVERY => self.delivery(worker),
            STOCK_LEVEL => self.stock_level(worker),
            other => Err(DbError::InvalidConfig(format!("tpcc: no transaction type {other}"))),
        }
    }

    fn district(&mut self) -> u8 {
        self.rng.gen_range(1..=DISTRICTS_PER_WAREHOUSE)
    }

    fn other_warehouse(&mut self) -> u32 {
        let other = self.rng.gen_range(1..self.shared.scale.warehouses);
        if other >= self.home_w {
            other + 1
        } else {
            other
        }
    }

    fn customer_id(&mut self) -> u32 {
        nurand(&mut self.rng, 1023, 1, self.shared.scale.customers as u64, self.shared.constants.c_id) as u32
    }

    /// 60% by last name, 40% by id.
    fn customer_by(&mut self) -> CustomerBy {
        if self.rng.gen_range(1..=100) <= 60 {
            let names = self.shared.scale.last_names() as u64;
            let number = nurand(&mut self.rng, 255, 0, names - 1, self.shared.constants.c_last_run);
            CustomerBy::Name(last_name_fixed(number as u32))
        } else {
            CustomerBy::Id(self.customer_id())
        }
    }

    /// Clause 2.4: NewOrder, with 1% rolled back by an unused item id.
    #[inline(never)]
    fn new_order(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let scale = self.shared.scale;
        let w = self.home_w;
        let d = self.district();
        let c = self.customer_id();
        let ol_cnt = self.rng.gen_range(5..=MAX_LINES as u8);
        let rollback = self.rng.gen_range(1..=100) == 1;
        self.lines.clear();
        for number in 0..ol_cnt {
            let mut item = nurand(&mut self.rng, 8191, 1, scale.items as u64, self.shared.constants.ol_i_id) as u32;
            if rollback && number + 1 == ol_cnt {
                item = scale.items + 1;
            }
            let supply_w =
                if scale.warehouses > 1 && self.rng.gen_range(1..=100) == 1 { self.other_warehouse() } else { w };
            self.lines.push(Line { item, supply_w, quantity: self.rng.gen_range(1..=10) });
        }
        let lines = &self.lines;
        let all_local = lines.iter().all(|line| line.supply_w == w) as u8;
        let now = now_millis();
        let (outcome, attempts) = worker.run_pipelined(NEW_ORDER as u32, false, |tx| {
            // The item and stock rows are known up front: start loading them
            // all now, so their memory misses overlap instead of adding up
            // one line after another (a hint; no effect on the transaction).
            for line in lines {
                tx.prefetch(table::ITEM, &keys::item(line.item));
                tx.prefetch(table::STOCK, &keys::stock(line.supply_w, line.item));
            }
            let c_discount = read_row::<Customer, _>(tx, table::CUSTOMER, &keys::customer(w, d, c), |row| {
                Customer::DISCOUNT.get(row)
            })?;
            // Items and stock first, the hot rows last: the district
            // (every NewOrder and Payment of the district writes it) before
            // the inserts that need its order id, the warehouse (every
            // Payment writes it) after them. The operations commute, and an
            // optimistic transaction conflicts on a row only between its
            // read and the commit, so reading the hot rows last shrinks
            // that window from the whole transaction to its inserts
            // (clause 2.4.2.2 lists the steps, it does not order the
            // accesses).
            let mut order_lines = [[0u8; OrderLine::LEN]; MAX_LINES];
            let mut total = 0i64;
            for (line, order_line) in lines.iter().zip(order_lines.iter_mut()) {
                let price = tx.get_with(table::ITEM, &keys::item(line.item), |row| {
                    Item::check(row).map(|()| Item::PRICE.get(row))
                })?;
                // The unused item id of the 1%: roll back (2.4.2.3).
                let Some(price) = price else { return Err(tx.rollback()) };
                let amount = line.quantity as i64 * price?;
                total += amount;
                let quantity = line.quantity as i32;
                let remote = line.supply_w != w;
                update_row::<Stock, _>(tx, table::STOCK, &keys::stock(line.supply_w, line.item), |row| {
                    let s_quantity = Stock::QUANTITY.get(row);
                    let s_quantity =
                        if s_quantity >= quantity + 10 { s_quantity - quantity } else { s_quantity - quantity + 91 };
                    Stock::QUANTITY.set(row, s_quantity);
                    Stock::YTD.set(row, Stock::YTD.get(row) + line.quantity as u32);
                    Stock::ORDER_CNT.set(row, Stock::ORDER_CNT.get(row) + 1);
                    if remote {
                        Stock::REMOTE_CNT.set(row, Stock::REMOTE_CNT.get(row) + 1);
                    }
                    OrderLine::DIST_INFO.bytes_mut(order_line).copy_from_slice(Stock::dist_info_in(row, d));
                })?;
                OrderLine::I_ID.set(order_line, line.item);
                OrderLine::SUPPLY_W_ID.set(order_line, line.supply_w);
                OrderLine::DELIVERY_D.set(order_line, 0);
                OrderLine::QUANTITY.set(order_line, line.quantity);
                OrderLine::AMOUNT.set(order_line, amount);
            }
            let (o, d_tax) = update_row::<District, _>(tx, table::DISTRICT, &keys::district(w, d), |row| {
                let o = District::NEXT_O_ID.get(row);
                District::NEXT_O_ID.set(row, o + 1);
                (o, District::TAX.get(row))
            })?;
            let order = Order { c_id: c, entry_d: now, carrier_id: 0, ol_cnt, all_local }.to_bytes();
            // An order at D_NEXT_O_ID exists only if another NewOrder took
            // this id since we read the district: our read is stale and the
            // attempt cannot commit (OCC bodies may see such states), so
            // abort it for a retry.
            if !tx.insert(table::ORDER, &keys::order(w, d, o), &order)? {
                return Err(TxError::Abort(AbortReason::ReadValidation));
            }
            if !tx.insert(table::NEW_ORDER, &keys::new_order(w, d, o), NEW_ORDER_VALUE)? {
                return Err(TxError::Abort(AbortReason::ReadValidation));
            }
            for (number, order_line) in order_lines[..lines.len()].iter().enumerate() {
                tx.insert(table::ORDER_LINE, &keys::order_line(w, d, o, number as u8 + 1), order_line)?;
            }
            let w_tax =
                read_row::<Warehouse, _>(tx, table::WAREHOUSE, &keys::warehouse(w), |row| Warehouse::TAX.get(row))?;
            // The terminal output: total * (1 - C_DISCOUNT) * (1 + W_TAX + D_TAX).
            let rate = (10_000 - c_discount as i64) * (10_000 + w_tax as i64 + d_tax as i64);
            Ok(total * rate / 100_000_000)
        })?;
        Ok(summary(NEW_ORDER, &outcome, attempts))
    }

    /// Clause 2.5: Payment; 15% to a remote customer when there are
    /// several warehouses.
    #[inline(never)]
    fn payment(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let w = self.home_w;
        let d = self.district();
        let (c_w, c_d) = if self.shared.scale.warehouses > 1 && self.rng.gen_range(1..=100) > 85 {
            let c_w = self.other_warehouse();
            (c_w, self.district())
        } else {
            (w, d)
        };
        let by = self.customer_by();
        let amount: i64 = self.rng.gen_range(100..=500_000);
        let sequence: u64 = self.rng.gen();
        let origin = self.worker_index as u32 + 1;
        let now = now_millis();
        let (outcome, attempts) = worker.run_pipelined(PAYMENT as u32, false, |tx| {
            let (customer_key, c) = match by {
                CustomerBy::Id(c) => (keys::customer(c_w, c_d, c), c),
                CustomerBy::Name(last) => customer_by_name(tx, c_w, c_d, &last, |_| ())?.0,
            };
            update_row::<Customer, _>(tx, table::CUSTOMER, &customer_key, |row| {
                Customer::BALANCE.set(row, Customer::BALANCE.get(row) - amount);
                Customer::YTD_PAYMENT.set(row, Customer::YTD_PAYMENT.get(row) + amount);
                Customer::PAYMENT_CNT.set(row, Customer::PAYMENT_CNT.get(row) + 1);
                if Customer::CREDIT.bytes(row) == b"BC" {
                    let mut entry = StackText::<64>::new();
                    write!(entry, "{c} {c_d} {c_w} {d} {w} {}.{:02} ", amount / 100, amount % 100)
                        .expect("a payment entry fits 64 bytes");
                    shift_in(Customer::DATA.bytes_mut(row), entry.as_bytes());
                }
            })?;
            // The warehouse (every Payment writes it) and the district
            // last, as in NewOrder: the operations commute, and the hot
            // rows' conflict window shrinks to the history insert.
            let d_name = update_row::<District, _>(tx, table::DISTRICT, &keys::district(w, d), |row| {
                District::YTD.set(row, District::YTD.get(row) + amount);
                District::NAME.get(row)
            })?;
            let w_name = update_row::<Warehouse, _>(tx, table::WAREHOUSE, &keys::warehouse(w), |row| {
                Warehouse::YTD.set(row, Warehouse::YTD.get(row) + amount);
                Warehouse::NAME.get(row)
            })?;
            // H_DATA: W_NAME, four spaces, D_NAME.
            let mut h_data = [0u8; 24];
            let mut at = 0;
            for part in [text(&w_name), b"    ", text(&d_name)] {
                let take = part.len().min(h_data.len() - at);
                h_data[at..at + take].copy_from_slice(&part[..take]);
                at += take;
            }
            let history =
                History { c_id: c, c_d_id: c_d, c_w_id: c_w, d_id: d, w_id: w, date: now, amount, data: h_data }
                    .to_bytes();
            let mut sequence = sequence;
            while !tx.insert(table::HISTORY, &keys::history(w, d, origin, sequence), &history)? {
                sequence = sequence.wrapping_add(1);
            }
            Ok(())
        })?;
        Ok(summary(PAYMENT, &outcome, attempts))
    }

    /// Clause 2.6: OrderStatus (read-only).
    #[inline(never)]
    fn order_status(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let w = self.home_w;
        let d = self.district();
        let by = self.customer_by();
        let (outcome, attempts) = worker.run_pipelined(ORDER_STATUS as u32, true, |tx| {
            let balance = |row: &[u8]| Customer::BALANCE.get(row);
            let (c, balance) = match by {
                CustomerBy::Id(c) => {
                    (c, read_row::<Customer, _>(tx, table::CUSTOMER, &keys::customer(w, d, c), balance)?)
                }
                CustomerBy::Name(last) => {
                    let ((_, c), balance) = customer_by_name(tx, w, d, &last, balance)?;
                    (c, balance)
                }
            };
            let prefix = keys::order_customer_prefix(w, d, c);
            let last = tx.scan_secondary(
                table::ORDER,
                table::ORDER_BY_CUSTOMER,
                prefix_bounds(&prefix, &keys::prefix_end(&prefix)),
                ScanDirection::Reverse,
                1,
            )?;
            let Some((order_key, order)) = last.into_iter().next() else {
                return Err(corrupt(format!("tpcc: customer ({w}, {d}, {c}) has no order")));
            };
            Order::check(&order)?;
            let (ol_cnt, carrier_id) = (Order::OL_CNT.get(&order), Order::CARRIER_ID.get(&order));
            let order_key: [u8; 9] = order_key
                .as_slice()
                .try_into()
                .map_err(|_| corrupt(format!("tpcc: bad order key {order_key:02x?}")))?;
            let (mut lines, mut amount, mut bad) = (0usize, 0i64, None);
            tx.scan_with(
                table::ORDER_LINE,
                prefix_bounds(&order_key, &keys::prefix_end(&order_key)),
                ScanDirection::Forward,
                MAX_LINES,
                |_, line| match OrderLine::check(line) {
                    Ok(()) => {
                        lines += 1;
                        amount += OrderLine::AMOUNT.get(line);
                        true
                    }
                    Err(error) => {
                        bad = Some(error);
                        false
                    }
                },
            )?;
            if let Some(error) = bad {
                return Err(error.into());
            }
            if lines != ol_cnt as usize {
                return Err(corrupt(format!("tpcc: order {order_key:02x?} has {lines} lines, not {ol_cnt}")));
            }
            Ok((balance, carrier_id, amount))
        })?;
        Ok(summary(ORDER_STATUS, &outcome, attempts))
    }

    /// Clause 2.7: Delivery of the oldest undelivered order of each of the
    /// ten districts, in one transaction.
    #[inline(never)]
    fn delivery(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let w = self.home_w;
        let carrier: u8 = self.rng.gen_range(1..=10);
        let now = now_millis();
        let shared = &*self.shared;
        let (outcome, attempts) = worker.run_pipelined(DELIVERY as u32, false, |tx| {
            // The order id delivered in each district (0: none).
            let mut delivered = [0u32; DISTRICTS_PER_WAREHOUSE as usize];
            for d in 1..=DISTRICTS_PER_WAREHOUSE {
                // IMPORTANT: from one below the hint. That row was deleted
                // by the delivery that advanced the hint, which may not be
                // durable yet (a pipelined commit is acknowledged later,
                // and the hint moves when it commits). Reading it, absent,
                // makes this delivery depend on that one, so no crash can
                // keep this delivery and lose that one (which would leave
                // a gap in NO_O_ID: consistency condition 3).
                let hint = shared.hint(w, d).load(Ordering::Acquire);
                let lower = keys::new_order(w, d, hint.saturating_sub(1));
                let upper = keys::district(w, d + 1);
                let mut oldest = None;
                tx.scan_with(
                    table::NEW_ORDER,
                    (Bound::Included(&lower[..]), Bound::Excluded(&upper[..])),
                    ScanDirection::Forward,
                    1,
                    |key, _| {
                        oldest = Some(<[u8; 9]>::try_from(key).ok().and_then(|key| keys::order_id_of(&key)));
                        false
                    },
                )?;
                let Some(o) = oldest else {
                    continue; // Nothing to deliver in this district (2.7.4.2).
                };
                let o = o.ok_or_else(|| corrupt("tpcc: bad new-order key"))?;
                tx.delete(table::NEW_ORDER, &keys::new_order(w, d, o))?;
                let order_key = keys::order(w, d, o);
                let c_id = update_row::<Order, _>(tx, table::ORDER, &order_key, |row| {
                    Order::CARRIER_ID.set(row, carrier);
                    Order::C_ID.get(row)
                })?;
                // The order's line numbers (the scan cannot write: the
                // lines are updated after it).
                let mut numbers = [0u8; MAX_LINES];
                let (mut count, mut bad) = (0usize, false);
                tx.scan_with(
                    table::ORDER_LINE,
                    prefix_bounds(&order_key, &keys::prefix_end(&order_key)),
                    ScanDirection::Forward,
                    MAX_LINES,
                    |key, _| match key {
                        [.., number] if key.len() == 10 && count < MAX_LINES => {
                            numbers[count] = *number;
                            count += 1;
                            true
                        }
                        _ => {
                            bad = true;
                            false
                        }
                    },
                )?;
                if bad {
                    return Err(corrupt(format!("tpcc: bad order-line key of order ({w}, {d}, {o})")));
                }
                let mut amount = 0;
                for &number in &numbers[..count] {
                    amount +=
                        update_row::<OrderLine, _>(tx, table::ORDER_LINE, &keys::order_line(w, d, o, number), |row| {
                            OrderLine::DELIVERY_D.set(row, now);
                            OrderLine::AMOUNT.get(row)
                        })?;
                }
                update_row::<Customer, _>(tx, table::CUSTOMER, &keys::customer(w, d, c_id), |row| {
                    Customer::BALANCE.set(row, Customer::BALANCE.get(row) + amount);
                    Customer::DELIVERY_CNT.set(row, Customer::DELIVERY_CNT.get(row) + 1);
                })?;
                delivered[d as usize - 1] = o;
            }
            Ok(delivered)
        })?;
        if let Outcome::Committed(delivered) = &outcome {
            for (d, &o) in (1..=DISTRICTS_PER_WAREHOUSE).zip(delivered) {
                if o != 0 {
                    shared.hint(w, d).fetch_max(o + 1, Ordering::AcqRel);
                }
            }
        }
        Ok(summary(DELIVERY, &outcome, attempts))
    }

    /// Clause 2.8: StockLevel (read-only) over the district's last 20 orders.
    #[inline(never)]
    fn stock_level(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let w = self.home_w;
        let d = self.stock_level_d;
        let threshold: i32 = self.rng.gen_range(10..=20);
        let items = &mut self.items;
        let (outcome, attempts) = worker.run_pipelined(STOCK_LEVEL as u32, true, |tx| {
            let next = read_row::<District, _>(tx, table::DISTRICT, &keys::district(w, d), |row| {
                District::NEXT_O_ID.get(row)
            })?;
            let lower = keys::order(w, d, next.saturating_sub(20));
            let upper = keys::order(w, d, next);
            items.clear();
            let mut bad = None;
            tx.scan_with(
                table::ORDER_LINE,
                (Bound::Included(&lower[..]), Bound::Excluded(&upper[..])),
                ScanDirection::Forward,
                usize::MAX,
                |_, line| match OrderLine::check(line) {
                    Ok(()) => {
                        items.push(OrderLine::I_ID.get(line));
                        true
                    }
                    Err(error) => {
                        bad = Some(error);
                        false
                    }
                },
            )?;
            if let Some(error) = bad {
                return Err(error.into());
            }
            items.sort_unstable();
            items.dedup();
            let mut low = 0u32;
            // In batches of hints, as NewOrder does: the stock rows' misses
            // (up to 200 distinct items) overlap instead of coming one by one.
            for batch in items.chunks(STOCK_LEVEL_HINTS) {
                for &item in batch {
                    tx.prefetch(table::STOCK, &keys::stock(w, item));
                }
                for &item in batch {
                    let quantity =
                        read_row::<Stock, _>(tx, table::STOCK, &keys::stock(w, item), |row| Stock::QUANTITY.get(row))?;
                    low += (quantity < threshold) as u32;
                }
            }
            Ok(low)
        })?;
        Ok(summary(STOCK_LEVEL, &outcome, attempts))
    }
}

/// Stock rows StockLevel hints at once (about NewOrder's 15; more would
/// evict each other's lines from the first-level cache before they are read).
const STOCK_LEVEL_HINTS: usize = 16;

/// Reads a row that must exist: `read` sees it once its length is checked.
#[inline]
fn read_row<T: Row, R>(
    tx: &mut Transaction<'_>,
    table: TableId,
    key: &[u8],
    read: impl FnOnce(&[u8]) -> R,
) -> Result<R, TxError> {
    match tx.get_with(table, key, |row| T::check(row).map(|()| read(row)))? {
        Some(result) => Ok(result?),
        None => Err(missing::<T>(key)),
    }
}

/// Changes a row that must exist in place: `modify` sees it once its length
/// is checked (a row of the wrong length is left as it was and the
/// transaction fails).
#[inline]
fn update_row<T: Row, R>(
    tx: &mut Transaction<'_>,
    table: TableId,
    key: &[u8],
    modify: impl FnOnce(&mut [u8]) -> R,
) -> Result<R, TxError> {
    match tx.update_with(table, key, |row| T::check(row).map(|()| modify(row)))? {
        Some(result) => Ok(result?),
        None => Err(missing::<T>(key)),
    }
}

#[cold]
fn missing<T: Row>(key: &[u8]) -> TxError {
    corrupt(format!("tpcc: missing {} row (key {key:02x?})", T::TYPE_NAME))
}

/// The bounds of the keys starting with `prefix`, given its
/// [`keys::prefix_end`].
fn prefix_bounds<'a, const N: usize>(
    prefix: &'a [u8; N],
    end: &'a Option<([u8; N], usize)>,
) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
    let upper = match end {
        Some((end, len)) => Bound::Excluded(&end[..*len]),
        None => Bound::Unbounded,
    };
    (Bound::Included(&prefix[..]), upper)
}

/// The customer at position ceil(n / 2) among the `n` customers of district
/// (w, d) with last name `last`, sorted by first name (2.5.2.2): its key and
/// id, and `read(its row)`.
fn customer_by_name<R>(
    tx: &mut Transaction<'_>,
    w: u32,
    d: u8,
    last: &[u8; 16],
    read: impl FnOnce(&[u8]) -> R,
) -> Result<(([u8; 9], u32), R), TxError> {
    let prefix = keys::customer_name_prefix(w, d, last);
    // The engine offers secondary scans only as collecting scans; the rows
    // come back in (last, first) order, as the rule needs.
    let matches = tx.scan_secondary(
        table::CUSTOMER,
        table::CUSTOMER_BY_NAME,
        prefix_bounds(&prefix, &keys::prefix_end(&prefix)),
        ScanDirection::Forward,
        usize::MAX,
    )?;
    if matches.is_empty() {
        return Err(corrupt(format!(
            "tpcc: no customer named {} in district ({w}, {d})",
            String::from_utf8_lossy(text(last))
        )));
    }
    let (key, value) = &matches[matches.len().div_ceil(2) - 1];
    Customer::check(value)?;
    let key: [u8; 9] = key.as_slice().try_into().map_err(|_| corrupt(format!("tpcc: bad customer key {key:02x?}")))?;
    let c = keys::customer_id_of(&key).expect("a 9-byte customer key");
    Ok(((key, c), read(value)))
}

/// Puts `entry` in front of the text of a zero-padded field, cutting what
/// no longer fits (C_DATA of a bad-credit customer, 2.5.2.2), in place.
fn shift_in(field: &mut [u8], entry: &[u8]) {
    let entry = &entry[..entry.len().min(field.len())];
    let keep = text(field).len().min(field.len() - entry.len());
    field.copy_within(0..keep, entry.len());
    field[..entry.len()].copy_from_slice(entry);
    field[entry.len() + keep..].fill(0);
}

/// Formatted text in a fixed buffer: `write!` without allocating; fails
/// when the text does not fit.
struct StackText<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> StackText<N> {
    fn new() -> Self {
        Self { bytes: [0; N], len: 0 }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl<const N: usize> std::fmt::Write for StackText<N> {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        let end = self.len + text.len();
        if end > N {
            return Err(std::fmt::Error);
        }
        self.bytes[self.len..end].copy_from_slice(text.as_bytes());
        self.len = end;
        Ok(())
    }
}

fn summary<R>(type_index: usize, outcome: &Outcome<R>, attempts: u32) -> TxnSummary {
    TxnSummary { type_index, committed: matches!(outcome, Outcome::Committed(_)), attempts }
}

impl Client for TpccClient {
    fn run_next(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let type_index = self.next_type();
        self.run_type(worker, type_index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen::fixed;

    #[test]
    fn shift_in_is_entry_then_old_text_cut_to_the_field() {
        for old_len in [0usize, 3, 480, 495, 500] {
            let mut field = [0u8; 500];
            for (index, byte) in field[..old_len].iter_mut().enumerate() {
                *byte = b'a' + (index % 26) as u8;
            }
            let entry = b"12 3 1 3 1 4999.05 ";
            let mut expected = entry.to_vec();
            expected.extend_from_slice(text(&field));
            let expected: [u8; 500] = fixed(&expected);
            shift_in(&mut field, entry);
            assert_eq!(field, expected, "old text of {old_len} bytes");
        }
    }

    #[test]
    fn stack_text_formats_and_refuses_overflow() {
        let mut text = StackText::<8>::new();
        write!(text, "{} {}", 12, 34).unwrap();
        assert_eq!(text.as_bytes(), b"12 34");
        assert!(write!(text, "6789").is_err());
    }
}
