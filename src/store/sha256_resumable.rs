//! A SHA-256 that a resumable upload carries from one request to the next, whatever process or
//! node serves it: its state after a whole number of 64-byte blocks — eight words and a byte
//! count — is small enough to live in the upload's state file, and the bytes after the last
//! whole block are on disk, where the next writer reads them again. The compression function is
//! `sha2`'s own (`compress256`); only the padding of the last block is written here.
//!
//! So the last part of an upload does not read the whole file again for its digest: each byte
//! is hashed once, as it arrives.

use sha2::compress256;
use sha2::digest::consts::U64;
use sha2::digest::generic_array::GenericArray;

/// SHA-256's initial state (FIPS 180-4 §5.3.3).
const INITIAL: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];
/// Bytes of a block.
const BLOCK: usize = 64;

/// What is kept between requests: the state after `octets` bytes (a multiple of 64).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct SavedSha256 {
    /// The eight state words, big-endian, in lower-case hexadecimal (64 digits).
    #[serde(rename = "etat")]
    pub state: String,
    /// The bytes hashed into them.
    #[serde(rename = "octets")]
    pub bytes: u64,
}

/// A SHA-256 being computed.
#[derive(Clone)]
pub(crate) struct ResumableSha256 {
    state: [u32; 8],
    /// Bytes compressed into `state` (a multiple of 64).
    compressed: u64,
    /// The bytes after them, fewer than 64.
    pending: [u8; BLOCK],
    pending_len: usize,
}

impl Default for ResumableSha256 {
    fn default() -> Self {
        ResumableSha256 {
            state: INITIAL,
            compressed: 0,
            pending: [0; BLOCK],
            pending_len: 0,
        }
    }
}

impl ResumableSha256 {
    /// The hash as `saved` left it; the bytes after `saved.bytes` must be given again with
    /// [`ResumableSha256::update`]. `None` for anything that is not such a state.
    pub(super) fn resume(saved: &SavedSha256) -> Option<ResumableSha256> {
        if !saved.bytes.is_multiple_of(BLOCK as u64) || saved.state.len() != 64 {
            return None;
        }
        let mut state = [0u32; 8];
        for (i, word) in state.iter_mut().enumerate() {
            *word = u32::from_str_radix(saved.state.get(i * 8..i * 8 + 8)?, 16).ok()?;
        }
        Some(ResumableSha256 {
            state,
            compressed: saved.bytes,
            ..ResumableSha256::default()
        })
    }

    /// Hashes `data`.
    pub(super) fn update(&mut self, mut data: &[u8]) {
        if self.pending_len > 0 {
            let take = (BLOCK - self.pending_len).min(data.len());
            self.pending[self.pending_len..self.pending_len + take].copy_from_slice(&data[..take]);
            self.pending_len += take;
            data = &data[take..];
            if self.pending_len < BLOCK {
                return;
            }
            let block = self.pending;
            self.compress(&block);
            self.pending_len = 0;
        }
        let whole = data.len() / BLOCK * BLOCK;
        for block in data[..whole].chunks_exact(BLOCK) {
            // A view of the block, not a copy.
            let block: &GenericArray<u8, U64> = GenericArray::from_slice(block);
            compress256(&mut self.state, std::slice::from_ref(block));
        }
        self.compressed += whole as u64;
        let rest = &data[whole..];
        self.pending[..rest.len()].copy_from_slice(rest);
        self.pending_len = rest.len();
    }

    fn compress(&mut self, block: &[u8; BLOCK]) {
        compress256(&mut self.state, &[(*block).into()]);
        self.compressed += BLOCK as u64;
    }

    /// What to keep: the state after the whole blocks hashed so far (the bytes after them are
    /// the caller's to give again).
    pub(super) fn saved(&self) -> SavedSha256 {
        SavedSha256 {
            state: self.state.iter().map(|w| format!("{w:08x}")).collect(),
            bytes: self.compressed,
        }
    }

    /// The digest of everything hashed (FIPS 180-4 §5.1.1: a 1 bit, zeros, the length in bits).
    pub(super) fn finalize(mut self) -> [u8; 32] {
        let bits = (self.compressed + self.pending_len as u64).wrapping_mul(8);
        let mut tail = [0u8; 2 * BLOCK];
        tail[..self.pending_len].copy_from_slice(&self.pending[..self.pending_len]);
        tail[self.pending_len] = 0x80;
        let len = if self.pending_len < BLOCK - 8 {
            BLOCK
        } else {
            2 * BLOCK
        };
        tail[len - 8..len].copy_from_slice(&bits.to_be_bytes());
        for block in tail[..len].chunks_exact(BLOCK) {
            compress256(
                &mut self.state,
                std::slice::from_ref(GenericArray::from_slice(block)),
            );
        }
        let mut out = [0u8; 32];
        for (o, w) in out.chunks_exact_mut(4).zip(self.state) {
            o.copy_from_slice(&w.to_be_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    /// Every length around the padding's edges, cut at every kind of place, saved and resumed
    /// between the pieces as another process would: the digest of `sha2` itself.
    #[test]
    fn pieces_saved_and_resumed_give_sha2s_digest() {
        for len in (0..200).chain([1000, 4095, 4096, 4097, 65536 + 55, 1 << 20]) {
            let data = bytes(len, len as u32 + 7);
            let expected: [u8; 32] = Sha256::digest(&data).into();
            for cuts in [
                vec![],
                vec![1],
                vec![55, 56],
                vec![63, 64, 65, 127],
                vec![len / 3, len / 2],
            ] {
                let mut h = ResumableSha256::default();
                let mut at = 0;
                for &cut in &cuts {
                    if cut > len || cut < at {
                        continue;
                    }
                    h.update(&data[at..cut]);
                    at = cut;
                    // Another process: the saved state, then the bytes after it again.
                    let saved = h.saved();
                    assert!(saved.bytes as usize <= at && at - (saved.bytes as usize) < 64);
                    h = ResumableSha256::resume(&saved).unwrap();
                    h.update(&data[saved.bytes as usize..at]);
                }
                h.update(&data[at..]);
                assert_eq!(h.finalize(), expected, "len {len}, cuts {cuts:?}");
            }
        }
    }

    #[test]
    fn only_a_state_it_wrote_is_resumed() {
        let mut h = ResumableSha256::default();
        h.update(&bytes(130, 3));
        let saved = h.saved();
        assert_eq!(saved.bytes, 128);
        assert!(ResumableSha256::resume(&saved).is_some());
        for bad in [
            SavedSha256 {
                bytes: 100,
                ..saved.clone()
            },
            SavedSha256 {
                state: "zz".repeat(32),
                ..saved.clone()
            },
            SavedSha256 {
                state: saved.state[..60].to_string(),
                ..saved.clone()
            },
            SavedSha256 {
                state: format!("{}é", &saved.state[..62]),
                ..saved
            },
        ] {
            assert!(ResumableSha256::resume(&bad).is_none(), "{bad:?}");
        }
    }
}
