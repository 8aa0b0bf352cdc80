//! The initial population (clause 4.3.3.1), generated in independent tasks
//! (each seeded from the load seed and its index, so the database does not
//! depend on the number of threads) and inserted in small transactions.

use super::rows::*;
use super::{keys, table, Shared, DISTRICTS_PER_WAREHOUSE};
use crate::common::{insert_rows, load_parallel};
use crate::gen::{a_string, child_seed, fill_alphanumeric, fixed, last_name, n_string, now_millis, nurand, rng};
use crate::WorkloadError;
use pmtx_engine::{Database, TableId};
use rand::seq::SliceRandom;
use rand::Rng;
use std::sync::Arc;

const ITEMS_PER_TASK: u32 = 256;
const STOCK_PER_TASK: u32 = 128;
const CUSTOMERS_PER_TASK: u32 = 48;
const ORDERS_PER_TASK: u32 = 24;

enum Task {
    Items { first: u32, last: u32 },
    Warehouse { w: u32 },
    Stock { w: u32, first: u32, last: u32 },
    Customers { w: u32, d: u8, first: u32, last: u32 },
    Orders { w: u32, d: u8, first: u32, last: u32 },
}

fn ranges(count: u32, step: u32) -> impl Iterator<Item = (u32, u32)> {
    (1..=count).step_by(step as usize).map(move |first| (first, (first + step - 1).min(count)))
}

type Rows = Vec<(TableId, Vec<u8>, Vec<u8>)>;

