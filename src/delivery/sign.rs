//! `Upstash-Signature`: an HS256 JWT over the delivered body, keyed by the signing-key string
//! itself (`sig_` prefix included), which the SDKs' `Receiver` verifies with either key.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};

/// How long a signature stays valid.
const SIGNATURE_LIFETIME_S: u64 = 300;

/// The two keys: deliveries are signed with `current`; receivers also try `next`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigningKeys {
    pub current: String,
    pub next: String,
}

impl SigningKeys {
    /// The keys after a rotation: `next` becomes `current`, and a new `next` is generated.
    pub fn rotated(&self) -> Result<SigningKeys, String> {
        Ok(SigningKeys {
            current: self.next.clone(),
            next: new_key()?,
        })
    }
}

/// One of the QStash dev server's public test users: its name, token and signing keys.
pub struct DevUser {
    pub name: &'static str,
    pub token: &'static str,
    pub current: &'static str,
    pub next: &'static str,
}

/// The QStash dev server's four test users (public values, from its documentation and the
/// SDKs' dev mode). `serve --dev` accepts them all; the first is the one dev-mode SDKs use.
pub const DEV_USERS: [DevUser; 4] = [
    DevUser {
        name: "defaultUser",
        token: "eyJVc2VySUQiOiJkZWZhdWx0VXNlciIsIlBhc3N3b3JkIjoiZGVmYXVsdFBhc3N3b3JkIn0=",
        current: "sig_7kYjw48mhY7kAjqNGcy6cr29RJ6r",
        next: "sig_5ZB6DVzB1wjE8S6rZ7eenA8Pdnhs",
    },
    DevUser {
        name: "testUser1",
        token: "eyJVc2VySUQiOiJ0ZXN0VXNlcjEiLCJQYXNzd29yZCI6InRlc3RQYXNzd29yZCJ9",
        current: "sig_7GVPjvuwsfqF65iC8fSrs1dfYruM",
        next: "sig_5NoELc3EFnZn4DVS5bDs2Nk4b7Ua",
    },
    DevUser {
        name: "testUser2",
        token: "eyJVc2VySUQiOiJ0ZXN0VXNlcjIiLCJQYXNzd29yZCI6InRlc3RQYXNzd29yZCJ9",
        current: "sig_6jWGaWRxHsw4vMSPJprXadyvrybF",
        next: "sig_7qHbvhmahe5GwfePDiS5Lg3pi6Qx",
    },
    DevUser {
        name: "testUser3",
        token: "eyJVc2VySUQiOiJ0ZXN0VXNlcjMiLCJQYXNzd29yZCI6InRlc3RQYXNzd29yZCJ9",
        current: "sig_5T8FcSsynBjn9mMLBsXhpacRovJf",
        next: "sig_7GFR4YaDshFcqsxWRZpRB161jguD",
    },
];

impl DevUser {
    pub fn keys(&self) -> SigningKeys {
        SigningKeys {
            current: self.current.to_string(),
            next: self.next.to_string(),
        }
    }
}

/// The keys of dev user `name` (none: not a dev user).
pub fn dev_user_keys(name: &str) -> Option<SigningKeys> {
    DEV_USERS.iter().find(|u| u.name == name).map(DevUser::keys)
}

/// A signing key in the hosted shape: `sig_` and 28 base58 characters.
pub fn new_key() -> Result<String, String> {
    const B58: &[u8] = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
    let b = crate::secret::random_bytes::<28>()?;
    Ok(format!(
        "sig_{}",
        b.iter()
            .map(|x| B58[*x as usize % B58.len()] as char)
            .collect::<String>()
    ))
}

/// The JWT header, `{"alg":"HS256","typ":"JWT"}` in base64url.
const JWT_HEADER: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9";

