//! Crash-image generation: fixed images, exhaustive enumeration, seeded random
//! choices, deduplication and 8-byte tearing.

use pmtx_pm::sim::{CrashImage, ImageBudget};
use pmtx_pm::{Mapping, PmBackend, PmOptions, Sim};
use std::collections::HashSet;

fn sim() -> Sim {
    Sim::from_mapping(Mapping::anonymous(64 << 10).unwrap(), &PmOptions::default()).unwrap()
}

fn word(bytes: &[u8], offset: u64) -> u64 {
    u64::from_ne_bytes(bytes[offset as usize..offset as usize + 8].try_into().unwrap())
}

/// Line 0x40 gets 2 pending stores, line 0x80 gets 3.
fn two_lines() -> Sim {
    let sim = sim();
    sim.store_u64(0x40, 1);
    sim.store_u64(0x48, 2);
    sim.store_u64(0x80, 3);
    sim.store_u64(0x80, 4);
    sim.store_u64(0x88, 5);
    sim
}

#[test]
fn exhaustive_enumeration_yields_every_prefix_combination_once() {
    let state = two_lines().crash_state_now("test");
    assert_eq!(state.dirty_lines().len(), 2);
    assert_eq!(state.pending_stores(), 5);
    assert_eq!(state.combinations(), Some(12));
    let images: Vec<CrashImage> = state.images(1, ImageBudget::default()).collect();
    assert_eq!(images.len(), 12);
    let prefixes: HashSet<Vec<usize>> = images.iter().map(|i| i.prefixes.clone()).collect();
    assert_eq!(prefixes.len(), 12);
    let bytes: HashSet<&[u8]> = images.iter().map(|i| i.bytes.as_slice()).collect();
    assert_eq!(bytes.len(), 12);
    for image in &images {
        assert_eq!(image.bytes, state.image_with_prefixes(&image.prefixes));
    }
    // The fixed images come first: nothing, everything.
    assert_eq!(images[0].prefixes, vec![0, 0]);
    assert!(images[0].description.contains("nothing pending"));
    assert_eq!(images[1].prefixes, vec![2, 3]);
}

#[test]
fn without_enumeration_the_fixed_images_remain() {
    let sim = two_lines();
    sim.flush(0x40, 8); // covers line 0x40's two stores
    let state = sim.crash_state_now("test");
    assert_eq!(state.dirty_lines()[0].flushed, 2);
    assert_eq!(state.dirty_lines()[1].flushed, 0);
    let budget = ImageBudget { random_subsets: 0, random_prefixes: 0, exhaustive_limit: 11, all_but_lines: 64 };
    let prefixes: Vec<Vec<usize>> = state.images(1, budget).map(|i| i.prefixes).collect();
    // nothing, everything, flushed-not-fenced, all but 0x40, all but 0x80.
    assert_eq!(prefixes, vec![vec![0, 0], vec![2, 3], vec![2, 0], vec![0, 3]]);
    let descriptions: Vec<String> = state.images(1, budget).map(|i| i.description).collect();
    assert!(descriptions[2].contains("flushed but not fenced"));
    assert!(descriptions[3].contains("all but line 0x40"));
}

#[test]
fn all_but_line_images_are_capped() {
    let sim = sim();
    for line in 0..300u64 {
        sim.store_u64(line * 64, line + 1);
    }
    let state = sim.crash_state_now("many");
    let budget = ImageBudget { random_subsets: 0, random_prefixes: 0, exhaustive_limit: 4096, all_but_lines: 16 };
    // nothing, everything, 16 first + 16 random "all but" lines.
    assert_eq!(state.images(5, budget).count(), 2 + 32);
}

fn sequence(seed: u64) -> Vec<(Vec<usize>, String)> {
    let sim = sim();
    for line in 0..20u64 {
        for k in 0..3u64 {
            sim.store_u64(line * 64 + 8 * k, line * 10 + k + 1);
        }
    }
    let state = sim.crash_state_now("random");
    assert!(state.combinations().unwrap() > 4096);
    state.images(seed, ImageBudget::default()).map(|i| (i.prefixes, i.description)).collect()
}

#[test]
fn same_seed_same_images_other_seed_differs() {
    let first = sequence(11);
    // 3 fixed (flushed = nothing, deduplicated) + 20 "all but" + up to 400 random.
    assert!(first.len() > 300, "{}", first.len());
    assert_eq!(first, sequence(11));
    let other = sequence(12);
    assert_ne!(first.iter().map(|(p, _)| p).collect::<Vec<_>>(), other.iter().map(|(p, _)| p).collect::<Vec<_>>());
    assert!(first.last().unwrap().1.contains("seed 0xb"), "{}", first.last().unwrap().1);
    let distinct: HashSet<&Vec<usize>> = first.iter().map(|(p, _)| p).collect();
    assert_eq!(distinct.len(), first.len(), "deduplicated");
}

#[test]
fn a_wide_store_tears_at_eight_bytes() {
    let sim = sim();
    let value: Vec<u8> = (1..=16).collect();
    sim.write(0x108, &value); // words 0x108 and 0x110 of one line
    let state = sim.crash_state_now("tear");
    assert_eq!(state.dirty_lines().len(), 1);
    assert_eq!(state.dirty_lines()[0].stores.len(), 2);
    let images: Vec<CrashImage> = state.images(1, ImageBudget::default()).collect();
    assert_eq!(images.len(), 3);
    let torn = images.iter().find(|i| i.prefixes == vec![1]).expect("first word only");
    assert_eq!(&torn.bytes[0x108..0x110], &value[..8]);
    assert_eq!(word(&torn.bytes, 0x110), 0);

    // Across a line boundary the second word may persist without the first.
    let sim = self::sim();
    sim.write(0x1F8, &value);
    let state = sim.crash_state_now("tear across lines");
    assert_eq!(state.dirty_lines().len(), 2);
    let images: Vec<CrashImage> = state.images(1, ImageBudget::default()).collect();
    assert_eq!(images.len(), 4);
    assert!(images.iter().any(|i| word(&i.bytes, 0x1F8) == 0 && i.bytes[0x200..0x208] == value[8..]));
}

#[test]
fn sub_word_stores_stay_inside_their_word() {
    let sim = sim();
    sim.write(0x3, &[9u8; 10]); // bytes 3..13: pieces 3..8 and 8..13
    let state = sim.crash_state_now("sub-word");
    let stores = &state.dirty_lines()[0].stores;
    let pieces: Vec<(u64, u8)> = stores.iter().map(|s| (s.offset, s.len)).collect();
    assert_eq!(pieces, vec![(3, 5), (8, 5)]);
}
