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
    /// `&*` / `allchannels`: every channel (then `channels` is empty).
    pub all_channels: bool,
    /// Channel patterns (`&news:*`) the user may publish to.
    pub channels: Vec<Vec<u8>>,
    /// How many users of this name were deleted before this one was created: part of what a
    /// REST token's MAC covers, so a token dies with its user and a user created again
    /// under the same name and password does not bring old tokens back.
    pub generation: u64,
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
            channels: Vec::new(),
            generation: 0,
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
            channels: Vec::new(),
            generation: 0,
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

    /// Whether `key` may be used with the access a command needs: one pattern must match it
    /// and grant all of that access (as Redis checks: `%R~a:* %W~a:*` does not let GETSET,
    /// which reads and writes, touch `a:1`).
    pub fn key_allowed(&self, key: &[u8], read: bool, write: bool) -> bool {
        self.keys.iter().any(|(perm, pat)| {
            let ok = match perm {
                KeyPerm::ReadWrite => true,
                KeyPerm::Read => !write,
                KeyPerm::Write => !read,
            };
            ok && crate::glob::glob_match(pat, key, false)
        })
    }

    /// Whether the user may publish to `channel` (a channel pattern matches it), or, with
    /// `is_pattern`, subscribe to the pattern `channel` (a rule names exactly it), as Redis.
    pub fn channel_allowed(&self, channel: &[u8], is_pattern: bool) -> bool {
        self.all_channels
            || self.channels.iter().any(|p| {
                if is_pattern {
                    p == channel
                } else {
                    crate::glob::glob_match(p, channel, false)
                }
            })
    }

    /// The channel rules as ACL LIST and ACL GETUSER show them (`&*`, or `&a &b`).
    pub fn channels_text(&self) -> Vec<String> {
        if self.all_channels {
            return vec!["&*".into()];
        }
        self.channels
            .iter()
            .map(|c| format!("&{}", String::from_utf8_lossy(c)))
            .collect()
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
        if !self.all_channels {
            out.push_str(" resetchannels");
        }
        for c in self.channels_text() {
            out.push(' ');
            out.push_str(&c);
        }
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
    /// Deletions per user name, for [`AclUser::generation`]. State: replayed with the log.
    deleted: BTreeMap<String, u64>,
    /// Keys the token MACs; configuration, not state (never logged).
    secret: Vec<u8>,
    /// What this database's tokens end with (`.<number>`; empty for the default database).
    suffix: String,
}

impl Default for Acl {
    fn default() -> Acl {
        let mut users = BTreeMap::new();
        users.insert("default".to_string(), AclUser::full());
        Acl {
            users,
            deleted: BTreeMap::new(),
            secret: Vec::new(),
            suffix: String::new(),
        }
    }
}

pub fn password_hash(password: &[u8]) -> String {
    crate::secret::hex(&Sha256::digest(password))
}

const TOKEN_PREFIX: &str = "acl_";

impl Acl {
    /// Keys this database's tokens with `secret`; they end with `suffix`.
    pub fn set_secret(&mut self, secret: Vec<u8>, suffix: String) {
        self.secret = secret;
        self.suffix = suffix;
    }

    /// Deletions per user name (what a snapshot keeps besides the users).
    pub fn deletions(&self) -> &BTreeMap<String, u64> {
        &self.deleted
    }

    /// The users and deletions a snapshot kept; the secret stays as configured.
    pub fn restore(&mut self, users: BTreeMap<String, AclUser>, deleted: BTreeMap<String, u64>) {
        self.users = users;
        self.deleted = deleted;
    }

    /// Whether two ACL states are the same (the secret is configuration, not state).
    pub fn same_state(&self, other: &Acl) -> bool {
        self.users == other.users && self.deleted == other.deleted
    }

    /// Deletes a user; its tokens die with it (see [`AclUser::generation`]).
    pub fn del_user(&mut self, name: &str) -> bool {
        if self.users.remove(name).is_none() {
            return false;
        }
        *self.deleted.entry(name.to_string()).or_insert(0) += 1;
        true
    }

