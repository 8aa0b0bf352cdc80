//! Consistency conditions 1-6 of clause 3.3.2, plus the cardinalities of the
//! tables the transactions never grow or shrink.

use super::rows::*;
use super::{keys, table, Shared, DISTRICTS_PER_WAREHOUSE};
use crate::common::scan_pages;
use crate::{CheckReport, WorkloadError};
use pmtx_engine::{Database, Outcome, TableId, Worker};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Results of one condition over every warehouse / district.
struct Tally {
    name: &'static str,
    checked: u64,
    failed: u64,
    first_failure: Option<String>,
}

impl Tally {
    fn new(name: &'static str) -> Self {
        Self { name, checked: 0, failed: 0, first_failure: None }
    }

    fn record(&mut self, passed: bool, detail: impl FnOnce() -> String) {
        self.checked += 1;
        if !passed {
            self.failed += 1;
            self.first_failure.get_or_insert_with(detail);
        }
    }

    fn report(self, what: &str, report: &mut CheckReport) {
        let detail = match &self.first_failure {
            None => format!("holds for {} {what}", self.checked),
            Some(first) => format!("fails for {} of {} {what}; first: {first}", self.failed, self.checked),
        };
        report.push(self.name, self.failed == 0, detail);
    }
}

fn get(worker: &mut Worker, table: TableId, key: &[u8]) -> Result<Option<Vec<u8>>, WorkloadError> {
    let (outcome, _) = worker.run_pipelined(0, true, |tx| tx.get(table, key))?;
    worker.drain_acknowledged(|_, _| {});
    match outcome {
        Outcome::Committed(value) => Ok(value),
        Outcome::RolledBack => Err(WorkloadError::Inconsistent("a read-only get rolled back".into())),
    }
}

