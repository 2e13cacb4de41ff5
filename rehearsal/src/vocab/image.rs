//! Images as every stage names them: references as written in
//! matrix.toml and on the command line (`[REGISTRY/]REPOSITORY[:TAG][@sha256:HEX]`),
//! and the image a run used, as artifacts resolve it, the fleet starts
//! it and the report records it. Building, resolving and pulling them is
//! `image`'s work.
//!
//! The first path component of a reference is a registry when it looks
//! like a host (it has a `.` or a `:`, or is `localhost`), as the engine
//! decides it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A parsed image reference.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reference {
    /// `127.0.0.1:5000`, if the reference names a registry.
    pub registry: Option<String>,
    /// `awa-runtime` (path inside the registry).
    pub repository: String,
    /// `0.6.2`, if given.
    pub tag: Option<String>,
    /// `sha256:...`, if pinned.
    pub digest: Option<String>,
}

/// Whether `text` is a well-formed `sha256:` digest (64 lowercase hex digits).
pub fn is_digest(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn valid_component(c: &str) -> bool {
    !c.is_empty()
        && c.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        && c.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
}

fn valid_tag(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 128
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && !t.starts_with(['.', '-'])
}

impl Reference {
    /// Parses a reference; the error says what is wrong in words for the matrix's diagnostics.
    // A String: every caller puts these words into its own message, and none asks the kind.
    pub fn parse(text: &str) -> Result<Reference, String> {
        if text.is_empty() || text.contains(char::is_whitespace) {
            return Err(
                "an image reference has no spaces, like \"127.0.0.1:5000/awa-runtime:0.6.2\""
                    .into(),
            );
        }
        let (rest, digest) = match text.split_once('@') {
            Some((rest, digest)) => {
                if !is_digest(digest) {
                    return Err(format!(
                        "\"{digest}\" is not a digest; expected sha256: and 64 lowercase hex digits"
                    ));
                }
                (rest, Some(digest.to_owned()))
            }
            None => (text, None),
        };
        let (registry, path) = match rest.split_once('/') {
            Some((first, path)) if first.contains(['.', ':']) || first == "localhost" => {
                (Some(first.to_owned()), path)
            }
            _ => (None, rest),
        };
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repo, tag)) if !tag.contains('/') => (repo, Some(tag.to_owned())),
            _ => (path, None),
        };
        if let Some(tag) = &tag
            && !valid_tag(tag)
        {
            return Err(format!("\"{tag}\" is not a valid tag"));
        }
        if !repository.split('/').all(valid_component) {
            return Err(format!(
                "\"{repository}\" is not a repository name; use lowercase letters, digits, '.', '_', '-' and '/'"
            ));
        }
        if let Some(registry) = &registry
            && registry.contains(':')
            && registry
                .rsplit_once(':')
                .is_none_or(|(_, port)| port.parse::<u16>().is_err())
        {
            return Err(format!("\"{registry}\" is not HOST:PORT"));
        }
        Ok(Reference {
            registry,
            repository: repository.to_owned(),
            tag,
            digest,
        })
    }

    /// `REGISTRY/REPOSITORY` (or `REPOSITORY` for a local one).
    pub fn name(&self) -> String {
        match &self.registry {
            Some(r) => format!("{r}/{}", self.repository),
            None => self.repository.clone(),
        }
    }

    /// `NAME@DIGEST`: what the engine pulls and starts when the digest is known.
    pub fn pinned(&self, digest: &str) -> String {
        format!("{}@{digest}", self.name())
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// How an image came to be on the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Obtained {
    /// Assembled and imported by this run.
    Built,
    /// Already present with the same source digest.
    Reused,
    /// Pulled from a registry by digest.
    Pulled,
}

impl std::fmt::Display for Obtained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Obtained::Built => "built",
            Obtained::Reused => "reused",
            Obtained::Pulled => "pulled",
        })
    }
}

/// One image a run uses, for the fleet and the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageInfo {
    /// The reference the run starts containers from (`awa-runtime:0.6.2`,
    /// or `127.0.0.1:5000/awa-runtime@sha256:...` when pulled).
    pub reference: String,
    /// The engine's image id (`sha256:...`).
    pub id: String,
    /// The registry manifest digest, when the image came from (or went to) a registry.
    #[serde(default)]
    pub digest: Option<String>,
    /// The tag it was found or built under.
    #[serde(default)]
    pub tag: Option<String>,
    /// Built, reused or pulled.
    pub obtained: Obtained,
    /// Size in bytes, as the engine reports it.
    #[serde(default)]
    pub size: u64,
    /// How long building (or pulling) took, when this run did it.
    #[serde(default)]
    pub build_ms: Option<u64>,
    /// The shared objects copied in beside the binary (built images).
    #[serde(default)]
    pub libraries: Vec<String>,
    /// The version label.
    #[serde(default)]
    pub version: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn accepted_references() {
        let r = Reference::parse("127.0.0.1:5000/awa-runtime").unwrap();
        assert_eq!(r.registry.as_deref(), Some("127.0.0.1:5000"));
        assert_eq!(r.repository, "awa-runtime");
        assert_eq!((r.tag, r.digest), (None, None));
        let r = Reference::parse("awa-runtime:0.6.2").unwrap();
        assert_eq!((r.registry, r.tag.as_deref()), (None, Some("0.6.2")));
        let r = Reference::parse(&format!("localhost:5000/team/awa-runtime:0.6@{D}")).unwrap();
        assert_eq!(r.registry.as_deref(), Some("localhost:5000"));
        assert_eq!(r.repository, "team/awa-runtime");
        assert_eq!(r.digest.as_deref(), Some(D));
        assert_eq!(
            r.to_string(),
            format!("localhost:5000/team/awa-runtime:0.6@{D}")
        );
        assert_eq!(r.pinned(D), format!("localhost:5000/team/awa-runtime@{D}"));
        let r = Reference::parse("registry.example/awa").unwrap();
        assert_eq!(r.registry.as_deref(), Some("registry.example"));
    }

    #[test]
    fn rejected_references() {
        for (text, why) in [
            ("", "no spaces"),
            ("awa runtime", "no spaces"),
            ("awa@sha256:abc", "is not a digest"),
            ("Awa-Runtime", "is not a repository name"),
            ("127.0.0.1:5000/awa:", "is not a valid tag"),
            ("127.0.0.1:port/awa", "is not HOST:PORT"),
            ("127.0.0.1:5000/", "is not a repository name"),
        ] {
            let err = Reference::parse(text).expect_err(text);
            assert!(err.contains(why), "{text}: {err}");
        }
    }
}
