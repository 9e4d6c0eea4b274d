//! The web config file (`--web-config FILE`), in the format of the Prometheus exporter
//! toolkit's `--web.config.file`: TLS and basic auth for the exporter's endpoint.
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: /etc/pagewise/tls.crt   # PEM: the certificate, then its chain
//!   key_file: /etc/pagewise/tls.key    # PEM: PKCS#8, PKCS#1 or SEC1 key
//! basic_auth_users:
//!   prometheus: $2y$10$...             # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\n')
//! ```
//!
//! Only those keys are read (other toolkit keys, client certificates, cipher choices, are
//! refused by name rather than ignored); relative file names are relative to the config
//! file's directory, as in the toolkit. The parser reads this YAML subset: `key: value` lines,
//! two levels, values plain or quoted, `#` comments; the file is at most [`MAX_CONFIG`] bytes.
//!
//! Basic auth: credentials are checked with bcrypt (constant-time comparison of the hashes);
//! checks are serialized (one bcrypt at a time, so a storm of wrong passwords costs one CPU,
//! not all) and credentials that passed are cached ([`CACHE`] of them, compared in constant
//! time), so scrapes with good credentials cost no bcrypt after the first. A user that does
//! not exist costs the same bcrypt as one that does. Hashes of a cost above [`MAX_COST`] are
//! refused when the file is read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Largest web config file, in bytes.
pub const MAX_CONFIG: usize = 64 << 10;
/// Largest certificate or key file, in bytes.
pub const MAX_PEM: usize = 1 << 20;
/// Highest bcrypt cost accepted (cost 14 is ~1 s of one CPU per check).
pub const MAX_COST: u32 = 14;
/// Credentials kept once verified.
pub const CACHE: usize = 64;
/// Most users.
pub const MAX_USERS: usize = 1000;

/// A TLS server configuration (rustls), as [`super::http::serve_tls`] takes it.
pub type TlsConfig = Arc<rustls::ServerConfig>;

/// What a web config file says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebConfig {
    /// Certificate chain and key files (PEM), when TLS is asked for.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// User names and their bcrypt hashes (empty: no authentication).
    pub users: BTreeMap<String, String>,
}

/// A web config error: the line (0 when none) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct WebConfigError {
    /// 1-based line, 0 for the file as a whole.
    pub line: usize,
    /// Why.
    pub message: String,
}

fn bad(line: usize, message: impl Into<String>) -> WebConfigError {
    WebConfigError {
        line,
        message: message.into(),
    }
}

/// A scalar: quoted ('...' with '' for ', "..." without escapes beyond \" and \\), or plain
/// up to a ` #` comment.
fn scalar(v: &str, line: usize) -> Result<String, WebConfigError> {
    let v = v.trim();
    if let Some(rest) = v.strip_prefix('\'') {
        let end = rest
            .rfind('\'')
            .ok_or_else(|| bad(line, "unclosed quote"))?;
        let tail = rest[end + 1..].trim();
        if !(tail.is_empty() || tail.starts_with('#')) {
            return Err(bad(line, "text after a quoted value"));
        }
        return Ok(rest[..end].replace("''", "'"));
    }
    if let Some(rest) = v.strip_prefix('"') {
        let mut out = String::new();
        let mut it = rest.chars();
        while let Some(c) = it.next() {
            match c {
                '"' => {
                    let tail = it.as_str().trim();
                    if !(tail.is_empty() || tail.starts_with('#')) {
                        return Err(bad(line, "text after a quoted value"));
                    }
                    return Ok(out);
                }
                '\\' => match it.next() {
                    Some(e @ ('"' | '\\' | '/')) => out.push(e),
                    _ => return Err(bad(line, "unsupported escape in a quoted value")),
                },
                c => out.push(c),
            }
        }
        return Err(bad(line, "unclosed quote"));
    }
    let v = match v.find(" #") {
        Some(i) => &v[..i],
        None => v,
    };
    Ok(v.trim().to_string())
}

