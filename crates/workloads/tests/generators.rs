//! Generators: transaction mixes, the zipfian shape, NURand, TPC-C
//! constants and names, option parsing.

use pmtx_workloads::gen::{a_string, last_name, nurand, rng, Mix};
use pmtx_workloads::tpcc::{Tpcc, TpccConstants};
use pmtx_workloads::zipf::{fnv_hash64, zeta, Zipfian};
use pmtx_workloads::{by_name, smallbank, tpcc, WorkloadError, WorkloadOptions, YcsbVariant};

const DRAWS: usize = 20_000;

/// Each type's share is within `tolerance` (absolute) of its weight.
fn assert_mix(counts: &[usize], weights: &[u32], tolerance: f64) {
    let total: usize = counts.iter().sum();
    let weight_total: u32 = weights.iter().sum();
    for (index, (&count, &weight)) in counts.iter().zip(weights).enumerate() {
        let share = count as f64 / total as f64;
        let expected = weight as f64 / weight_total as f64;
        assert!((share - expected).abs() < tolerance, "type {index}: share {share:.4}, expected {expected:.4}");
    }
}

#[test]
fn mix_draws_match_weights() {
    let mix = Mix::new(&[45, 43, 4, 4, 4]);
    let mut rng = rng(1);
    let mut counts = [0usize; 5];
    for _ in 0..DRAWS {
        counts[mix.pick(&mut rng)] += 1;
    }
    assert_mix(&counts, &[45, 43, 4, 4, 4], 0.015);
}

#[test]
fn tpcc_and_smallbank_clients_draw_the_standard_mix() {
    let options = WorkloadOptions::default().tpcc_scale_for_tests(100, 30);
    let workload = Tpcc::new(&options).unwrap();
    let mut client = workload.tpcc_client(0, 1, 7);
    let mut counts = [0usize; 5];
    for _ in 0..DRAWS {
        counts[client.next_type()] += 1;
    }
    assert_mix(&counts, &tpcc::MIX, 0.015);

    let workload = smallbank::Smallbank::new(&WorkloadOptions { accounts: 1000, ..Default::default() }).unwrap();
    let mut client = workload.smallbank_client(3, 7);
    let mut counts = [0usize; 6];
    for _ in 0..DRAWS {
        counts[client.next_type()] += 1;
    }
    assert_mix(&counts, &smallbank::MIX, 0.015);
}

#[test]
fn zipf_rank_frequencies_follow_theta() {
    let items = 1000;
    let zipf = Zipfian::new(items, 0.99);
    let mut rng = rng(2);
    let mut counts = vec![0usize; items as usize];
    let draws = 200_000;
    for _ in 0..draws {
        let rank = zipf.next(&mut rng);
        assert!(rank < items);
        counts[rank as usize] += 1;
    }
    // Ranks 0 and 1 follow the law exactly in Gray's algorithm.
    for rank in 0..2 {
        let expected = zipf.probability(rank);
        let observed = counts[rank as usize] as f64 / draws as f64;
        assert!((observed - expected).abs() < 0.1 * expected, "rank {rank}: {observed:.4} vs {expected:.4}");
    }
    assert!((zipf.probability(0) - 1.0 / zeta(items, 0.99)).abs() < 1e-12);
    // Skewed: the top 10% of ranks take most draws; frequencies decrease.
    let top: usize = counts[..100].iter().sum();
    assert!(top as f64 / draws as f64 > 0.6, "top 10% drew {top}");
    assert!(counts[0] > counts[1] && counts[1] > counts[10] && counts[10] > counts[500]);

    // Scrambled: the most popular key has rank 0's frequency (or more, with collisions).
    let mut scrambled = vec![0usize; items as usize];
    for _ in 0..draws {
        scrambled[zipf.next_scrambled(&mut rng) as usize] += 1;
    }
    let hottest = scrambled.iter().enumerate().max_by_key(|(_, c)| **c).unwrap();
    assert_eq!(hottest.0 as u64, fnv_hash64(0) % items);
    assert!(*hottest.1 as f64 / draws as f64 >= 0.9 * zipf.probability(0));
}

#[test]
fn zipf_theta_zero_is_uniform_and_resize_is_incremental() {
    let items = 100;
    let zipf = Zipfian::new(items, 0.0);
    assert!(zipf.is_uniform());
    let mut rng = rng(3);
    let mut counts = vec![0usize; items as usize];
    let draws = 100_000;
    for _ in 0..draws {
        counts[zipf.next_scrambled(&mut rng) as usize] += 1;
    }
    let expected = draws as f64 / items as f64;
    for (key, &count) in counts.iter().enumerate() {
        assert!((count as f64 - expected).abs() < 0.2 * expected, "key {key}: {count} draws, expected {expected}");
    }
    let mut grown = Zipfian::new(500, 0.8);
    grown.resize(1500);
    let fresh = Zipfian::new(1500, 0.8);
    assert!((grown.probability(0) - fresh.probability(0)).abs() < 1e-12);
    grown.resize(10);
    assert!((grown.probability(0) - Zipfian::new(10, 0.8).probability(0)).abs() < 1e-12);
}

