//! Secrets: constant-time comparison of tokens and MACs, and the random credentials generated at
//! first start and on signing-key rotation. A leaf.

use base64::Engine;
use std::fs::File;
use std::io::Read;

/// Lowercase hexadecimal of `b` (digests, MACs, random hex strings).
pub fn hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(char::from(DIGITS[usize::from(x >> 4)]));
        s.push(char::from(DIGITS[usize::from(x & 15)]));
    }
    s
}

/// Compares without an early exit, so the time taken says nothing about where they differ.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | ((a.len() ^ b.len()) >> 8) as u8;
    for (i, &x) in a.iter().enumerate() {
        diff |= x ^ b.get(i).copied().unwrap_or(!x);
    }
    diff == 0 && a.len() == b.len()
}

pub fn random_bytes<const N: usize>() -> Result<[u8; N], String> {
    let mut b = [0u8; N];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| format!("cannot read /dev/urandom to generate a credential: {e}"))?;
    Ok(b)
}

pub fn random_token() -> Result<String, String> {
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random_bytes::<30>()?))
}

/// A delivery token in the format the workflow SDK decodes: base64 of
/// `{"UserID":"...","Password":"..."}`.
pub fn random_qstash_token() -> Result<String, String> {
    let text = serde_json::json!({"UserID": "tidepool", "Password": random_token()?}).to_string();
    Ok(base64::engine::general_purpose::STANDARD.encode(text))
}