/// The bcrypt cost of a hash `$2?$NN$...` (53 more characters), or why it is not one.
fn bcrypt_cost(hash: &str) -> Result<u32, String> {
    let parts: Vec<&str> = hash.split('$').collect();
    let ok_prefix = matches!(parts.get(1), Some(&("2a" | "2b" | "2x" | "2y")));
    let cost = parts.get(2).and_then(|c| {
        (c.len() == 2 && c.bytes().all(|b| b.is_ascii_digit())).then(|| c.parse::<u32>().ok())?
    });
    match (parts.len(), ok_prefix, cost, parts.get(3)) {
        (4, true, Some(c), Some(rest)) if rest.len() == 53 && (4..=31).contains(&c) => Ok(c),
        _ => Err("not a bcrypt hash ($2y$10$ and 53 characters)".into()),
    }
}

impl WebConfig {
    /// Parses a web config file's text; `dir` is the file's directory (relative file names).
    pub fn parse(text: &str, dir: &Path) -> Result<WebConfig, WebConfigError> {
        if text.len() > MAX_CONFIG {
            return Err(bad(0, format!("longer than {MAX_CONFIG} bytes")));
        }
        let mut section: Option<&str> = None;
        let (mut cert, mut key) = (None, None);
        let mut users = BTreeMap::new();
        let mut tls_seen = false;
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let body = raw.trim_end();
            let t = body.trim_start();
            if t.is_empty() || t.starts_with('#') || t == "---" {
                continue;
            }
            if raw.contains('\t') {
                return Err(bad(n, "tab in indentation or value"));
            }
            let (k, v) = t
                .split_once(':')
                .ok_or_else(|| bad(n, "not `key: value`"))?;
            let k = scalar(k, n)?;
            let indented = body.len() != t.len();
            if !indented {
                section = match (k.as_str(), scalar(v, n)?.as_str()) {
                    ("tls_server_config", "") => {
                        tls_seen = true;
                        Some("tls_server_config")
                    }
                    ("basic_auth_users", "") => Some("basic_auth_users"),
                    ("basic_auth_users" | "tls_server_config", "{}" | "null" | "~") => None,
                    (other, _) => return Err(bad(n, format!("unsupported setting {other}"))),
                };
                continue;
            }
            let value = scalar(v, n)?;
            match (section, k.as_str()) {
                (Some("tls_server_config"), "cert_file") => cert = Some(dir.join(value)),
                (Some("tls_server_config"), "key_file") => key = Some(dir.join(value)),
                (Some("tls_server_config"), other) => {
                    return Err(bad(
                        n,
                        format!("unsupported tls_server_config setting {other}"),
                    ))
                }
                (Some("basic_auth_users"), user) => {
                    let cost = bcrypt_cost(&value).map_err(|e| bad(n, format!("{user}: {e}")))?;
                    if cost > MAX_COST {
                        return Err(bad(
                            n,
                            format!("{user}: bcrypt cost {cost} above {MAX_COST}"),
                        ));
                    }
                    if user.is_empty() || user.contains(':') {
                        return Err(bad(n, "a user name is not empty and has no ':'"));
                    }
                    if users.insert(user.to_string(), value).is_some() {
                        return Err(bad(n, format!("user {user} given twice")));
                    }
                    if users.len() > MAX_USERS {
                        return Err(bad(n, format!("more than {MAX_USERS} users")));
                    }
                }
                _ => return Err(bad(n, "indented line outside a section")),
            }
        }
        let tls = match (cert, key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) if !tls_seen => None,
            _ => return Err(bad(0, "tls_server_config needs cert_file and key_file")),
        };
        Ok(WebConfig { tls, users })
    }

    /// The TLS server configuration of `tls` (None without one): the files read (bounded),
    /// errors naming the file.
    pub fn server_config(&self) -> Result<Option<TlsConfig>, String> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let Some((cert, key)) = &self.tls else {
            return Ok(None);
        };
        let read = |p: &Path| -> Result<Vec<u8>, String> {
            let f =
                std::fs::File::open(p).map_err(|e| format!("{}: open failed: {e}", p.display()))?;
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut std::io::Read::take(f, MAX_PEM as u64 + 1), &mut v)
                .map_err(|e| format!("{}: read failed: {e}", p.display()))?;
            if v.len() > MAX_PEM {
                return Err(format!("{}: larger than {MAX_PEM} bytes", p.display()));
            }
            Ok(v)
        };
        let pem = read(cert)?;
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{}: not PEM certificates: {e}", cert.display()))?;
        if chain.is_empty() {
            return Err(format!("{}: no certificate in it", cert.display()));
        }
        let k = PrivateKeyDer::from_pem_slice(&read(key)?)
            .map_err(|e| format!("{}: no PEM private key: {e}", key.display()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_no_client_auth()
            .with_single_cert(chain, k)
            .map_err(|e| format!("{} and {}: {e}", cert.display(), key.display()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Some(Arc::new(config)))
    }
}

/// Decodes standard base64 (padding optional); None for anything else.
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for b in s.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    (bits < 6).then_some(out)
}

