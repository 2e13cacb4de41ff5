//! The seeded streams every random choice comes from: splitmix64 over
//! an FNV-1a hash of the cell's name, the same on every machine; the
//! seed of a retry, and a seed for a run that gave none.

/// The seed of try `attempt` (2 on) of a run seeded `seed`: far from the
/// run's seed and from every other try's, and the same for the same two.
pub fn retry_seed(seed: u64, attempt: u32) -> u64 {
    let mut rng = SplitMix64::new(seed ^ u64::from(attempt).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    rng.next_u64()
}

/// A seed for runs that did not pass `--seed`: the clock mixed with the process id.
pub fn random_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    SplitMix64::new(nanos ^ (u64::from(std::process::id()) << 32)).next_u64()
}

/// FNV-1a, 64-bit: a fixed hash, identical on every machine (unlike std's `RandomState`).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(PRIME))
}

/// splitmix64 (Steele, Lea, Flood 2014): tiny, fast, and fully specified.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A stream starting from `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The stream of one cell: the run seed, mixed once so that small
    /// seeds (1, 2, 3) start far apart, combined with the cell name's hash.
    pub fn for_cell(seed: u64, cell: &str) -> Self {
        SplitMix64::new(SplitMix64::new(seed).next_u64() ^ fnv1a64(cell.as_bytes()))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0), by multiply-high: no modulo bias worth the name.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}
