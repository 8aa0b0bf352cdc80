//! The five TPC-C transactions (clauses 2.4-2.8). Inputs are drawn before
//! the transaction runs, so a retried body repeats the same transaction.

use super::rows::*;
use super::{keys, table, Shared, DELIVERY, DISTRICTS_PER_WAREHOUSE, NEW_ORDER, ORDER_STATUS, PAYMENT, STOCK_LEVEL};
use crate::common::{corrupt, get_required};
use crate::gen::{child_seed, fixed, last_name, now_millis, nurand, rng, text, WorkloadRng};
use crate::{Client, TxnSummary};
use pmtx_engine::{prefix_range, AbortReason, DbError, Outcome, ScanDirection, Transaction, TxError, Worker};
use rand::Rng;
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

/// A TPC-C terminal: a home warehouse (`worker_index % warehouses + 1`) and a
/// fixed StockLevel district.
pub struct TpccClient {
    shared: Arc<Shared>,
    rng: WorkloadRng,
    worker_index: usize,
    home_w: u32,
    stock_level_d: u8,
    lines: Vec<Line>,
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
            lines: Vec::with_capacity(15),
        }
    }

    /// The terminal's home warehouse.
    pub fn home_warehouse(&self) -> u32 {
        self.home_w
    }

    /// Draws the next transaction type from the standard mix.
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
            CustomerBy::Name(fixed(last_name(number as u32).as_bytes()))
        } else {
            CustomerBy::Id(self.customer_id())
        }
    }

    /// Clause 2.4: NewOrder, with 1% rolled back by an unused item id.
    fn new_order(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let scale = self.shared.scale;
        let w = self.home_w;
        let d = self.district();
        let c = self.customer_id();
        let ol_cnt = self.rng.gen_range(5..=15u8);
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
            let warehouse = Warehouse::decode(&get_required(tx, table::WAREHOUSE, &keys::warehouse(w), "warehouse")?)?;
            let district_key = keys::district(w, d);
            let mut district = District::decode(&get_required(tx, table::DISTRICT, &district_key, "district")?)?;
            let o = district.next_o_id;
            district.next_o_id += 1;
            tx.update(table::DISTRICT, &district_key, &district.encode())?;
            let customer = Customer::decode(&get_required(tx, table::CUSTOMER, &keys::customer(w, d, c), "customer")?)?;
            let order = Order { c_id: c, entry_d: now, carrier_id: 0, ol_cnt, all_local };
            // An order at D_NEXT_O_ID exists only if another NewOrder took
            // this id since we read the district: our read is stale and the
            // attempt cannot commit (OCC bodies may see such states), so
            // abort it for a retry.
            if !tx.insert(table::ORDER, &keys::order(w, d, o), &order.encode())? {
                return Err(TxError::Abort(AbortReason::ReadValidation));
            }
            if !tx.insert(table::NEW_ORDER, &keys::new_order(w, d, o), NEW_ORDER_VALUE)? {
                return Err(TxError::Abort(AbortReason::ReadValidation));
            }
            let mut total = 0i64;
            for (number, line) in lines.iter().enumerate() {
                let Some(item) = tx.get(table::ITEM, &keys::item(line.item))? else {
                    // The unused item id of the 1%: roll back (2.4.2.3).
                    return Err(tx.rollback());
                };
                let item = Item::decode(&item)?;
                let stock_key = keys::stock(line.supply_w, line.item);
                let mut stock = Stock::decode(&get_required(tx, table::STOCK, &stock_key, "stock")?)?;
                let quantity = line.quantity as i32;
                stock.quantity = if stock.quantity >= quantity + 10 {
                    stock.quantity - quantity
                } else {
                    stock.quantity - quantity + 91
                };
                stock.ytd += line.quantity as u32;
                stock.order_cnt += 1;
                if line.supply_w != w {
                    stock.remote_cnt += 1;
                }
                tx.update(table::STOCK, &stock_key, &stock.encode())?;
                let amount = line.quantity as i64 * item.price;
                total += amount;
                let order_line = OrderLine {
                    i_id: line.item,
                    supply_w_id: line.supply_w,
                    delivery_d: 0,
                    quantity: line.quantity,
                    amount,
                    dist_info: stock.dist_info(d),
                };
                tx.insert(table::ORDER_LINE, &keys::order_line(w, d, o, number as u8 + 1), &order_line.encode())?;
            }
            // The terminal output: total * (1 - C_DISCOUNT) * (1 + W_TAX + D_TAX).
            let rate = (10_000 - customer.discount as i64) * (10_000 + warehouse.tax as i64 + district.tax as i64);
            Ok(total * rate / 100_000_000)
        })?;
        Ok(summary(NEW_ORDER, &outcome, attempts))
    }

    /// Clause 2.5: Payment; 15% to a remote customer when there are
    /// several warehouses.
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
            let warehouse_key = keys::warehouse(w);
            let mut warehouse = Warehouse::decode(&get_required(tx, table::WAREHOUSE, &warehouse_key, "warehouse")?)?;
            warehouse.ytd += amount;
            tx.update(table::WAREHOUSE, &warehouse_key, &warehouse.encode())?;
            let district_key = keys::district(w, d);
            let mut district = District::decode(&get_required(tx, table::DISTRICT, &district_key, "district")?)?;
            district.ytd += amount;
            tx.update(table::DISTRICT, &district_key, &district.encode())?;
            let (customer_key, mut customer) = select_customer(tx, c_w, c_d, by)?;
            let c = u32::from_be_bytes(customer_key[5..9].try_into().expect("customer key"));
            customer.balance -= amount;
            customer.ytd_payment += amount;
            customer.payment_cnt += 1;
            if &customer.credit == b"BC" {
                let mut data = format!("{c} {c_d} {c_w} {d} {w} {}.{:02} ", amount / 100, amount % 100).into_bytes();
                data.extend_from_slice(text(&customer.data));
                customer.data = fixed(&data);
            }
            tx.update(table::CUSTOMER, &customer_key, &customer.encode())?;
            let mut h_data = text(&warehouse.name).to_vec();
            h_data.extend_from_slice(b"    ");
            h_data.extend_from_slice(text(&district.name));
            let history = History {
                c_id: c,
                c_d_id: c_d,
                c_w_id: c_w,
                d_id: d,
                w_id: w,
                date: now,
                amount,
                data: fixed(&h_data),
            }
            .encode();
            let mut sequence = sequence;
            while !tx.insert(table::HISTORY, &keys::history(w, d, origin, sequence), &history)? {
                sequence = sequence.wrapping_add(1);
            }
            Ok(())
        })?;
        Ok(summary(PAYMENT, &outcome, attempts))
    }

    /// Clause 2.6: OrderStatus (read-only).
    fn order_status(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let w = self.home_w;
        let d = self.district();
        let by = self.customer_by();
        let (outcome, attempts) = worker.run_pipelined(ORDER_STATUS as u32, true, |tx| {
            let (customer_key, customer) = select_customer(tx, w, d, by)?;
            let c = u32::from_be_bytes(customer_key[5..9].try_into().expect("customer key"));
            let prefix = keys::order_customer_prefix(w, d, c);
            let mut upper = Vec::new();
            let last = tx.scan_secondary(
                table::ORDER,
                table::ORDER_BY_CUSTOMER,
                prefix_range(&prefix, &mut upper),
                ScanDirection::Reverse,
                1,
            )?;
            let Some((order_key, order)) = last.into_iter().next() else {
                return Err(corrupt(format!("tpcc: customer ({w}, {d}, {c}) has no order")));
            };
            let order = Order::decode(&order)?;
            let mut upper = Vec::new();
            let lines = tx.scan(table::ORDER_LINE, prefix_range(&order_key, &mut upper), ScanDirection::Forward, 15)?;
            let mut amount = 0;
            for (_, line) in &lines {
                amount += OrderLine::decode(line)?.amount;
            }
            if lines.len() != order.ol_cnt as usize {
                return Err(corrupt(format!(
                    "tpcc: order {order_key:02x?} has {} lines, not {}",
                    lines.len(),
                    order.ol_cnt
                )));
            }
            Ok((customer.balance, order.carrier_id, amount))
        })?;
        Ok(summary(ORDER_STATUS, &outcome, attempts))
    }

    /// Clause 2.7: Delivery of the oldest undelivered order of each of the
    /// ten districts, in one transaction.
    fn delivery(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let w = self.home_w;
        let carrier: u8 = self.rng.gen_range(1..=10);
        let now = now_millis();
        let shared = &*self.shared;
        let (outcome, attempts) = worker.run_pipelined(DELIVERY as u32, false, |tx| {
            let mut delivered = Vec::with_capacity(DISTRICTS_PER_WAREHOUSE as usize);
            for d in 1..=DISTRICTS_PER_WAREHOUSE {
                let lower = keys::new_order(w, d, shared.hint(w, d).load(Ordering::Acquire));
                let upper = keys::district(w, d + 1);
                let oldest = tx.scan(
                    table::NEW_ORDER,
                    (Bound::Included(&lower), Bound::Excluded(&upper)),
                    ScanDirection::Forward,
                    1,
                )?;
                let Some((new_order_key, _)) = oldest.into_iter().next() else {
                    continue; // Nothing to deliver in this district (2.7.4.2).
                };
                let o = keys::order_id_of(&new_order_key).ok_or_else(|| corrupt("tpcc: bad new-order key"))?;
                tx.delete(table::NEW_ORDER, &new_order_key)?;
                let order_key = keys::order(w, d, o);
                let mut order = Order::decode(&get_required(tx, table::ORDER, &order_key, "order")?)?;
                order.carrier_id = carrier;
                tx.update(table::ORDER, &order_key, &order.encode())?;
                let mut upper = Vec::new();
                let lines =
                    tx.scan(table::ORDER_LINE, prefix_range(&order_key, &mut upper), ScanDirection::Forward, 15)?;
                let mut amount = 0;
                for (line_key, line) in lines {
                    let mut line = OrderLine::decode(&line)?;
                    line.delivery_d = now;
                    amount += line.amount;
                    tx.update(table::ORDER_LINE, &line_key, &line.encode())?;
                }
                let customer_key = keys::customer(w, d, order.c_id);
                let mut customer = Customer::decode(&get_required(tx, table::CUSTOMER, &customer_key, "customer")?)?;
                customer.balance += amount;
                customer.delivery_cnt += 1;
                tx.update(table::CUSTOMER, &customer_key, &customer.encode())?;
                delivered.push((d, o));
            }
            Ok(delivered)
        })?;
        if let Outcome::Committed(delivered) = &outcome {
            for &(d, o) in delivered {
                shared.hint(w, d).fetch_max(o + 1, Ordering::AcqRel);
            }
        }
        Ok(summary(DELIVERY, &outcome, attempts))
    }

    /// Clause 2.8: StockLevel (read-only) over the district's last 20 orders.
    fn stock_level(&mut self, worker: &mut Worker) -> Result<TxnSummary, DbError> {
        let w = self.home_w;
        let d = self.stock_level_d;
        let threshold: i32 = self.rng.gen_range(10..=20);
        let (outcome, attempts) = worker.run_pipelined(STOCK_LEVEL as u32, true, |tx| {
            let district = District::decode(&get_required(tx, table::DISTRICT, &keys::district(w, d), "district")?)?;
            let next = district.next_o_id;
            let lower = keys::order(w, d, next.saturating_sub(20));
            let upper = keys::order(w, d, next);
            let mut items = Vec::with_capacity(300);
            let mut bad = false;
            tx.scan_with(
                table::ORDER_LINE,
                (Bound::Included(&lower), Bound::Excluded(&upper)),
                ScanDirection::Forward,
                usize::MAX,
                |_, line| match OrderLine::decode(line) {
                    Ok(line) => {
                        items.push(line.i_id);
                        true
                    }
                    Err(_) => {
                        bad = true;
                        false
                    }
                },
            )?;
            if bad {
                return Err(corrupt("tpcc: bad order-line row"));
            }
            items.sort_unstable();
            items.dedup();
            let mut low = 0u32;
            for item in items {
                let stock = Stock::decode(&get_required(tx, table::STOCK, &keys::stock(w, item), "stock")?)?;
                low += (stock.quantity < threshold) as u32;
            }
            Ok(low)
        })?;
        Ok(summary(STOCK_LEVEL, &outcome, attempts))
    }
}

/// The customer chosen by id, or the one at position ceil(n / 2) among
/// those with the last name sorted by first name (2.5.2.2).
fn select_customer(tx: &mut Transaction<'_>, w: u32, d: u8, by: CustomerBy) -> Result<(Vec<u8>, Customer), TxError> {
    match by {
        CustomerBy::Id(c) => {
            let key = keys::customer(w, d, c);
            let customer = Customer::decode(&get_required(tx, table::CUSTOMER, &key, "customer")?)?;
            Ok((key, customer))
        }
        CustomerBy::Name(last) => {
            let prefix = keys::customer_name_prefix(w, d, &last);
            let mut upper = Vec::new();
            let mut matches = tx.scan_secondary(
                table::CUSTOMER,
                table::CUSTOMER_BY_NAME,
                prefix_range(&prefix, &mut upper),
                ScanDirection::Forward,
                usize::MAX,
            )?;
            if matches.is_empty() {
                return Err(corrupt(format!(
                    "tpcc: no customer named {} in district ({w}, {d})",
                    String::from_utf8_lossy(text(&last))
                )));
            }
            let (key, value) = matches.swap_remove(matches.len().div_ceil(2) - 1);
            Ok((key, Customer::decode(&value)?))
        }
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
