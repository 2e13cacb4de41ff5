//! The registry HTTP API (distribution v2) over plain HTTP: tag lists,
//! manifest digests, and the choice of the newest release on a line.
//!
//! Plain HTTP only: rehearse is built without a TLS stack (see
//! PLATFORM.md), which serves the loopback registries release rehearsals
//! use; an engine treats `127.0.0.1:PORT` registries as insecure-allowed.
//! Basic credentials are sent when configured, and a `Bearer` challenge is
//! answered by fetching a token from the realm it names.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{ACCEPT, HeaderMap, LINK, WWW_AUTHENTICATE};

use super::credentials::Credentials;

/// Every manifest kind a pull by digest may resolve to.
pub const MANIFEST_TYPES: &str = "application/vnd.docker.distribution.manifest.v2+json, \
application/vnd.docker.distribution.manifest.list.v2+json, \
application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json";

/// The header a registry announces the manifest digest in.
pub const DIGEST_HEADER: &str = "Docker-Content-Digest";

/// What a registry did wrong, or failed to do.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// No answer (refused, timed out, not HTTP): infrastructure.
    #[error("no answer ({0}); start the registry or check the address")]
    Down(String),
    /// It refused the credentials, or wants some: bad input.
    #[error(
        "refused access ({status}); set {user} and {password}, or add the registry to the Docker config file (docker login)",
        user = super::credentials::USER_ENV,
        password = super::credentials::PASSWORD_ENV
    )]
    Refused {
        /// 401 or 403.
        status: StatusCode,
    },
    /// The repository or manifest does not exist: bad input.
    #[error("{what} not found")]
    NotFound {
        /// What was asked for.
        what: String,
    },
    /// Any other answer.
    #[error("unexpected answer to {what}: {status}")]
    Unexpected {
        /// What was asked for.
        what: String,
        /// The status.
        status: StatusCode,
    },
    /// The manifest's bytes do not hash to the digest announced.
    #[error("manifest {reference} hashes to {actual}, but the registry announced {announced}")]
    Tampered {
        /// The tag or digest asked for.
        reference: String,
        /// Docker-Content-Digest.
        announced: String,
        /// sha256 of the body.
        actual: String,
    },
}

impl RegistryError {
    /// True when the cause is the machine (the registry is down), not the input.
    pub fn is_infrastructure(&self) -> bool {
        matches!(
            self,
            RegistryError::Down(_) | RegistryError::Unexpected { .. }
        )
    }
}

/// A client for one registry.
#[derive(Clone, Debug)]
pub struct Registry {
    /// `HOST:PORT`.
    pub host: String,
    client: reqwest::Client,
    credentials: Option<Credentials>,
}

/// A registry as rehearse talks to one: `HOST:PORT`, plain HTTP (a
/// loopback registry). Checked where it is typed, so a registry that
/// doctor accepts is one publish accepts.
// A String: `--registry`'s value parser hands it to clap, which prints it as it is.
pub fn check_host(registry: &str) -> Result<(), String> {
    match registry.rsplit_once(':') {
        Some((host, port))
            if !host.is_empty()
                && !host.contains('/')
                && port.parse::<u16>().is_ok_and(|p| p > 0) =>
        {
            Ok(())
        }
        Some((_, port)) if port.parse::<u16>().is_err() => Err(format!(
            "\"{registry}\" is not HOST:PORT: \"{port}\" is not a port (like 127.0.0.1:5000)"
        )),
        _ => Err(format!(
            "\"{registry}\" is not HOST:PORT: give the port too (like {}:5000)",
            registry.trim_end_matches(':')
        )),
    }
}

/// `sha256:HEX` of some bytes (a manifest's digest).
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", awa_harness::release::sha256_hex(bytes))
}

/// The `next` target of a `Link` header (`</v2/x/tags/list?last=a&n=100>; rel="next"`).
fn next_link(headers: &HeaderMap) -> Option<String> {
    let link = headers.get(LINK)?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        params.contains("rel=\"next\"").then(|| {
            target
                .trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_owned()
        })
    })
}

/// The parameters of a `Bearer realm="..",service="..",scope=".."` challenge.
fn bearer_challenge(headers: &HeaderMap) -> Option<Vec<(String, String)>> {
    let text = headers.get(WWW_AUTHENTICATE)?.to_str().ok()?;
    let rest = text.strip_prefix("Bearer ")?;
    let mut params = Vec::new();
    for part in rest.split(',') {
        let (k, v) = part.split_once('=')?;
        params.push((k.trim().to_owned(), v.trim().trim_matches('"').to_owned()));
    }
    Some(params)
}

impl Registry {
    /// A client for `host` (`HOST:PORT`) with optional credentials.
    pub fn new(host: &str, credentials: Option<Credentials>) -> Registry {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .no_proxy()
            .build()
            .expect("a plain HTTP client needs no system configuration");
        Registry {
            host: host.to_owned(),
            client,
            credentials,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.host)
    }