#[test]
fn nurand_stays_in_range_and_is_skewed() {
    let mut rng = rng(4);
    for (a, x, y) in [(255u64, 0u64, 999u64), (1023, 1, 3000), (8191, 1, 100_000), (1023, 1, 30)] {
        let c = a / 3;
        let mut seen_low = false;
        let mut seen_high = false;
        for _ in 0..20_000 {
            let value = nurand(&mut rng, a, x, y, c);
            assert!((x..=y).contains(&value), "NURand({a}, {x}, {y}) = {value}");
            seen_low |= value < x + (y - x) / 4;
            seen_high |= value > y - (y - x) / 4;
        }
        assert!(seen_low && seen_high, "NURand({a}, {x}, {y}) covers its range");
    }
    // Non-uniform: with A = 255 over 0..=999, some values are far more
    // frequent than the uniform 1/1000.
    let mut counts = vec![0usize; 1000];
    for _ in 0..100_000 {
        counts[nurand(&mut rng, 255, 0, 999, 0) as usize] += 1;
    }
    assert!(*counts.iter().max().unwrap() > 3 * 100, "NURand is skewed");
}

#[test]
fn tpcc_constants_and_names_follow_the_spec() {
    for seed in 0..200 {
        let constants = TpccConstants::from_seed(seed);
        assert!(constants.c_last_load <= 255 && constants.c_last_run <= 255);
        assert!(constants.c_id <= 1023 && constants.ol_i_id <= 8191);
        let delta = constants.c_last_load.abs_diff(constants.c_last_run);
        assert!((65..=119).contains(&delta) && delta != 96 && delta != 112, "seed {seed}: delta {delta}");
    }
    assert!(!TpccConstants::delta_is_valid(10, 106));
    assert_eq!(last_name(0), "BARBARBAR");
    assert_eq!(last_name(371), "PRICALLYOUGHT");
    assert_eq!(last_name(999), "EINGEINGEING");
    let mut rng = rng(5);
    for _ in 0..1000 {
        let s = a_string(&mut rng, 8, 16);
        assert!((8..=16).contains(&s.len()) && s.iter().all(u8::is_ascii_alphanumeric));
    }
}

#[test]
fn options_are_validated_and_variants_parse() {
    for (text, variant) in [
        ("a", YcsbVariant::A),
        ("F", YcsbVariant::F),
        ("RO", YcsbVariant::ReadOnly),
        ("rh", YcsbVariant::ReadHeavy),
        ("ba", YcsbVariant::Balanced),
        ("wh", YcsbVariant::WriteHeavy),
        ("srq", YcsbVariant::ShortRangeQuery),
        ("lrq", YcsbVariant::LongRangeQuery),
        ("Sru", YcsbVariant::ShortRangeUpdate),
        ("lru", YcsbVariant::LongRangeUpdate),
    ] {
        assert_eq!(text.parse::<YcsbVariant>().unwrap(), variant);
        assert_eq!(YcsbVariant::parse(variant.name()).unwrap(), variant);
    }
    let error = "zz".parse::<YcsbVariant>().unwrap_err();
    assert!(matches!(error, WorkloadError::InvalidOption(_)));
    assert!(error.to_string().contains("A, B, C, D, E, F, ro, rh, ba, wh, srq, lrq, sru, lru"), "{error}");

    let defaults = WorkloadOptions::default();
    for name in ["tpcc", "SMALLBANK", "ycsb", "Queue"] {
        let options = WorkloadOptions { records: 1000, ..defaults.clone() };
        assert_eq!(by_name(name, &options).unwrap().name(), name.to_lowercase());
    }
    assert!(matches!(by_name("tpch", &defaults), Err(WorkloadError::InvalidOption(_))));
    let bad = [
        WorkloadOptions { warehouses: 0, ..defaults.clone() },
        WorkloadOptions { accounts: 1, ..defaults.clone() },
        WorkloadOptions { hotspot: Some(0), ..defaults.clone() },
        WorkloadOptions { hotspot_probability: 1.5, ..defaults.clone() },
        WorkloadOptions { theta: 1.0, ..defaults.clone() },
        WorkloadOptions { ops_per_txn: 0, ..defaults.clone() },
        WorkloadOptions { fields: 0, ..defaults.clone() },
    ];
    for options in bad {
        let any_error = ["tpcc", "smallbank", "ycsb"].iter().any(|name| by_name(name, &options).is_err());
        assert!(any_error, "{options:?} must be rejected");
    }
}