pub(super) fn check(shared: &Shared, db: &Arc<Database>) -> Result<CheckReport, WorkloadError> {
    let scale = shared.scale;
    let mut worker = db.worker(0)?;
    let mut report = CheckReport::default();

    let mut layout = Tally::new("row layouts");

    // Tables whose size never changes. They are hash tables (no range
    // scans), so they are counted with the engine's quiescent row dump,
    // which also finds rows outside the key space the workload loads.
    for (name, expected) in scale.initial_rows() {
        let static_table = matches!(name, "warehouse" | "district" | "customer" | "item" | "stock");
        let (Some(expected), true) = (expected, static_table) else { continue };
        let id = TableId(table::NAMES.iter().position(|n| *n == name).expect("known table") as u32);
        let length = match name {
            "warehouse" => Warehouse::LEN,
            "district" => District::LEN,
            "customer" => Customer::LEN,
            "item" => Item::LEN,
            _ => Stock::LEN,
        };
        let mut count = 0u64;
        db.for_each_row(id, |key, value| {
            count += 1;
            layout.record(value.len() == length, || {
                format!("{name} {key:02x?}: {} bytes, expected {length}", value.len())
            });
        })?;
        report.push(format!("cardinality of {name}"), count == expected, format!("{count} rows, expected {expected}"));
    }

    let mut c1 = Tally::new("condition 1: W_YTD = sum(D_YTD)");
    let mut c2 = Tally::new("condition 2: D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID)");
    let mut c3 = Tally::new("condition 3: max(NO_O_ID) - min(NO_O_ID) + 1 = count(NEW-ORDER)");
    let mut c4 = Tally::new("condition 4: sum(O_OL_CNT) = count(ORDER-LINE)");
    let mut c5 = Tally::new("condition 5: O_CARRIER_ID null iff a NEW-ORDER row exists");
    let mut c6 = Tally::new("condition 6: O_OL_CNT = the order's ORDER-LINE rows");

    for w in 1..=scale.warehouses {
        let warehouse = get(&mut worker, table::WAREHOUSE, &keys::warehouse(w))?.map(|v| Warehouse::decode(&v));
        let warehouse = match warehouse {
            Some(Ok(warehouse)) => Some(warehouse),
            other => {
                layout.record(false, || format!("warehouse {w}: {other:?}"));
                None
            }
        };
        let mut district_ytd = 0i64;
        for d in 1..=DISTRICTS_PER_WAREHOUSE {
            let district = get(&mut worker, table::DISTRICT, &keys::district(w, d))?.map(|v| District::decode(&v));
            let district = match district {
                Some(Ok(district)) => district,
                other => {
                    layout.record(false, || format!("district ({w}, {d}): {other:?}"));
                    continue;
                }
            };
            district_ytd += district.ytd;
            let lower = keys::district(w, d);
            let upper = keys::district(w, d + 1);

            // ORDER: (o_id, ol_cnt, carrier set), in o_id order.
            let mut orders: Vec<(u32, u8, bool)> = Vec::new();
            scan_pages(&mut worker, table::ORDER, &lower, Some(&upper), |key, value| {
                match (keys::order_id_of(key), Order::decode(value)) {
                    (Some(o), Ok(order)) => orders.push((o, order.ol_cnt, order.carrier_id != 0)),
                    (o, order) => layout.record(false, || format!("order ({w}, {d}, {o:?}): {order:?}")),
                }
                Ok(())
            })?;
            let mut new_orders: Vec<u32> = Vec::new();
            scan_pages(&mut worker, table::NEW_ORDER, &lower, Some(&upper), |key, _| {
                match keys::order_id_of(key) {
                    Some(o) => new_orders.push(o),
                    None => layout.record(false, || format!("new-order key {key:02x?}")),
                }
                Ok(())
            })?;
            // ORDER-LINE rows per order id, in o_id order.
            let mut lines: Vec<(u32, u32)> = Vec::new();
            let mut line_rows = 0u64;
            scan_pages(&mut worker, table::ORDER_LINE, &lower, Some(&upper), |key, value| {
                line_rows += 1;
                match (keys::order_id_of(key), OrderLine::decode(value)) {
                    (Some(o), Ok(_)) => match lines.last_mut() {
                        Some((last, count)) if *last == o => *count += 1,
                        _ => lines.push((o, 1)),
                    },
                    (o, line) => layout.record(false, || format!("order line ({w}, {d}, {o:?}): {line:?}")),
                }
                Ok(())
            })?;

            // Delivery's lower bound for this district: exact now (the
            // database is quiescent), which also repairs hints of commits a
            // crash lost.
            let hint = new_orders.first().copied().unwrap_or(district.next_o_id);
            shared.hint(w, d).store(hint, Ordering::Release);

            let max_o = orders.last().map_or(0, |&(o, _, _)| o);
            let max_no = new_orders.last().copied();
            c2.record(district.next_o_id.wrapping_sub(1) == max_o && max_no.is_none_or(|no| no == max_o), || {
                format!(
                    "district ({w}, {d}): D_NEXT_O_ID - 1 = {}, max(O_ID) = {max_o}, max(NO_O_ID) = {max_no:?}",
                    district.next_o_id.wrapping_sub(1)
                )
            });
            if let (Some(&min_no), Some(max_no)) = (new_orders.first(), max_no) {
                c3.record(max_no - min_no + 1 == new_orders.len() as u32, || {
                    format!("district ({w}, {d}): NO_O_ID {min_no}..={max_no} but {} rows", new_orders.len())
                });
            }
            let ol_sum: u64 = orders.iter().map(|&(_, ol_cnt, _)| ol_cnt as u64).sum();
            c4.record(ol_sum == line_rows, || {
                format!("district ({w}, {d}): sum(O_OL_CNT) = {ol_sum}, {line_rows} order lines")
            });

            // Conditions 5 and 6 by merging the sorted lists.
            let (mut next_new_order, mut next_line) = (0, 0);
            for &(o, ol_cnt, carrier_set) in &orders {
                while next_new_order < new_orders.len() && new_orders[next_new_order] < o {
                    c5.record(false, || format!("new-order ({w}, {d}, {}) has no order", new_orders[next_new_order]));
                    next_new_order += 1;
                }
                let has_new_order = new_orders.get(next_new_order) == Some(&o);
                next_new_order += has_new_order as usize;
                c5.record(carrier_set != has_new_order, || {
                    format!("order ({w}, {d}, {o}): carrier set = {carrier_set}, new-order row = {has_new_order}")
                });
                while next_line < lines.len() && lines[next_line].0 < o {
                    c6.record(false, || format!("order lines of ({w}, {d}, {}) have no order", lines[next_line].0));
                    next_line += 1;
                }
                let count = match lines.get(next_line) {
                    Some(&(line_o, count)) if line_o == o => {
                        next_line += 1;
                        count
                    }
                    _ => 0,
                };
                c6.record(count == ol_cnt as u32, || {
                    format!("order ({w}, {d}, {o}): O_OL_CNT = {ol_cnt}, {count} lines")
                });
            }
            for &o in &new_orders[next_new_order..] {
                c5.record(false, || format!("new-order ({w}, {d}, {o}) has no order"));
            }
            for &(o, _) in &lines[next_line..] {
                c6.record(false, || format!("order lines of ({w}, {d}, {o}) have no order"));
            }
        }
        if let Some(warehouse) = warehouse {
            c1.record(warehouse.ytd == district_ytd, || {
                format!("warehouse {w}: W_YTD = {}, sum(D_YTD) = {district_ytd}", warehouse.ytd)
            });
        }
    }
    c1.report("warehouses", &mut report);
    c2.report("districts", &mut report);
    c3.report("districts with new orders", &mut report);
    c4.report("districts", &mut report);
    c5.report("orders", &mut report);
    c6.report("orders", &mut report);
    let bad_rows = match &layout.first_failure {
        None => "every row read decodes".to_string(),
        Some(first) => format!("{} rows do not decode; first: {first}", layout.failed),
    };
    report.push(layout.name, layout.failed == 0, bad_rows);
    Ok(report)
}
