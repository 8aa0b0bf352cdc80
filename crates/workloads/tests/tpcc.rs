//! TPC-C at a reduced (non-standard) scale: population cardinalities and key
//! ranges, consistency after load, after concurrent runs on every engine,
//! and after crash recovery.

mod common;

use common::{assert_consistent, open, run_clients};
use pmtx_engine::{Database, DbOptions, EngineKind, ScanDirection};
use pmtx_pm::{Direct, PmOptions, Pool};
use pmtx_workloads::tpcc::{keys, rows, table, Tpcc, TRANSACTION_TYPES};
use pmtx_workloads::{count_rows, Workload, WorkloadOptions};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const ITEMS: u32 = 1000;
const CUSTOMERS: u32 = 60;

fn workload(warehouses: u32) -> Tpcc {
    Tpcc::new(&WorkloadOptions { warehouses, ..Default::default() }.tpcc_scale_for_tests(ITEMS, CUSTOMERS)).unwrap()
}

/// Every present row of a table in key order (hash tables cannot be
/// scanned, so this uses the engine's quiescent row dump).
fn all_rows(db: &Database, name: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let id = db.table_id(name).unwrap();
    let mut rows = Vec::new();
    db.for_each_row(id, |key, value| rows.push((key.to_vec(), value.to_vec()))).unwrap();
    rows.sort();
    rows
}

#[test]
fn population_has_the_spec_cardinalities_and_key_ranges() {
    let workload = workload(2);
    let scale = workload.scale();
    assert_eq!((scale.orders, scale.new_orders, scale.delivered()), (60, 18, 42));
    let db = open(EngineKind::Silo, &workload);
    let last_progress = AtomicU64::new(0);
    workload
        .load(&db, 2, &|done, total| {
            assert!(done <= total);
            last_progress.fetch_max(done, Ordering::Relaxed);
        })
        .unwrap();
    assert!(last_progress.load(Ordering::Relaxed) > 0);
    for (name, expected) in scale.initial_rows() {
        let count = count_rows(&db, name).unwrap();
        match expected {
            Some(expected) => assert_eq!(count, expected, "rows of {name}"),
            None => {
                let orders = 2 * 10 * CUSTOMERS as u64;
                assert!((5 * orders..=15 * orders).contains(&count), "{count} order lines");
            }
        }
    }

    // Items 1..=ITEMS; stock (w, 1..=ITEMS); ORIGINAL in about 10% of I_DATA.
    let items = all_rows(&db, "item");
    assert_eq!(items.first().unwrap().0, keys::item(1));
    assert_eq!(items.last().unwrap().0, keys::item(ITEMS));
    let original =
        items.iter().filter(|(_, v)| rows::Item::decode(v).unwrap().data.windows(8).any(|w| w == b"ORIGINAL")).count();
    assert!((50..=160).contains(&original), "{original} items with ORIGINAL");
    for (_, value) in &items {
        let item = rows::Item::decode(value).unwrap();
        assert!((100..=10_000).contains(&item.price) && (1..=10_000).contains(&item.im_id));
    }
    let stock = all_rows(&db, "stock");
    assert_eq!(stock.first().unwrap().0, keys::stock(1, 1));
    assert_eq!(stock.last().unwrap().0, keys::stock(2, ITEMS));
    assert!(stock.iter().all(|(_, v)| (10..=100).contains(&rows::Stock::decode(v).unwrap().quantity)));

    // Customers: the first 1000 (here all) have the last name of c - 1;
    // credit BC for about 10%.
    let customers = all_rows(&db, "customer");
    let mut bad_credit = 0;
    for (key, value) in &customers {
        let customer = rows::Customer::decode(value).unwrap();
        let c = u32::from_be_bytes(key[5..9].try_into().unwrap());
        assert!((1..=CUSTOMERS).contains(&c));
        let last = pmtx_workloads::gen::last_name(c - 1);
        assert_eq!(pmtx_workloads::gen::text(&customer.last), last.as_bytes());
        assert_eq!(customer.balance, -1000);
        bad_credit += (&customer.credit == b"BC") as usize;
    }
    assert!((40..=200).contains(&bad_credit), "{bad_credit} BC customers of {}", customers.len());

    // Orders: each district's O_C_ID is a permutation; carriers set exactly
    // for the delivered ones; new orders are the last 18 per district.
    let orders = all_rows(&db, "order");
    for w in 1..=2u32 {
        for d in 1..=10u8 {
            let mut customers_of_orders: Vec<u32> = orders
                .iter()
                .filter(|(k, _)| keys::district_of(k) == Some((w, d)))
                .map(|(k, v)| {
                    let order = rows::Order::decode(v).unwrap();
                    let o = keys::order_id_of(k).unwrap();
                    assert_eq!(order.carrier_id != 0, o <= scale.delivered(), "order {o}");
                    assert!((5..=15).contains(&order.ol_cnt));
                    order.c_id
                })
                .collect();
            customers_of_orders.sort_unstable();
            assert_eq!(customers_of_orders, (1..=CUSTOMERS).collect::<Vec<_>>());
        }
    }
    let new_orders = all_rows(&db, "new_order");
    assert!(new_orders.iter().all(|(k, _)| keys::order_id_of(k).unwrap() > scale.delivered()));
    let districts = all_rows(&db, "district");
    assert!(districts.iter().all(|(_, v)| rows::District::decode(v).unwrap().next_o_id == CUSTOMERS + 1));
    assert_consistent(&workload, &db, "after load");
}