/// The user and password of an `Authorization: Basic ...` value.
pub fn basic_credentials(header: &str) -> Option<(String, Vec<u8>)> {
    let (scheme, b64) = header.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64_decode(b64.trim())?;
    let colon = raw.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(raw[..colon].to_vec()).ok()?;
    Some((user, raw[colon + 1..].to_vec()))
}

/// Equal bytes, in time that depends on the lengths only.
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Basic auth over a web config's users: bcrypt checks, serialized, with the credentials that
/// passed cached.
pub struct BasicAuth {
    users: BTreeMap<String, String>,
    cache: Mutex<std::collections::VecDeque<(String, Vec<u8>)>>,
    bcrypt: Mutex<()>,
}

impl BasicAuth {
    /// Auth over `users` (None when there are none: everything is allowed).
    pub fn new(users: &BTreeMap<String, String>) -> Option<BasicAuth> {
        (!users.is_empty()).then(|| BasicAuth {
            users: users.clone(),
            cache: Mutex::new(Default::default()),
            bcrypt: Mutex::new(()),
        })
    }

    /// Whether an `Authorization` header value (None: absent) names a user with its password.
    pub fn allows(&self, authorization: Option<&str>) -> bool {
        let Some((user, pass)) = authorization.and_then(basic_credentials) else {
            return false;
        };
        {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            let mut hit = false;
            for (u, p) in cache.iter() {
                hit |= ct_eq(u.as_bytes(), user.as_bytes()) & ct_eq(p, &pass);
            }
            if hit {
                return true;
            }
        }
        // A missing user costs the same bcrypt (of the first user's hash) and fails.
        let (hash, known) = match self.users.get(&user) {
            Some(h) => (h, true),
            None => (self.users.values().next().expect("users not empty"), false),
        };
        let ok = {
            let _one = self.bcrypt.lock().unwrap_or_else(|e| e.into_inner());
            bcrypt::verify(&pass, hash).unwrap_or(false)
        };
        if ok && known {
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if cache.len() >= CACHE {
                cache.pop_front();
            }
            cache.push_back((user, pass));
        }
        ok && known
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzzing::fuzz;

    const HASH: &str = "$2y$04$V0fBexP4z3oZ0qk0yRiVhe9ajYRIqqoSZtSzuufxXZeqAPJNSXPEG";

    #[test]
    fn parses_the_toolkit_format_and_refuses_the_rest() {
        let c = WebConfig::parse(
            &format!(
                "# web\ntls_server_config:\n  cert_file: tls.crt\n  key_file: \"/k/tls.key\"  # key\n\
                 basic_auth_users:\n  alice: {HASH}\n  'bob': '{HASH}'\n"
            ),
            Path::new("/etc/pw"),
        )
        .unwrap();
        assert_eq!(c.tls, Some(("/etc/pw/tls.crt".into(), "/k/tls.key".into())));
        assert_eq!(c.users.len(), 2);
        let e = |t: &str| WebConfig::parse(t, Path::new("/")).unwrap_err().to_string();
        assert_eq!(
            e("tls_server_config:\n  client_auth_type: RequireAndVerifyClientCert\n"),
            "line 2: unsupported tls_server_config setting client_auth_type"
        );
        assert_eq!(
            e("http_server_config:\n"),
            "line 1: unsupported setting http_server_config"
        );
        assert!(e("basic_auth_users:\n  a: secret\n").contains("not a bcrypt hash"));
        let costly = HASH.replace("$04$", "$15$");
        assert!(e(&format!("basic_auth_users:\n  a: {costly}\n")).contains("cost 15 above 14"));
        assert_eq!(
            e("tls_server_config:\n  cert_file: a\n"),
            "line 0: tls_server_config needs cert_file and key_file"
        );
        assert_eq!(
            WebConfig::parse("", Path::new("/")).unwrap(),
            WebConfig::default()
        );
        // The example shipped in contrib/.
        let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/../../contrib/web.yml");
        let c = WebConfig::parse(
            &std::fs::read_to_string(shipped).unwrap(),
            Path::new("/etc/pagewise"),
        )
        .unwrap();
        assert_eq!(
            c.tls,
            Some((
                "/etc/pagewise/tls.crt".into(),
                "/etc/pagewise/tls.key".into()
            ))
        );
    }

    #[test]
    fn basic_auth_checks_and_caches() {
        let mut users = BTreeMap::new();
        users.insert("alice".to_string(), bcrypt::hash("s3cret", 4).unwrap());
        let a = BasicAuth::new(&users).unwrap();
        let h = |u: &str, p: &str| {
            let raw = format!("{u}:{p}");
            // std has no base64 encoder: build one from the decoder's alphabet.
            const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            let mut s = String::new();
            for c in raw.as_bytes().chunks(3) {
                let n = (c[0] as u32) << 16
                    | (*c.get(1).unwrap_or(&0) as u32) << 8
                    | *c.get(2).unwrap_or(&0) as u32;
                for i in 0..4 {
                    if i <= c.len() {
                        s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
                    } else {
                        s.push('=');
                    }
                }
            }
            format!("Basic {s}")
        };
        assert!(a.allows(Some(&h("alice", "s3cret"))));
        assert!(a.allows(Some(&h("alice", "s3cret")))); // cached
        assert_eq!(a.cache.lock().unwrap().len(), 1);
        assert!(!a.allows(Some(&h("alice", "wrong"))));
        assert!(!a.allows(Some(&h("bob", "s3cret"))));
        assert!(!a.allows(None));
        assert!(!a.allows(Some("Bearer x")));
        assert_eq!(base64_decode("YWxpY2U6cw=="), Some(b"alice:s".to_vec()));
        assert_eq!(a.cache.lock().unwrap().len(), 1);
    }

    /// Web config files and Authorization values of any text: parsed or refused, never a panic.
    #[test]
    fn fuzz_web_config_and_authorization() {
        use proptest::prelude::*;
        let key = prop_oneof![
            Just("tls_server_config:".to_string()),
            Just("basic_auth_users:".to_string()),
            Just("  cert_file:".to_string()),
            Just("  key_file:".to_string()),
            Just(format!("  u: {HASH}")),
            "[ ]{0,3}[a-z_'\"]{0,10}:?",
        ];
        let line = (key, "[ -~\t]{0,20}").prop_map(|(k, v)| format!("{k}{v}"));
        let file = prop_oneof![
            proptest::collection::vec(line, 0..10).prop_map(|l| l.join("\n")),
            any::<String>(),
        ];
        fuzz("web-config", 512, file, |t| {
            if let Ok(c) = WebConfig::parse(&t, Path::new("/d")) {
                assert!(c.users.len() <= MAX_USERS);
                assert!(c.users.values().all(|h| bcrypt_cost(h).is_ok()));
            }
        });
        let auth = prop_oneof![any::<String>(), "(Basic|basic|Bearer) [A-Za-z0-9+/=]{0,40}",];
        fuzz("authorization", 512, auth, |t| {
            if let Some((u, _)) = basic_credentials(&t) {
                assert!(!u.contains(':'));
            }
        });
    }
}
