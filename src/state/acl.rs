//! ACL users (`ACL SETUSER` and friends) and the REST tokens minted for them
//! (`ACL RESTTOKEN`, an Upstash extension).
//!
//! Users are state: `ACL SETUSER` is logged (passwords as their SHA-256, never in clear) and
//! replayed like any write. A token names its user and carries an HMAC, keyed by a server secret,
//! of the user's name and one of the user's password hashes. It is resolved at request time, so
//! narrowing a user's permissions later applies to every token already issued, and changing the
//! password revokes them.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// What a key pattern lets a command do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPerm {
    Read,
    Write,
    ReadWrite,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclUser {
    pub enabled: bool,
    pub nopass: bool,
    /// SHA-256 hex of each password, in the order added.
    pub passwords: Vec<String>,
    pub keys: Vec<(KeyPerm, Vec<u8>)>,
    pub all_channels: bool,
    /// `sanitize-payload` (true) or `skip-sanitize-payload` (false), shown as Redis does; RESTORE
    /// payloads are not accepted by tidepool either way.
    pub sanitize: Option<bool>,
    /// Command rules in order, normalised (`+@all`, `-@all`, `+@hash`, `+get`, `-hdel`,
    /// `+config|get`); the last rule that matches a command decides.
    pub rules: Vec<String>,
}

impl Default for AclUser {
    /// A new user: off, no passwords, no keys, no commands (as Redis creates one).
    fn default() -> AclUser {
        AclUser {
            enabled: false,
            nopass: false,
            passwords: Vec::new(),
            keys: Vec::new(),
            all_channels: false,
            sanitize: None,
            rules: vec!["-@all".into()],
        }
    }
}

impl AclUser {
    fn full() -> AclUser {
        AclUser {
            enabled: true,
            nopass: true,
            passwords: Vec::new(),
            keys: vec![(KeyPerm::ReadWrite, b"*".to_vec())],
            all_channels: true,
            sanitize: None,
            rules: vec!["+@all".into()],
        }
    }

    /// The flags `ACL GETUSER` lists, in Redis's order.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut f = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            f.push("nopass");
        }
        match self.sanitize {
            Some(false) => f.push("skip-sanitize-payload"),
            Some(true) => f.push("sanitize-payload"),
            None => {}
        }
        f
    }

    /// Whether the rules allow the command `name` (`get`, `config|get`) of `categories`.
    pub fn allows(&self, name: &str, categories: &[String]) -> bool {
        let container = name.split('|').next().unwrap_or(name);
        let mut allowed = false;
        for r in &self.rules {
            let (plus, what) = r.split_at(1);
            let hit = match what.strip_prefix('@') {
                Some("all") => true,
                Some(cat) => categories.iter().any(|c| c.strip_prefix('@') == Some(cat)),
                None => what == name || what == container,
            };
            if hit {
                allowed = plus == "+";
            }
        }
        allowed
    }

    /// Whether `key` may be used with the access a command needs.
    pub fn key_allowed(&self, key: &[u8], write: bool) -> bool {
        self.keys.iter().any(|(perm, pat)| {
            let ok = match perm {
                KeyPerm::ReadWrite => true,
                KeyPerm::Read => !write,
                KeyPerm::Write => write,
            };
            ok && crate::command::args::glob_match(pat, key, false)
        })
    }

    /// `ACL LIST`'s description of the user.
    pub fn describe(&self, name: &str) -> String {
        let mut out = format!("user {name} {}", self.flags().join(" "));
        for p in &self.passwords {
            out.push_str(&format!(" #{p}"));
        }
        for k in &self.keys_text() {
            out.push(' ');
            out.push_str(k);
        }
        out.push_str(if self.all_channels {
            " &*"
        } else {
            " resetchannels"
        });
        out.push(' ');
        out.push_str(&self.rules.join(" "));
        out
    }

    pub fn keys_text(&self) -> Vec<String> {
        self.keys
            .iter()
            .map(|(perm, pat)| {
                let p = String::from_utf8_lossy(pat);
                match perm {
                    KeyPerm::ReadWrite => format!("~{p}"),
                    KeyPerm::Read => format!("%R~{p}"),
                    KeyPerm::Write => format!("%W~{p}"),
                }
            })
            .collect()
    }
}

/// All users; `default` always exists and is what the Standard token runs as.
#[derive(Debug, Clone)]
pub struct Acl {
    pub users: BTreeMap<String, AclUser>,
    /// Keys the token MACs; configuration, not state (never logged).
    secret: Vec<u8>,
}

impl Default for Acl {
    fn default() -> Acl {
        let mut users = BTreeMap::new();
        users.insert("default".to_string(), AclUser::full());
        Acl {
            users,
            secret: Vec::new(),
        }
    }
}