    fn mac(&self, user: &str, generation: u64, password_hash: &str) -> Vec<u8> {
        match <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(&self.secret) {
            Ok(mut m) => {
                m.update(user.as_bytes());
                m.update(&[0]);
                m.update(password_hash.as_bytes());
                // Generation 0 adds nothing, so tokens minted before generations existed
                // stay valid.
                if generation > 0 {
                    m.update(&[0]);
                    m.update(&generation.to_le_bytes());
                }
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
        // The password GENTOKEN wrapped stands for the token the user holds.
        let wrapped = password_hash(self.gen_token(user, password).as_bytes());
        let bound = if u.passwords.contains(&hash) {
            hash
        } else if u.passwords.contains(&wrapped) {
            wrapped
        } else if u.nopass {
            "nopass".to_string()
        } else {
            return Err(wrong());
        };
        Ok(format!(
            "{TOKEN_PREFIX}{}.{}{}",
            URL_SAFE_NO_PAD.encode(user),
            URL_SAFE_NO_PAD.encode(self.mac(user, u.generation, &bound)),
            self.suffix
        ))
    }

    /// `ACL GENTOKEN user password`: a token that is at once a password for `ACL SETUSER
    /// user >token` and, once the user has it, a REST token for that user (Upstash's
    /// extension). The same user and password always give the same token.
    pub fn gen_token(&self, user: &str, password: &[u8]) -> String {
        let wrapped = format!("gentoken:{}", password_hash(password));
        format!(
            "{TOKEN_PREFIX}{}.{}{}",
            URL_SAFE_NO_PAD.encode(user),
            URL_SAFE_NO_PAD.encode(self.mac(user, 0, &wrapped)),
            self.suffix
        )
    }

    /// The user a token stands for, if it is valid now (user exists, is on, and still has the
    /// password the token was made with, or has the token itself as a password: GENTOKEN's).
    pub fn resolve(&self, token: &str) -> Option<(&str, &AclUser)> {
        let rest = token
            .strip_prefix(TOKEN_PREFIX)?
            .strip_suffix(self.suffix.as_str())?;
        let (u, mac) = rest.split_once('.')?;
        if mac.contains('.') {
            return None;
        }
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
        let own = password_hash(token.as_bytes());
        let is_password = user
            .passwords
            .iter()
            .any(|h| crate::secret::ct_eq(h.as_bytes(), own.as_bytes()));
        (is_password
            || bound
                .into_iter()
                .any(|h| crate::secret::ct_eq(&self.mac(name, user.generation, h), &mac)))
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
        let mut u = self.users.get(name).cloned().unwrap_or_else(|| AclUser {
            generation: self.deleted.get(name).copied().unwrap_or(0),
            ..AclUser::default()
        });
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
                "allchannels" => {
                    u.all_channels = true;
                    u.channels.clear();
                }
                "resetchannels" => {
                    u.all_channels = false;
                    u.channels.clear();
                }
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
                    } else if let Some(pat) = raw.strip_prefix(b"&") {
                        if pat == b"*" {
                            u.all_channels = true;
                            u.channels.clear();
                        } else if u.all_channels {
                            return Err(format!("ERR Error in ACL SETUSER modifier '{text}': Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels"));
                        } else if !u.channels.iter().any(|c| c == pat) {
                            u.channels.push(pat.to_vec());
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

    /// Guards issue 14: deleting a user and creating it again with the same password
    /// revived its old REST tokens.
    #[test]
    fn a_token_dies_with_its_user() {
        let mut acl = Acl::default();
        acl.set_secret(b"secret".to_vec(), String::new());
        let rules = [
            b"on".to_vec(),
            b">pw".to_vec(),
            b"~*".to_vec(),
            b"+@all".to_vec(),
        ];
        acl.set_user("u", &rules, |_| true, |_| true)
            .expect("setuser");
        let old = acl.rest_token("u", b"pw").expect("token");
        assert!(acl.resolve(&old).is_some());
        assert!(acl.del_user("u"));
        assert!(acl.resolve(&old).is_none());
        acl.set_user("u", &rules, |_| true, |_| true)
            .expect("setuser");
        assert!(acl.resolve(&old).is_none(), "the old token stays dead");
        let new = acl.rest_token("u", b"pw").expect("token");
        assert_ne!(new, old);
        assert!(acl.resolve(&new).is_some());
        // Changing rules of a live user keeps its tokens.
        acl.set_user("u", &[b"~app:*".to_vec()], |_| true, |_| true)
            .expect("setuser");
        assert!(acl.resolve(&new).is_some());
    }

    /// Guards issue 14: one pattern must grant all the access a key needs; channel rules
    /// hold for PUBLISH.
    #[test]
    fn key_access_and_channels_follow_redis() {
        let mut acl = Acl::default();
        let r: Vec<Vec<u8>> = ["on", "nopass", "%W~w:*", "%R~r:*", "&news:*", "+@all"]
            .iter()
            .map(|x| x.as_bytes().to_vec())
            .collect();
        acl.set_user("u", &r, |_| true, |_| true).expect("setuser");
        let u = &acl.users["u"];
        assert!(u.key_allowed(b"w:1", false, true));
        assert!(!u.key_allowed(b"w:1", true, true), "GETSET reads too");
        assert!(u.key_allowed(b"w:1", false, false), "EXISTS needs neither");
        assert!(u.key_allowed(b"r:1", true, false));
        assert!(!u.key_allowed(b"r:1", false, true));
        assert!(u.channel_allowed(b"news:1", false));
        assert!(!u.channel_allowed(b"other", false));
        assert!(!u.channel_allowed(b"news:*x", true));
        assert!(u.channel_allowed(b"news:*", true));
        assert_eq!(
            u.describe("u"),
            "user u on nopass %W~w:* %R~r:* resetchannels &news:* +@all"
        );
    }

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
        assert!(u.key_allowed(b"app:1", true, true));
        assert!(!u.key_allowed(b"other", true, false));
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
        acl.set_secret(b"secret".to_vec(), String::new());
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