    /// GET with credentials, answering one Bearer challenge if the registry sends it.
    async fn get(
        &self,
        path: &str,
        accept: Option<&str>,
    ) -> Result<reqwest::Response, RegistryError> {
        let request = |token: Option<&str>| {
            let mut r = self.client.get(self.url(path));
            if let Some(accept) = accept {
                r = r.header(ACCEPT, accept);
            }
            match (token, &self.credentials) {
                (Some(token), _) => r.bearer_auth(token),
                (None, Some(c)) => r.basic_auth(&c.user, Some(c.password())),
                (None, None) => r,
            }
        };
        let down = |e: reqwest::Error| RegistryError::Down(without_url(&e));
        let first = request(None).send().await.map_err(down)?;
        if first.status() != StatusCode::UNAUTHORIZED {
            return Ok(first);
        }
        let Some(params) = bearer_challenge(first.headers()) else {
            return Ok(first);
        };
        let token = self.token(&params).await?;
        request(Some(&token)).send().await.map_err(down)
    }

    async fn token(&self, params: &[(String, String)]) -> Result<String, RegistryError> {
        let realm = params
            .iter()
            .find(|(k, _)| k == "realm")
            .map(|(_, v)| v.clone())
            .ok_or(RegistryError::Refused {
                status: StatusCode::UNAUTHORIZED,
            })?;
        let query: Vec<(&str, &str)> = params
            .iter()
            .filter(|(k, _)| k != "realm")
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let url =
            reqwest::Url::parse_with_params(&realm, query).map_err(|_| RegistryError::Refused {
                status: StatusCode::UNAUTHORIZED,
            })?;
        let mut r = self.client.get(url);
        if let Some(c) = &self.credentials {
            r = r.basic_auth(&c.user, Some(c.password()));
        }
        let response = r
            .send()
            .await
            .map_err(|e| RegistryError::Down(without_url(&e)))?;
        if !response.status().is_success() {
            return Err(RegistryError::Refused {
                status: response.status(),
            });
        }
        let body: serde_json::Value = response
            .json()
            .await
            .map_err(|e| RegistryError::Down(without_url(&e)))?;
        body.get("token")
            .or_else(|| body.get("access_token"))
            .and_then(|t| t.as_str())
            .map(str::to_owned)
            .ok_or(RegistryError::Refused {
                status: StatusCode::UNAUTHORIZED,
            })
    }

    fn check(status: StatusCode, what: &str) -> Result<(), RegistryError> {
        match status {
            s if s.is_success() => Ok(()),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                Err(RegistryError::Refused { status })
            }
            StatusCode::NOT_FOUND => Err(RegistryError::NotFound {
                what: what.to_owned(),
            }),
            status => Err(RegistryError::Unexpected {
                what: what.to_owned(),
                status,
            }),
        }
    }

    /// Every tag of `repository`, following pagination.
    pub async fn tags(&self, repository: &str) -> Result<Vec<String>, RegistryError> {
        let what = format!("repository {repository}");
        let mut path = format!("/v2/{repository}/tags/list?n=1000");
        let mut tags = Vec::new();
        loop {
            let response = self.get(&path, None).await?;
            Self::check(response.status(), &what)?;
            let next = next_link(response.headers());
            let body: serde_json::Value = response
                .json()
                .await
                .map_err(|e| RegistryError::Down(without_url(&e)))?;
            if let Some(list) = body.get("tags").and_then(|t| t.as_array()) {
                tags.extend(list.iter().filter_map(|t| t.as_str().map(str::to_owned)));
            }
            match next {
                Some(next) if next.starts_with('/') => path = next,
                _ => return Ok(tags),
            }
        }
    }

    /// The digest of the manifest `reference` (a tag or a digest) names,
    /// checked against the bytes the registry serves.
    pub async fn manifest_digest(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<String, RegistryError> {
        let what = format!("manifest {repository}:{reference}");
        let response = self
            .get(
                &format!("/v2/{repository}/manifests/{reference}"),
                Some(MANIFEST_TYPES),
            )
            .await?;
        Self::check(response.status(), &what)?;
        let announced = response
            .headers()
            .get(DIGEST_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response
            .bytes()
            .await
            .map_err(|e| RegistryError::Down(without_url(&e)))?;
        let actual = digest_of(&body);
        match announced {
            Some(announced) if announced != actual => Err(RegistryError::Tampered {
                reference: reference.to_owned(),
                announced,
                actual,
            }),
            _ => Ok(actual),
        }
    }
}

/// A reqwest error with its causes but without its URL (no query string in a message).
fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text
            .replace(&format!(" ({url})"), "")
            .replace(url.as_str(), "the registry");
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

/// The release line and floor an artifact asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineQuery {
    /// `(major, minor)`: `0.6`.
    pub line: (u64, u64),
    /// The lowest acceptable release.
    pub floor: Option<semver::Version>,
    /// Whether pre-releases (`0.6.3-rc.1`) may be chosen.
    pub prerelease: bool,
}