#[test]
fn secondary_indexes_find_customers_by_name_and_their_last_order() {
    let workload = workload(1);
    let db = open(EngineKind::Silo, &workload);
    workload.load(&db, 1, &|_, _| {}).unwrap();
    let mut worker = db.worker(0).unwrap();
    let (by_name, last_order) = worker
        .run_read_only(|tx| {
            let prefix = keys::customer_name_prefix(1, 3, pmtx_workloads::gen::last_name(7).as_bytes());
            let mut upper = Vec::new();
            let by_name = tx.scan_secondary(
                table::CUSTOMER,
                table::CUSTOMER_BY_NAME,
                pmtx_engine::prefix_range(&prefix, &mut upper),
                ScanDirection::Forward,
                100,
            )?;
            let prefix = keys::order_customer_prefix(1, 3, 8);
            let last_order = tx.scan_secondary(
                table::ORDER,
                table::ORDER_BY_CUSTOMER,
                pmtx_engine::prefix_range(&prefix, &mut upper),
                ScanDirection::Reverse,
                1,
            )?;
            Ok((by_name, last_order))
        })
        .unwrap()
        .committed()
        .unwrap();
    assert_eq!(by_name.len(), 1);
    assert_eq!(by_name[0].0, keys::customer(1, 3, 8));
    assert_eq!(last_order.len(), 1);
    assert_eq!(rows::Order::decode(&last_order[0].1).unwrap().c_id, 8);
}

fn run_and_check(engine: EngineKind, warehouses: u32, threads: usize, txns: usize) {
    let workload = workload(warehouses);
    let db = open(engine, &workload);
    workload.load(&db, 2, &|_, _| {}).unwrap();
    assert_consistent(&workload, &db, "after load");
    let summaries = run_clients(&db, &workload, threads, txns, 11);
    let mut per_type = [0usize; 5];
    for summary in &summaries {
        per_type[summary.type_index] += 1;
    }
    assert!(per_type.iter().all(|&n| n > 0), "every type ran: {per_type:?}");
    let rolled_back = summaries.iter().filter(|s| !s.committed).count();
    assert!(rolled_back > 0 && rolled_back < per_type[0] / 10 + 5, "{rolled_back} rollbacks");
    assert!(summaries.iter().filter(|s| !s.committed).all(|s| TRANSACTION_TYPES[s.type_index] == "new_order"));
    assert_consistent(&workload, &db, "after a run");
    // Orders grew by the committed NewOrders.
    let committed_new_orders = summaries.iter().filter(|s| s.type_index == 0 && s.committed).count() as u64;
    let orders = warehouses as u64 * 10 * CUSTOMERS as u64 + committed_new_orders;
    assert_eq!(count_rows(&db, "order").unwrap(), orders);
}

