//! YCSB's key distributions: the zipfian generator of Gray et al. ("Quickly
//! generating billion-record synthetic databases", SIGMOD 1994) as in YCSB's
//! `ZipfianGenerator`, its scrambled form (`ScrambledZipfianGenerator`:
//! FNV-hash of the rank modulo the item count) and uniform choice.

use rand::Rng;

/// `sum_{i=1}^{n} 1 / i^theta`.
pub fn zeta(n: u64, theta: f64) -> f64 {
    zeta_range(0, n, theta, 0.0)
}

/// `initial + sum_{i=from+1}^{to} 1 / i^theta` (incremental zeta).
pub fn zeta_range(from: u64, to: u64, theta: f64, initial: f64) -> f64 {
    let mut sum = initial;
    for i in from..to {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

/// Draws ranks `0..items` with `P(rank i) ~ 1 / (i + 1)^theta` (rank 0 is
/// the most popular). `theta == 0` is uniform.
#[derive(Clone, Debug)]
pub struct Zipfian {
    items: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    zeta2: f64,
    eta: f64,
    half_pow_theta: f64,
}

impl Zipfian {
    /// A generator over `items` (>= 1) ranks with constant `theta` (>= 0,
    /// != 1). Computing zeta takes O(items).
    pub fn new(items: u64, theta: f64) -> Self {
        assert!(items >= 1, "a zipfian generator needs at least one item");
        assert!(theta >= 0.0 && theta.is_finite() && theta != 1.0, "zipfian theta must be >= 0 and != 1");
        let (zetan, zeta2) = if theta == 0.0 { (items as f64, 2.0) } else { (zeta(items, theta), zeta(2, theta)) };
        let mut generator = Self {
            items,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            zeta2,
            eta: 0.0,
            half_pow_theta: 0.5f64.powf(theta),
        };
        generator.eta = generator.eta_for();
        generator
    }

    fn eta_for(&self) -> f64 {
        if self.items < 2 {
            return 1.0;
        }
        (1.0 - (2.0 / self.items as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan)
    }

    /// Number of ranks.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// The constant.
    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// Whether this is the uniform distribution.
    pub fn is_uniform(&self) -> bool {
        self.theta == 0.0
    }

    /// Changes the item count, updating zeta incrementally when it grows
    /// (as YCSB does for workloads with inserts).
    pub fn resize(&mut self, items: u64) {
        assert!(items >= 1, "a zipfian generator needs at least one item");
        if items == self.items {
            return;
        }
        if self.theta == 0.0 {
            self.zetan = items as f64;
        } else if items > self.items {
            self.zetan = zeta_range(self.items, items, self.theta, self.zetan);
        } else {
            self.zetan = zeta(items, self.theta);
        }
        self.items = items;
        self.eta = self.eta_for();
    }

    /// The exact probability of `rank` under the zipf law (the generator's
    /// ranks 0 and 1 follow it exactly; larger ranks approximately).
    pub fn probability(&self, rank: u64) -> f64 {
        1.0 / ((rank + 1) as f64).powf(self.theta) / self.zetan
    }

    /// Draws a rank in `0..items`.
    pub fn next(&self, rng: &mut impl Rng) -> u64 {
        if self.theta == 0.0 {
            return rng.gen_range(0..self.items);
        }
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + self.half_pow_theta {
            return 1.min(self.items - 1);
        }
        let rank = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        rank.min(self.items - 1)
    }

    /// Draws a rank and scrambles it over `0..items` with the FNV hash (the
    /// popular keys are spread over the key space); uniform stays uniform.
    pub fn next_scrambled(&self, rng: &mut impl Rng) -> u64 {
        if self.theta == 0.0 {
            return rng.gen_range(0..self.items);
        }
        fnv_hash64(self.next(rng)) % self.items
    }
}

/// YCSB's 64-bit FNV-1a hash of the eight bytes of `value` (low first),
/// made non-negative as YCSB's `Math.abs` does.
pub fn fnv_hash64(mut value: u64) -> u64 {
    const OFFSET_BASIS: u64 = 0xCBF2_9CE4_8422_2325;
    const PRIME: u64 = 1_099_511_628_211;
    let mut hash = OFFSET_BASIS;
    for _ in 0..8 {
        hash ^= value & 0xFF;
        hash = hash.wrapping_mul(PRIME);
        value >>= 8;
    }
    (hash as i64).unsigned_abs()
}