/// The newest tag on the line, at or above the floor; tags that are not
/// versions (`latest`, `0.6`) are ignored.
pub fn select(tags: &[String], query: &LineQuery) -> Option<String> {
    tags.iter()
        .filter_map(|t| semver::Version::parse(t).ok().map(|v| (v, t)))
        .filter(|(v, _)| (v.major, v.minor) == query.line)
        .filter(|(v, _)| query.prerelease || v.pre.is_empty())
        .filter(|(v, _)| v.build.is_empty())
        .filter(|(v, _)| query.floor.as_ref().is_none_or(|f| v >= f))
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, t)| t.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::credentials::Credentials;

    fn tags(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn q(floor: Option<&str>, prerelease: bool) -> LineQuery {
        LineQuery {
            line: (0, 6),
            floor: floor.map(|f| semver::Version::parse(f).unwrap()),
            prerelease,
        }
    }

    #[test]
    fn the_newest_release_on_the_line_at_or_above_the_floor() {
        let t = tags(&[
            "0.6.1",
            "0.6.10",
            "0.6.2",
            "0.7.0",
            "latest",
            "0.6",
            "0.6.11-rc.1",
            "0.7.0-c861534-dirty",
        ]);
        assert_eq!(
            select(&t, &q(Some("0.6.2"), false)).as_deref(),
            Some("0.6.10")
        );
        assert_eq!(select(&t, &q(None, true)).as_deref(), Some("0.6.11-rc.1"));
        assert_eq!(select(&t, &q(Some("0.6.11"), false)), None);
        assert_eq!(select(&tags(&["0.6.1"]), &q(Some("0.6.2"), false)), None);
        assert_eq!(
            select(&tags(&["0.6.2", "0.6.1"]), &q(Some("0.6.2"), false)).as_deref(),
            Some("0.6.2")
        );
        assert_eq!(select(&[], &q(None, false)), None);
    }

    #[test]
    fn link_headers_and_challenges_are_read() {
        let mut h = HeaderMap::new();
        h.insert(
            LINK,
            "</v2/awa/tags/list?last=0.6.2&n=2>; rel=\"next\""
                .parse()
                .unwrap(),
        );
        assert_eq!(
            next_link(&h).as_deref(),
            Some("/v2/awa/tags/list?last=0.6.2&n=2")
        );
        h.insert(
            WWW_AUTHENTICATE,
            "Bearer realm=\"http://127.0.0.1:9/token\",service=\"reg\",scope=\"repository:awa:pull\""
                .parse()
                .unwrap(),
        );
        let p = bearer_challenge(&h).unwrap();
        assert_eq!(p[0], ("realm".into(), "http://127.0.0.1:9/token".into()));
        assert_eq!(p[2], ("scope".into(), "repository:awa:pull".into()));
    }

    #[test]
    fn digests_are_sha256_of_the_bytes() {
        assert_eq!(
            digest_of(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    /// A one-shot HTTP server answering every request with `response`,
    /// standing in for a registry that misbehaves in one precise way.
    fn answer_with(response: &'static str) -> String {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for stream in listener.incoming().take(4) {
                let Ok(mut stream) = stream else { return };
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(response.as_bytes());
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_manifest_that_does_not_hash_to_its_announced_digest_is_refused() {
        let host = answer_with(
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\
             Docker-Content-Digest: sha256:0000000000000000000000000000000000000000000000000000000000000000\r\n\r\n{}",
        );
        let err = Registry::new(&host, None)
            .manifest_digest("awa-runtime", "0.6.2")
            .await
            .unwrap_err();
        assert!(matches!(err, RegistryError::Tampered { .. }), "{err}");
        assert!(err.to_string().contains(&digest_of(b"{}")), "{err}");
    }

    #[tokio::test]
    async fn a_registry_that_refuses_is_bad_input_saying_how_to_log_in() {
        let host = answer_with(
            "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\
             WWW-Authenticate: Basic realm=\"registry\"\r\n\r\n",
        );
        let secret = Credentials::for_test("release", "s3cret");
        let err = Registry::new(&host, Some(secret))
            .tags("awa-runtime")
            .await
            .unwrap_err();
        assert!(!err.is_infrastructure(), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("refused access (401 Unauthorized)")
                && text.contains(super::super::credentials::USER_ENV),
            "{text}"
        );
        assert!(!text.contains("s3cret"), "{text}");
    }

    #[tokio::test]
    async fn a_registry_that_is_down_is_infrastructure() {
        // A port nothing listens on: bind, learn it, close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let r = Registry::new(&format!("127.0.0.1:{port}"), None);
        let err = r.tags("awa-runtime").await.unwrap_err();
        assert!(err.is_infrastructure(), "{err}");
        assert!(err.to_string().starts_with("no answer"), "{err}");
    }
}
