//! Registry credentials: from the environment, else from the Docker config
//! file (`$DOCKER_CONFIG/config.json`, default `~/.docker/config.json`,
//! its `auths` entry for the registry). The password never leaves this
//! type except into a request: `Debug` and `Display` print it redacted,
//! and no message built from a request includes it.

use std::path::PathBuf;

use base64::Engine as _;

/// User name for every registry (with [`PASSWORD_ENV`]).
pub const USER_ENV: &str = "REHEARSE_REGISTRY_USER";
/// Password for every registry (with [`USER_ENV`]).
pub const PASSWORD_ENV: &str = "REHEARSE_REGISTRY_PASSWORD";

/// A user name and a password for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name (not secret).
    pub user: String,
    password: String,
    /// Where they came from, for messages (`REHEARSE_REGISTRY_USER`, `~/.docker/config.json`).
    pub origin: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Credentials({} from {}, password redacted)",
            self.user, self.origin
        )
    }
}

impl Credentials {
    /// The password, for a request header only.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// Credentials made up by a test.
    #[cfg(test)]
    pub fn for_test(user: &str, password: &str) -> Credentials {
        Credentials {
            user: user.into(),
            password: password.into(),
            origin: "test".into(),
        }
    }

    /// For bollard's pull and push.
    pub fn for_engine(&self, registry: &str) -> bollard::auth::DockerCredentials {
        bollard::auth::DockerCredentials {
            username: Some(self.user.clone()),
            password: Some(self.password.clone()),
            serveraddress: Some(registry.to_owned()),
            ..Default::default()
        }
    }
}

fn config_path() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".docker").join("config.json"))
}

/// The credentials for `registry` (`HOST:PORT`), if any are configured.
pub fn lookup(registry: &str) -> Option<Credentials> {
    if let Some(given) = from_env(
        std::env::var(USER_ENV).ok(),
        std::env::var(PASSWORD_ENV).ok(),
    ) {
        return Some(given);
    }
    let path = config_path()?;
    let text = std::fs::read_to_string(&path).ok()?;
    from_config(&text, registry, &path.display().to_string())
}

/// The credentials the two variables give: both set and not empty (a CI
/// secret that is not configured still sets its variable, to nothing;
/// the config file then decides).
fn from_env(user: Option<String>, password: Option<String>) -> Option<Credentials> {
    let (user, password) = (
        user.filter(|v| !v.is_empty())?,
        password.filter(|v| !v.is_empty())?,
    );
    Some(Credentials {
        user,
        password,
        origin: USER_ENV.into(),
    })
}

/// The `auths` entry of a Docker config file for `registry`.
pub fn from_config(text: &str, registry: &str, origin: &str) -> Option<Credentials> {
    let config: serde_json::Value = serde_json::from_str(text).ok()?;
    let auths = config.get("auths")?.as_object()?;
    let entry = auths.iter().find_map(|(key, value)| {
        let host = key
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default();
        (host == registry).then_some(value)
    })?;
    let field = |k: &str| {
        entry
            .get(k)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
    };
    let (user, password) = match (field("username"), field("password"), field("auth")) {
        (Some(u), Some(p), _) => (u.to_owned(), p.to_owned()),
        (_, _, Some(auth)) => {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(auth)
                .ok()?;
            let decoded = String::from_utf8(decoded).ok()?;
            let (u, p) = decoded.split_once(':')?;
            (u.to_owned(), p.to_owned())
        }
        _ => return None,
    };
    Some(Credentials {
        user,
        password,
        origin: origin.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_variables_are_no_credentials() {
        let some = |v: &str| Some(v.to_owned());
        let given = from_env(some("ci"), some("s3cret")).expect("both set");
        assert_eq!(
            (given.user.as_str(), given.origin.as_str()),
            ("ci", USER_ENV)
        );
        for (user, password) in [
            (some(""), some("")),
            (some("ci"), some("")),
            (some(""), some("s3cret")),
            (None, some("s3cret")),
            (some("ci"), None),
        ] {
            assert!(
                from_env(user.clone(), password.clone()).is_none(),
                "{user:?} {password:?}"
            );
        }
    }

    #[test]
    fn config_auths_are_read_and_the_password_never_printed() {
        // "release:s3cret" in base64
        let text = r#"{"auths":{"127.0.0.1:5000":{"auth":"cmVsZWFzZTpzM2NyZXQ="},
                       "https://other:443/v1/":{"username":"u","password":"p"}}}"#;
        let c = from_config(text, "127.0.0.1:5000", "config.json").unwrap();
        assert_eq!((c.user.as_str(), c.password()), ("release", "s3cret"));
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("s3cret") && shown.contains("redacted"),
            "{shown}"
        );
        let c = from_config(text, "other:443", "config.json").unwrap();
        assert_eq!((c.user.as_str(), c.password()), ("u", "p"));
        assert!(from_config(text, "127.0.0.1:5001", "x").is_none());
        assert!(from_config("not json", "127.0.0.1:5000", "x").is_none());
        assert!(from_config(r#"{"auths":{"h:1":{"auth":"!!"}}}"#, "h:1", "x").is_none());
    }
}