pub fn password_hash(password: &[u8]) -> String {
    Sha256::digest(password)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

const TOKEN_PREFIX: &str = "acl_";

impl Acl {
    pub fn set_secret(&mut self, secret: Vec<u8>) {
        self.secret = secret;
    }

    fn mac(&self, user: &str, password_hash: &str) -> Vec<u8> {
        match <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(&self.secret) {
            Ok(mut m) => {
                m.update(user.as_bytes());
                m.update(&[0]);
                m.update(password_hash.as_bytes());
                m.finalize().into_bytes().to_vec()
            }
            Err(_) => Vec::new(),
        }
    }

    /// `ACL RESTTOKEN user password`: a token, or the error Upstash answers.
    pub fn rest_token(&self, user: &str, password: &[u8]) -> Result<String, String> {
        let wrong = || format!("ERR Wrong password or user \"{user}\" does not exist");
        let u = self.users.get(user).ok_or_else(wrong)?;
        let hash = password_hash(password);
        let bound = if u.passwords.contains(&hash) {
            hash
        } else if u.nopass {
            "nopass".to_string()
        } else {
            return Err(wrong());
        };
        Ok(format!(
            "{TOKEN_PREFIX}{}.{}",
            URL_SAFE_NO_PAD.encode(user),
            URL_SAFE_NO_PAD.encode(self.mac(user, &bound))
        ))
    }

    /// The user a token stands for, if it is valid now (user exists, is on, and still has the
    /// password the token was made with).
    pub fn resolve(&self, token: &str) -> Option<(&str, &AclUser)> {
        let rest = token.strip_prefix(TOKEN_PREFIX)?;
        let (u, mac) = rest.split_once('.')?;
        let name = String::from_utf8(URL_SAFE_NO_PAD.decode(u).ok()?).ok()?;
        let mac = URL_SAFE_NO_PAD.decode(mac).ok()?;
        let (name, user) = self.users.get_key_value(&name)?;
        if !user.enabled || self.secret.is_empty() {
            return None;
        }
        let mut bound: Vec<&str> = user.passwords.iter().map(String::as_str).collect();
        if user.nopass {
            bound.push("nopass");
        }
        bound
            .into_iter()
            .any(|h| crate::http::ct_eq(&self.mac(name, h), &mac))
            .then_some((name.as_str(), user))
    }

    /// Applies `ACL SETUSER` rules to `name` (created if absent), all or nothing. Returns the
    /// rules in the form to log (passwords replaced by their hashes).
    pub fn set_user(
        &mut self,
        name: &str,
        rules: &[Vec<u8>],
        known_category: impl Fn(&str) -> bool,
        known_command: impl Fn(&str) -> bool,
    ) -> Result<Vec<Vec<u8>>, String> {
        let mut u = self.users.get(name).cloned().unwrap_or_default();
        let mut logged = Vec::with_capacity(rules.len());
        for raw in rules {
            let text = String::from_utf8_lossy(raw).into_owned();
            let syntax = || format!("ERR Error in ACL SETUSER modifier '{text}': Syntax error");
            let lower = text.to_ascii_lowercase();
            let mut log = raw.clone();
            match lower.as_str() {
                "on" => u.enabled = true,
                "off" => u.enabled = false,
                "nopass" => {
                    u.nopass = true;
                    u.passwords.clear();
                }
                "resetpass" => {
                    u.nopass = false;
                    u.passwords.clear();
                }
                "allkeys" => u.keys = vec![(KeyPerm::ReadWrite, b"*".to_vec())],
                "resetkeys" => u.keys.clear(),
                "allchannels" => u.all_channels = true,
                "resetchannels" => u.all_channels = false,
                "allcommands" => u.rules = vec!["+@all".into()],
                "nocommands" => u.rules = vec!["-@all".into()],
                "reset" => {
                    u = AclUser::default();
                    u.sanitize = Some(true);
                }
                "sanitize-payload" => u.sanitize = Some(true),
                "skip-sanitize-payload" => u.sanitize = Some(false),
                _ => {
                    if let Some(p) = raw.strip_prefix(b">") {
                        let h = password_hash(p);
                        if !u.passwords.contains(&h) {
                            u.passwords.push(h.clone());
                        }
                        u.nopass = false;
                        log = format!("#{h}").into_bytes();
                    } else if let Some(p) = raw.strip_prefix(b"<") {
                        let h = password_hash(p);
                        u.passwords.retain(|x| *x != h);
                        log = format!("!{h}").into_bytes();
                    } else if let Some(h) = text.strip_prefix('#') {
                        let valid = h.len() == 64
                            && h.bytes()
                                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
                        if !valid {
                            return Err(format!("ERR Error in ACL SETUSER modifier '{text}': The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters"));
                        }
                        if !u.passwords.iter().any(|x| x == h) {
                            u.passwords.push(h.to_string());
                        }
                        u.nopass = false;
                    } else if let Some(h) = text.strip_prefix('!') {
                        u.passwords.retain(|x| x != h);
                    } else if let Some(p) = raw.strip_prefix(b"~") {
                        u.keys.push((KeyPerm::ReadWrite, p.to_vec()));
                    } else if let Some(rest) = text.strip_prefix('%') {
                        let (perm, pat) = rest.split_once('~').ok_or_else(syntax)?;
                        let perm = match perm.to_ascii_uppercase().as_str() {
                            "R" => KeyPerm::Read,
                            "W" => KeyPerm::Write,
                            "RW" | "WR" => KeyPerm::ReadWrite,
                            _ => return Err(syntax()),
                        };
                        u.keys.push((perm, pat.as_bytes().to_vec()));
                    } else if text.starts_with('&') {
                        // Channel patterns: pub/sub over REST is not per-user in tidepool.
                        if text == "&*" {
                            u.all_channels = true;
                        }
                    } else if let Some(what) = lower.strip_prefix('+').or(lower.strip_prefix('-')) {
                        let unknown = || {
                            format!("ERR Error in ACL SETUSER modifier '{text}': Unknown command or category name in ACL")
                        };
                        let ok = match what.strip_prefix('@') {
                            Some(cat) => cat == "all" || known_category(cat),
                            None => known_command(what),
                        };
                        if !ok {
                            return Err(unknown());
                        }
                        if what == "@all" {
                            u.rules.clear();
                        }
                        u.rules.push(format!("{}{what}", &lower[..1]));
                    } else {
                        return Err(syntax());
                    }
                }
            }
            logged.push(log);
        }
        self.users.insert(name.to_string(), u);
        Ok(logged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(acl: &mut Acl, name: &str, rules: &[&str]) -> Result<Vec<Vec<u8>>, String> {
        let r: Vec<Vec<u8>> = rules.iter().map(|r| r.as_bytes().to_vec()).collect();
        acl.set_user(
            name,
            &r,
            |c| c == "hash" || c == "read",
            |c| ["get", "set", "hdel", "config|get", "config"].contains(&c),
        )
    }

    #[test]
    fn rules_and_description() {
        let mut acl = Acl::default();
        let logged = set(
            &mut acl,
            "alice",
            &["on", ">pw1", "~app:*", "+get", "+@hash", "-hdel"],
        )
        .expect("ok");
        assert_eq!(
            logged[1],
            format!("#{}", password_hash(b"pw1")).into_bytes()
        );
        let u = &acl.users["alice"];
        assert_eq!(
            u.describe("alice"),
            format!(
                "user alice on #{} ~app:* resetchannels -@all +get +@hash -hdel",
                password_hash(b"pw1")
            )
        );
        let hash = vec!["@hash".to_string()];
        assert!(u.allows("get", &[]));
        assert!(u.allows("hset", &hash));
        assert!(!u.allows("hdel", &hash));
        assert!(!u.allows("set", &[]));
        assert!(u.key_allowed(b"app:1", true));
        assert!(!u.key_allowed(b"other", false));
        assert_eq!(
            set(&mut acl, "bob", &["foo"]),
            Err("ERR Error in ACL SETUSER modifier 'foo': Syntax error".into())
        );
        assert!(set(&mut acl, "bob", &["+nonexist"]).is_err());
        assert!(!acl.users.contains_key("bob"), "all or nothing");
    }

    #[test]
    fn tokens_resolve_to_the_user_now() {
        let mut acl = Acl::default();
        acl.set_secret(b"secret".to_vec());
        set(&mut acl, "alice", &["on", ">pw", "allkeys", "+get"]).expect("ok");
        assert!(acl.rest_token("alice", b"nope").is_err());
        assert!(acl.rest_token("nobody", b"pw").is_err());
        let t = acl.rest_token("alice", b"pw").expect("token");
        assert_eq!(acl.resolve(&t).map(|(n, _)| n), Some("alice"));
        assert!(acl.resolve(&format!("{t}x")).is_none());
        set(&mut acl, "alice", &["off"]).expect("ok");
        assert!(
            acl.resolve(&t).is_none(),
            "a disabled user's tokens stop working"
        );
        set(&mut acl, "alice", &["on", "resetpass", ">other"]).expect("ok");
        assert!(
            acl.resolve(&t).is_none(),
            "a changed password revokes tokens"
        );
    }
}