#[test]
fn consistent_after_a_concurrent_run_on_silo() {
    run_and_check(EngineKind::Silo, 2, 2, 500);
}

#[test]
fn consistent_after_a_concurrent_run_on_group_commit() {
    run_and_check(EngineKind::GroupCommit, 2, 2, 500);
}

#[test]
fn consistent_after_a_concurrent_run_on_dbxn() {
    run_and_check(EngineKind::Dbxn, 2, 2, 400);
}

#[test]
fn consistent_after_a_concurrent_run_on_zen() {
    // Zen keeps rows in its PM heap (its `Table` records are empty): the
    // check's cardinalities come from `Database::for_each_row`.
    run_and_check(EngineKind::Zen, 2, 2, 400);
}

#[test]
fn consistent_after_a_contended_run_on_silo() {
    run_and_check(EngineKind::Silo, 1, 4, 400);
}

#[test]
fn consistent_after_a_contended_run_on_group_commit() {
    run_and_check(EngineKind::GroupCommit, 1, 4, 400);
}

#[test]
fn consistent_after_crash_recovery_on_group_commit() {
    let workload = workload(1);
    let mut options = DbOptions::in_memory(EngineKind::GroupCommit, workload.tables());
    options.workers = 2;
    let pool = Arc::new(Pool::<Direct>::create_in_memory(64 << 20, options.chunk_size, &PmOptions::default()).unwrap());
    let db = Arc::new(Database::open_on_pool(options.clone(), Arc::clone(&pool)).unwrap());
    workload.load(&db, 2, &|_, _| {}).unwrap();
    run_clients(&db, &workload, 2, 300, 5);
    // Crash: drop without close.
    drop(Arc::into_inner(db).unwrap());
    let db = Arc::new(Database::open_on_pool(options, Arc::clone(&pool)).unwrap());
    // A fresh workload value (as after a restart).
    let workload = self::workload(1);
    assert_consistent(&workload, &db, "after recovery");
    run_clients(&db, &workload, 2, 100, 6);
    assert_consistent(&workload, &db, "after running on the recovered database");
}

#[test]
fn check_detects_violations() {
    let workload = workload(1);
    let db = open(EngineKind::Silo, &workload);
    workload.load(&db, 1, &|_, _| {}).unwrap();
    let mut worker = db.worker(1).unwrap();
    worker
        .run(|tx| {
            let key = keys::warehouse(1);
            let mut warehouse = rows::Warehouse::decode(&tx.get(table::WAREHOUSE, &key)?.unwrap())?;
            warehouse.ytd += 1;
            tx.update(table::WAREHOUSE, &key, &warehouse.encode())?;
            assert!(tx.delete(table::ORDER_LINE, &keys::order_line(1, 2, 5, 1))?);
            assert!(tx.delete(table::NEW_ORDER, &keys::new_order(1, 4, CUSTOMERS - 5))?);
            Ok(())
        })
        .unwrap();
    drop(worker);
    let report = workload.check(&db).unwrap();
    assert!(!report.passed());
    let failed: Vec<&str> = report.failures().map(|(name, _, _)| name.as_str()).collect();
    for condition in ["condition 1", "condition 3", "condition 4", "condition 5", "condition 6"] {
        assert!(failed.iter().any(|name| name.starts_with(condition)), "{condition} must fail:\n{report}");
    }
    assert!(!failed.iter().any(|name| name.starts_with("condition 2")), "{report}");
}

#[test]
fn load_rejects_a_database_with_other_tables() {
    let workload = workload(1);
    let mut tables = workload.tables();
    tables.swap(0, 1);
    let db = Arc::new(Database::open(DbOptions::in_memory(EngineKind::Silo, tables)).unwrap());
    let error = workload.load(&db, 1, &|_, _| {}).unwrap_err();
    assert!(matches!(error, pmtx_workloads::WorkloadError::InvalidOption(_)), "{error}");
}

