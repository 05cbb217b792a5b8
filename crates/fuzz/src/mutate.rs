//! The mutation engine: each input is a seed (a real file, or one built from real data)
//! changed by one to four stacked mutations, chosen to reach the corners parsers get
//! wrong: flipped bits, lengths and counts set to 0, -1, 2^31 or 2^40, truncations,
//! duplicated and deleted runs, splices of two seeds, and for text formats (JSON, command
//! lines) tokens swapped for numbers and keywords from a dictionary.
//!
//! ```
//! use spore_fuzz::mutate::{Mutator, Rng};
//! let seeds = vec![b"\x00\x00\x08\x01\x00\x00\x00\x02\x07\x08".to_vec()];
//! let mut m = Mutator::new(Rng::new(1), &[]);
//! let a = m.mutate(&seeds);
//! let b = Mutator::new(Rng::new(1), &[]).mutate(&seeds);
//! assert_eq!(a, b, "the same seed gives the same inputs");
//! ```

/// xorshift64*: small, fast and reproducible from one `u64`.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // Zero is xorshift's fixed point; SplitMix's constant moves every seed off it.
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

/// Integers that sit on the edges parsers check (or forget to): zero, one, sign bits,
/// the largest values of each width, and sizes that overflow when multiplied.
const INTERESTING: &[u64] = &[
    0,
    1,
    2,
    3,
    7,
    8,
    16,
    255,
    256,
    0x7FFF,
    0x8000,
    0xFFFF,
    0x1_0000,
    0x7FFF_FFFF,
    0x8000_0000,
    0xFFFF_FFFF,
    1 << 32,
    1 << 40,
    0x7FFF_FFFF_FFFF_FFFF,
    0x8000_0000_0000_0000,
    u64::MAX,
];

/// Tokens for text formats, beside the target's own dictionary.
const TEXT_TOKENS: &[&str] = &[
    "0",
    "-1",
    "1",
    "4294967296",
    "18446744073709551616",
    "-9223372036854775809",
    "1e308",
    "1e-400",
    "NaN",
    "inf",
    "-0",
    "",
    "\"",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "null",
    "true",
    "false",
    "\\u0000",
    "é",
    "0-0",
    "5-2",
    "|",
    "0|1-99999999999999999999",
];

/// Makes inputs from seeds.
pub struct Mutator {
    rng: Rng,
    dictionary: Vec<Vec<u8>>,
}

impl Mutator {
    /// `dictionary`: words of the format (keys, flags, magic numbers) to insert.
    pub fn new(rng: Rng, dictionary: &[&str]) -> Mutator {
        let mut words: Vec<Vec<u8>> = dictionary.iter().map(|w| w.as_bytes().to_vec()).collect();
        words.extend(TEXT_TOKENS.iter().map(|w| w.as_bytes().to_vec()));
        Mutator {
            rng,
            dictionary: words,
        }
    }

    /// One input: a seed, unchanged one time in 64, else with 1 to 4 mutations; or, one
    /// time in 100, random bytes.
    pub fn mutate(&mut self, seeds: &[Vec<u8>]) -> Vec<u8> {
        if seeds.is_empty() || self.rng.chance(100) {
            let len = self.rng.below(64);
            return (0..len).map(|_| self.rng.next_u64() as u8).collect();
        }
        let mut data = seeds[self.rng.below(seeds.len())].clone();
        if self.rng.chance(64) {
            return data;
        }
        for _ in 0..1 + self.rng.below(4) {
            self.mutate_once(&mut data, seeds);
        }
        data
    }

    fn mutate_once(&mut self, data: &mut Vec<u8>, seeds: &[Vec<u8>]) {
        let len = data.len();
        // Most headers sit at the start: aim there half the time.
        let at = |rng: &mut Rng| {
            if len == 0 {
                0
            } else if rng.chance(2) {
                rng.below(len.min(64))
            } else {
                rng.below(len)
            }
        };
        match self.rng.below(12) {
            0 if len > 0 => {
                let i = at(&mut self.rng);
                data[i] ^= 1 << self.rng.below(8);
            }
            1 if len > 0 => {
                let i = at(&mut self.rng);
                data[i] = [0u8, 0xFF, 0x7F, 0x80, self.rng.next_u64() as u8][self.rng.below(5)];
            }
            2 => {
                // An integer field set to an edge value, in either byte order.
                let width = [1usize, 2, 4, 8][self.rng.below(4)];
                let value = INTERESTING[self.rng.below(INTERESTING.len())];
                let mut bytes = value.to_le_bytes()[..width].to_vec();
                if self.rng.chance(2) {
                    bytes.reverse();
                }
                let i = at(&mut self.rng).min(len.saturating_sub(width));
                for (k, b) in bytes.into_iter().enumerate() {
                    if i + k < data.len() {
                        data[i + k] = b;
                    } else {
                        data.push(b);
                    }
                }
            }
            3 if len > 0 => data.truncate(self.rng.below(len)),
            4 if len > 0 => {
                let (from, n) = (self.rng.below(len), 1 + self.rng.below(64));
                let end = (from + n).min(len);
                data.drain(from..end);
            }
            5 if len > 0 => {
                // A run repeated in place (a record or a header entry twice).
                let (from, n) = (self.rng.below(len), 1 + self.rng.below(256));
                let chunk = data[from..(from + n).min(len)].to_vec();
                let to = self.rng.below(len + 1);
                data.splice(to..to, chunk);
            }
            6 => {
                let other = &seeds[self.rng.below(seeds.len())];
                let cut = self.rng.below(len + 1);
                let from = self.rng.below(other.len() + 1);
                data.truncate(cut);
                data.extend_from_slice(&other[from..]);
            }
            7 | 8 => self.text_mutation(data),
            9 | 10 => self.number_mutation(data),
            _ => {
                let n = 1 + self.rng.below(16);
                let to = self.rng.below(len + 1);
                let bytes: Vec<u8> = (0..n).map(|_| self.rng.next_u64() as u8).collect();
                data.splice(to..to, bytes);
            }
        }
    }

    /// Replaces the next run of decimal digits (a length, a shape entry, an offset in a
    /// text header) with a number at an edge: zero, sign, 2^31, 2^32, 2^63, 2^64 - 1.
    fn number_mutation(&mut self, data: &mut Vec<u8>) {
        const NUMBERS: &[&str] = &[
            "0",
            "1",
            "-1",
            "65536",
            "2147483648",
            "4294967296",
            "1099511627776",
            "9223372036854775807",
            "18446744073709551615",
            "18446744073709551616",
        ];
        let from = self.rng.below(data.len() + 1);
        let Some(start) = data[from..]
            .iter()
            .position(u8::is_ascii_digit)
            .map(|p| from + p)
        else {
            return;
        };
        let end = data[start..]
            .iter()
            .position(|b| !b.is_ascii_digit())
            .map_or(data.len(), |p| start + p);
        let number = NUMBERS[self.rng.below(NUMBERS.len())].as_bytes().to_vec();
        data.splice(start..end, number);
    }

    /// Replaces a run of digits or a word with a dictionary token, or inserts one.
    fn text_mutation(&mut self, data: &mut Vec<u8>) {
        let word = self.dictionary[self.rng.below(self.dictionary.len())].clone();
        let len = data.len();
        let start = self.rng.below(len + 1);
        let token_end = data[start..]
            .iter()
            .position(|b| !b.is_ascii_alphanumeric() && *b != b'_' && *b != b'-' && *b != b'.')
            .map_or(len, |p| start + p);
        let end = if self.rng.chance(3) { start } else { token_end };
        data.splice(start..end, word);
    }
}
