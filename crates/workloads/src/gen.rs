//! Random generators shared by the workloads: seeds, transaction mixes, TPC-C
//! NURand and strings.

use rand::{Rng, RngCore, SeedableRng};

/// The random number generator of every workload.
pub type WorkloadRng = rand_chacha::ChaCha8Rng;

/// A generator seeded with `seed`.
pub fn rng(seed: u64) -> WorkloadRng {
    WorkloadRng::seed_from_u64(seed)
}

/// SplitMix64 finalizer: a well-mixed 64-bit function of `x`.
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The seed of child `index` of `seed` (per worker, per load task).
pub fn child_seed(seed: u64, index: u64) -> u64 {
    mix64(seed ^ mix64(index.wrapping_add(0xA076_1D64_78BD_642F)))
}

/// A weighted choice among transaction types.
#[derive(Clone, Debug)]
pub struct Mix {
    cumulative: Vec<u32>,
}

impl Mix {
    /// A mix with these weights (any positive total).
    ///
    /// # Panics
    /// If the weights sum to zero.
    pub fn new(weights: &[u32]) -> Self {
        let mut total = 0u32;
        let cumulative = weights
            .iter()
            .map(|weight| {
                total += weight;
                total
            })
            .collect::<Vec<_>>();
        assert!(total > 0, "a transaction mix needs a positive total weight");
        Self { cumulative }
    }

    /// Sum of the weights.
    pub fn total(&self) -> u32 {
        *self.cumulative.last().expect("non-empty")
    }

    /// Draws a type index.
    pub fn pick(&self, rng: &mut impl Rng) -> usize {
        let draw = rng.gen_range(0..self.total());
        self.cumulative.iter().position(|&bound| draw < bound).expect("draw below total")
    }
}

/// Parses a transaction mix written `TYPE=WEIGHT,...` (e.g.
/// `new_order=50,payment=50`) over the type names `names`: a non-empty
/// list of distinct names (case-insensitive), each with an integer weight
/// from 1 to `max_weight`; types not listed get weight 0. The error is the
/// bare reason, for the caller to wrap with what it was parsing.
pub fn parse_weights(text: &str, names: &[&str], max_weight: u32) -> Result<Vec<u32>, String> {
    let mut weights = vec![0u32; names.len()];
    let mut given = vec![false; names.len()];
    if text.trim().is_empty() {
        return Err("it is empty".into());
    }
    for entry in text.split(',') {
        let Some((name, weight)) = entry.split_once('=') else {
            return Err(format!("{:?} is not TYPE=WEIGHT", entry.trim()));
        };
        let name = name.trim();
        let Some(position) = names.iter().position(|known| known.eq_ignore_ascii_case(name)) else {
            return Err(format!("unknown transaction type {name:?}"));
        };
        if given[position] {
            return Err(format!("{} is given twice", names[position]));
        }
        given[position] = true;
        weights[position] = match weight.trim().parse::<u32>() {
            Ok(weight) if (1..=max_weight).contains(&weight) => weight,
            _ => {
                return Err(format!(
                    "the weight of {} must be an integer from 1 to {max_weight}, not {:?}",
                    names[position],
                    weight.trim()
                ))
            }
        };
    }
    Ok(weights)
}

/// Writes the types of positive weight as `TYPE=WEIGHT,...` (what
/// [`parse_weights`] reads).
pub fn format_weights(weights: &[u32], names: &[&str]) -> String {
    names
        .iter()
        .zip(weights)
        .filter(|(_, weight)| **weight > 0)
        .map(|(name, weight)| format!("{name}={weight}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// TPC-C NURand(A, x, y) with run-time constant `c` (clause 2.1.6):
/// `(((random(0, A) | random(x, y)) + C) % (y - x + 1)) + x`.
pub fn nurand(rng: &mut impl Rng, a: u64, x: u64, y: u64, c: u64) -> u64 {
    debug_assert!(x <= y);
    (((rng.gen_range(0..=a) | rng.gen_range(x..=y)) + c) % (y - x + 1)) + x
}

const ALPHANUMERIC: &[u8; 62] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// Fills `out` with random alphanumeric characters.
pub fn fill_alphanumeric(rng: &mut impl RngCore, out: &mut [u8]) {
    let mut bits = 0u64;
    let mut left = 0;
    for byte in out {
        if left == 0 {
            bits = rng.next_u64();
            left = 8;
        }
        // 8 bits -> 0..62 by multiply-shift (tiny bias, irrelevant here).
        *byte = ALPHANUMERIC[(((bits & 0xFF) * 62) >> 8) as usize];
        bits >>= 8;
        left -= 1;
    }
}

/// TPC-C a-string: random alphanumeric, length uniform in `[min, max]`.
pub fn a_string(rng: &mut impl Rng, min: usize, max: usize) -> Vec<u8> {
    let mut out = vec![0u8; rng.gen_range(min..=max)];
    fill_alphanumeric(rng, &mut out);
    out
}

/// TPC-C n-string: random digits, length uniform in `[min, max]`.
pub fn n_string(rng: &mut impl Rng, min: usize, max: usize) -> Vec<u8> {
    let len = rng.gen_range(min..=max);
    (0..len).map(|_| b'0' + rng.gen_range(0..10u8)).collect()
}

/// The TPC-C last-name syllables (clause 4.3.2.3).
pub const LAST_NAME_SYLLABLES: [&str; 10] =
    ["BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING"];

/// The TPC-C last name of `number` (0..=999): its three digits' syllables.
pub fn last_name(number: u32) -> String {
    debug_assert!(number < 1000);
    let digits = [number / 100 % 10, number / 10 % 10, number % 10];
    digits.iter().map(|&d| LAST_NAME_SYLLABLES[d as usize]).collect()
}

/// The TPC-C last name of `number` (0..=999) as a zero-padded 16-byte
/// field, built on the stack (a name has at most 15 characters).
pub fn last_name_fixed(number: u32) -> [u8; 16] {
    debug_assert!(number < 1000);
    let mut out = [0u8; 16];
    let mut at = 0;
    for digit in [number / 100 % 10, number / 10 % 10, number % 10] {
        let syllable = LAST_NAME_SYLLABLES[digit as usize].as_bytes();
        out[at..at + syllable.len()].copy_from_slice(syllable);
        at += syllable.len();
    }
    out
}

/// Copies `text` into a zero-padded fixed-width field (cut if longer).
pub fn fixed<const N: usize>(text: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let take = text.len().min(N);
    out[..take].copy_from_slice(&text[..take]);
    out
}

/// The text of a zero-padded fixed-width field.
pub fn text(field: &[u8]) -> &[u8] {
    let end = field.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
    &field[..end]
}

/// Milliseconds since the Unix epoch (dates of TPC-C rows).
pub fn now_millis() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