pub(super) fn load(
    shared: &Shared,
    db: &Arc<Database>,
    threads: usize,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<(), WorkloadError> {
    let scale = shared.scale;
    for hint in &shared.delivery_hints {
        hint.store(0, std::sync::atomic::Ordering::Release);
    }
    let mut tasks = Vec::new();
    for w in 1..=scale.warehouses {
        tasks.push(Task::Warehouse { w });
        for d in 1..=DISTRICTS_PER_WAREHOUSE {
            tasks.extend(ranges(scale.orders, ORDERS_PER_TASK).map(|(first, last)| Task::Orders { w, d, first, last }));
            tasks.extend(ranges(scale.customers, CUSTOMERS_PER_TASK).map(|(first, last)| Task::Customers {
                w,
                d,
                first,
                last,
            }));
        }
        tasks.extend(ranges(scale.items, STOCK_PER_TASK).map(|(first, last)| Task::Stock { w, first, last }));
    }
    tasks.extend(ranges(scale.items, ITEMS_PER_TASK).map(|(first, last)| Task::Items { first, last }));

    // O_C_ID is a random permutation of the customers of each district.
    let permutations: Vec<Vec<u32>> = (1..=scale.warehouses)
        .flat_map(|w| (1..=DISTRICTS_PER_WAREHOUSE).map(move |d| (w, d)))
        .map(|(w, d)| {
            let mut permutation: Vec<u32> = (1..=scale.customers).collect();
            let mut rng = rng(child_seed(shared.load_seed ^ 0x9E2E_0000, (w as u64) << 8 | d as u64));
            permutation.shuffle(&mut rng);
            permutation
        })
        .collect();

    let districts = scale.warehouses as u64 * DISTRICTS_PER_WAREHOUSE as u64;
    let total = scale.items as u64
        + scale.warehouses as u64 * (1 + DISTRICTS_PER_WAREHOUSE as u64 + scale.items as u64)
        + districts * (2 * scale.customers as u64 + 11 * scale.orders as u64 + scale.new_orders as u64);
    let now = now_millis();
    load_parallel(db, threads, &tasks, total, progress, |worker, _slot, index, task| {
        let mut rng = rng(child_seed(shared.load_seed, index as u64));
        let mut rows: Rows = Vec::new();
        match *task {
            Task::Items { first, last } => items(&mut rng, first, last, &mut rows),
            Task::Warehouse { w } => warehouse(&mut rng, shared, w, &mut rows),
            Task::Stock { w, first, last } => stock(&mut rng, w, first, last, &mut rows),
            Task::Customers { w, d, first, last } => customers(&mut rng, shared, now, w, d, first, last, &mut rows),
            Task::Orders { w, d, first, last } => {
                let permutation = &permutations[(w as usize - 1) * DISTRICTS_PER_WAREHOUSE as usize + d as usize - 1];
                orders(&mut rng, shared, now, permutation, w, d, first, last, &mut rows)
            }
        }
        insert_rows(worker, &rows)?;
        Ok(rows.len() as u64)
    })
}

/// I_DATA / S_DATA: a-string [26..50], 10% with "ORIGINAL" somewhere.
fn data_with_original(rng: &mut impl Rng) -> [u8; 50] {
    let mut data = a_string(rng, 26, 50);
    if rng.gen_ratio(1, 10) {
        let at = rng.gen_range(0..=data.len() - 8);
        data[at..at + 8].copy_from_slice(b"ORIGINAL");
    }
    fixed(&data)
}

struct Address {
    street_1: [u8; 20],
    street_2: [u8; 20],
    city: [u8; 20],
    state: [u8; 2],
    zip: [u8; 9],
}

fn address(rng: &mut impl Rng) -> Address {
    let mut zip = n_string(rng, 4, 4);
    zip.extend_from_slice(b"11111");
    Address {
        street_1: fixed(&a_string(rng, 10, 20)),
        street_2: fixed(&a_string(rng, 10, 20)),
        city: fixed(&a_string(rng, 10, 20)),
        state: fixed(&a_string(rng, 2, 2)),
        zip: fixed(&zip),
    }
}

fn items(rng: &mut impl Rng, first: u32, last: u32, rows: &mut Rows) {
    for i in first..=last {
        let item = Item {
            im_id: rng.gen_range(1..=10_000),
            price: rng.gen_range(100..=10_000),
            name: fixed(&a_string(rng, 14, 24)),
            data: data_with_original(rng),
        };
        rows.push((table::ITEM, keys::item(i).to_vec(), item.encode()));
    }
}

fn warehouse(rng: &mut impl Rng, shared: &Shared, w: u32, rows: &mut Rows) {
    let name = fixed(&a_string(rng, 6, 10));
    let Address { street_1, street_2, city, state, zip } = address(rng);
    let tax = rng.gen_range(0..=2000);
    let row = Warehouse { name, street_1, street_2, city, state, zip, tax, ytd: 30_000_000 };
    rows.push((table::WAREHOUSE, keys::warehouse(w).to_vec(), row.encode()));
    for d in 1..=DISTRICTS_PER_WAREHOUSE {
        let name = fixed(&a_string(rng, 6, 10));
        let Address { street_1, street_2, city, state, zip } = address(rng);
        let tax = rng.gen_range(0..=2000);
        let next_o_id = shared.scale.orders + 1;
        let row = District { name, street_1, street_2, city, state, zip, tax, ytd: 3_000_000, next_o_id };
        rows.push((table::DISTRICT, keys::district(w, d).to_vec(), row.encode()));
    }
}

fn stock(rng: &mut impl Rng, w: u32, first: u32, last: u32, rows: &mut Rows) {
    for i in first..=last {
        let mut dist = [0u8; 240];
        fill_alphanumeric(rng, &mut dist);
        let row = Stock {
            quantity: rng.gen_range(10..=100),
            ytd: 0,
            order_cnt: 0,
            remote_cnt: 0,
            dist,
            data: data_with_original(rng),
        };
        rows.push((table::STOCK, keys::stock(w, i).to_vec(), row.encode()));
    }
}

#[allow(clippy::too_many_arguments)]
fn customers(rng: &mut impl Rng, shared: &Shared, now: u64, w: u32, d: u8, first: u32, last: u32, rows: &mut Rows) {
    for c in first..=last {
        let last_number = if c <= 1000 { c - 1 } else { nurand(rng, 255, 0, 999, shared.constants.c_last_load) as u32 };
        let Address { street_1, street_2, city, state, zip } = address(rng);
        let customer = Customer {
            last: fixed(last_name(last_number).as_bytes()),
            first: fixed(&a_string(rng, 8, 16)),
            middle: *b"OE",
            street_1,
            street_2,
            city,
            state,
            zip,
            phone: fixed(&n_string(rng, 16, 16)),
            since: now,
            credit: if rng.gen_ratio(1, 10) { *b"BC" } else { *b"GC" },
            credit_lim: 5_000_000,
            discount: rng.gen_range(0..=5000),
            balance: -1000,
            ytd_payment: 1000,
            payment_cnt: 1,
            delivery_cnt: 0,
            data: fixed(&a_string(rng, 300, 500)),
        };
        rows.push((table::CUSTOMER, keys::customer(w, d, c).to_vec(), customer.encode()));
        let history = History {
            c_id: c,
            c_d_id: d,
            c_w_id: w,
            d_id: d,
            w_id: w,
            date: now,
            amount: 1000,
            data: fixed(&a_string(rng, 12, 24)),
        };
        rows.push((table::HISTORY, keys::history(w, d, 0, c as u64).to_vec(), history.encode()));
    }
}

#[allow(clippy::too_many_arguments)]
fn orders(
    rng: &mut impl Rng,
    shared: &Shared,
    now: u64,
    permutation: &[u32],
    w: u32,
    d: u8,
    first: u32,
    last: u32,
    rows: &mut Rows,
) {
    let delivered = shared.scale.delivered();
    let items = shared.scale.items;
    for o in first..=last {
        let is_delivered = o <= delivered;
        let ol_cnt: u8 = rng.gen_range(5..=15);
        let order = Order {
            c_id: permutation[o as usize - 1],
            entry_d: now,
            carrier_id: if is_delivered { rng.gen_range(1..=10) } else { 0 },
            ol_cnt,
            all_local: 1,
        };
        rows.push((table::ORDER, keys::order(w, d, o).to_vec(), order.encode()));
        for number in 1..=ol_cnt {
            let mut dist_info = [0u8; 24];
            fill_alphanumeric(rng, &mut dist_info);
            let line = OrderLine {
                i_id: rng.gen_range(1..=items),
                supply_w_id: w,
                delivery_d: if is_delivered { now } else { 0 },
                quantity: 5,
                amount: if is_delivered { 0 } else { rng.gen_range(1..=999_999) },
                dist_info,
            };
            rows.push((table::ORDER_LINE, keys::order_line(w, d, o, number).to_vec(), line.encode()));
        }
        if !is_delivered {
            rows.push((table::NEW_ORDER, keys::new_order(w, d, o).to_vec(), NEW_ORDER_VALUE.to_vec()));
        }
    }
}