/// The claims of a signature, in the order serde_json writes a map's keys (sorted), which is
/// the order these tokens have always had.
#[derive(serde::Serialize)]
struct Claims<'a> {
    body: &'a str,
    exp: u64,
    iat: u64,
    iss: &'a str,
    jti: &'a str,
    nbf: u64,
    sub: &'a str,
}

/// Signs a delivery of `body` to `url` at `now_s`. `jti` makes the token unique. Written
/// straight into one buffer: a JSON map and its formatted copies took a tenth of the delivery
/// thread's time.
pub fn sign(key: &str, url: &str, body: &[u8], now_s: u64, jti: &str) -> String {
    let mut body_hash = [0u8; 44];
    let hashed = base64::engine::general_purpose::URL_SAFE
        .encode_slice(Sha256::digest(body), &mut body_hash)
        .unwrap_or(0);
    let claims = Claims {
        body: std::str::from_utf8(&body_hash[..hashed]).unwrap_or(""),
        exp: now_s + SIGNATURE_LIFETIME_S,
        iat: now_s,
        iss: "Upstash",
        jti,
        // 0: the hosted service changed to this so that clock skew never rejects a delivery.
        nbf: 0,
        sub: url,
    };
    // Serializing plain strings and numbers cannot fail.
    let json = serde_json::to_vec(&claims).unwrap_or_default();
    let mut token = String::with_capacity(JWT_HEADER.len() + 2 + json.len() * 4 / 3 + 48);
    token.push_str(JWT_HEADER);
    token.push('.');
    URL_SAFE_NO_PAD.encode_string(&json, &mut token);
    let sig = hmac_sha256(key.as_bytes(), token.as_bytes());
    token.push('.');
    URL_SAFE_NO_PAD.encode_string(sig, &mut token);
    token
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC accepts keys of any length, so this cannot fail.
    match <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(key) {
        Ok(mut m) => {
            m.update(data);
            m.finalize().into_bytes().into()
        }
        Err(_) => [0; 32],
    }
}

/// SHA-256 of one byte string, hex.
pub fn sha256_plain_hex(data: &[u8]) -> String {
    crate::secret::hex(&Sha256::digest(data))
}

/// SHA-256 of some length-prefixed parts, hex (content-based deduplication keys).
pub fn sha256_hex(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    crate::secret::hex(&h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4231_case_2() {
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        let hex = crate::secret::hex(&mac);
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    /// Guards the bytes of a signature across the rewrite that dropped the JSON map: the
    /// token `json!` built, for the same inputs, before it.
    #[test]
    fn token_bytes_unchanged() {
        assert_eq!(
            JWT_HEADER,
            URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#)
        );
        let t = sign("sig_k", "http://x/\"y\"", b"hi", 1000, "jwt_1");
        let old = {
            let claims = serde_json::json!({
                "iss": "Upstash",
                "sub": "http://x/\"y\"",
                "exp": 1300,
                "nbf": 0,
                "iat": 1000,
                "jti": "jwt_1",
                "body": "j0NDRmSPa5bfid2pAcUXaxCm2Dlh3TwayItZstwyeqQ=",
            });
            let input = format!(
                "{JWT_HEADER}.{}",
                URL_SAFE_NO_PAD.encode(claims.to_string())
            );
            let sig = hmac_sha256(b"sig_k", input.as_bytes());
            format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig))
        };
        assert_eq!(t, old);
    }

    #[test]
    fn token_shape() {
        let t = sign("sig_k", "http://x/y", b"hi", 1000, "jwt_1");
        let parts: Vec<&str> = t.split('.').collect();
        assert_eq!(parts.len(), 3);
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).expect("b64")).expect("json");
        assert_eq!(claims["iss"], "Upstash");
        assert_eq!(claims["sub"], "http://x/y");
        assert_eq!(claims["exp"], 1300);
        // base64url(sha256("hi")) with padding.
        assert_eq!(
            claims["body"],
            "j0NDRmSPa5bfid2pAcUXaxCm2Dlh3TwayItZstwyeqQ="
        );
    }
}