#[test]
fn mix_parser_accepts_subsets_and_rejects_bad_input() {
    use pmtx_workloads::tpcc::{TpccMix, MIX};
    assert_eq!(TpccMix::parse("new_order=50,payment=50").unwrap(), TpccMix([50, 50, 0, 0, 0]));
    assert_eq!(TpccMix::parse(" Payment = 3 ").unwrap(), TpccMix([0, 3, 0, 0, 0]));
    let standard = "new_order=45,payment=43,order_status=4,delivery=4,stock_level=4";
    assert_eq!(TpccMix::parse(standard).unwrap(), TpccMix(MIX));
    assert!(TpccMix(MIX).is_standard() && TpccMix::default().is_standard());
    assert!(TpccMix([90, 86, 8, 8, 8]).is_standard(), "same proportions");
    assert!(!TpccMix([50, 50, 0, 0, 0]).is_standard());
    assert_eq!(TpccMix([50, 50, 0, 0, 0]).to_string(), "new_order=50,payment=50");
    for (bad, needle) in [
        ("", "empty"),
        ("new_order", "not TYPE=WEIGHT"),
        ("neworder=5", "unknown transaction type"),
        ("new_order=0", "from 1 to"),
        ("new_order=-5", "from 1 to"),
        ("new_order=1.5", "from 1 to"),
        ("new_order=", "from 1 to"),
        ("new_order=99999999999", "from 1 to"),
        ("new_order=5,payment=5,new_order=1", "twice"),
        ("new_order=5,", "not TYPE=WEIGHT"),
    ] {
        let error = TpccMix::parse(bad).unwrap_err().to_string();
        assert!(error.contains(needle), "{bad:?}: {error}");
        assert!(error.contains("stock_level"), "{bad:?} lists the valid types: {error}");
    }
    let options = WorkloadOptions { tpcc_mix: [0; 5], ..Default::default() };
    assert!(Tpcc::new(&options).is_err(), "an all-zero mix is refused");
}

#[test]
fn a_new_order_payment_mix_runs_only_those_and_stays_consistent() {
    let options =
        WorkloadOptions { tpcc_mix: [50, 50, 0, 0, 0], ..Default::default() }.tpcc_scale_for_tests(ITEMS, CUSTOMERS);
    let workload = Tpcc::new(&options).unwrap();
    assert!(!workload.mix().is_standard());
    let db = open(EngineKind::Silo, &workload);
    workload.load(&db, 2, &|_, _| {}).unwrap();
    let summaries = run_clients(&db, &workload, 2, 300, 4);
    let mut per_type = [0usize; 5];
    for summary in &summaries {
        per_type[summary.type_index] += 1;
    }
    assert!(per_type[0] > 0 && per_type[1] > 0 && per_type[2..].iter().all(|&n| n == 0), "{per_type:?}");
    assert_consistent(&workload, &db, "after a NewOrder + Payment run");
}

/// The database size `--nvm-dram-ratio` divides: keys plus rows of every
/// table, order lines at their expected 10 per order, within a few percent
/// of what the load writes.
#[test]
fn loaded_bytes_is_the_size_of_the_loaded_tuples() {
    let workload = workload(2);
    let db = open(EngineKind::Silo, &workload);
    workload.load(&db, 2, &|_, _| {}).unwrap();
    let mut actual = 0u64;
    for name in table::NAMES {
        for (key, value) in all_rows(&db, name) {
            actual += (key.len() + value.len()) as u64;
        }
    }
    let stated = workload.loaded_bytes().unwrap();
    assert_eq!(stated, workload.scale().loaded_bytes());
    let error = (stated as f64 - actual as f64).abs() / actual as f64;
    assert!(error < 0.03, "stated {stated}, loaded {actual}");
}
