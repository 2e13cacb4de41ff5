//! Running `initdb` and `postgres` as an unprivileged user when we are
//! root (PostgreSQL refuses to run as root): which user, whether it can
//! reach the temp dir, and handing it the cluster's directory.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::{PgError, io_err};

/// The unprivileged user `initdb` and `postgres` run as when we are root.
#[derive(Clone, Copy, Debug)]
pub(super) struct RunAs {
    pub(super) uid: u32,
    pub(super) gid: u32,
}

pub(super) fn run_as() -> Result<Option<RunAs>, PgError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    ["postgres", "nobody"]
        .into_iter()
        .filter_map(lookup_user)
        .find(|user| user.uid != 0)
        .map(Some)
        .ok_or(PgError::NoUnprivilegedUser)
}

/// Looks a user up in the password database (nix uses `getpwnam_r`, the
/// re-entrant form: tests start clusters from many threads at once).
pub(super) fn lookup_user(name: &str) -> Option<RunAs> {
    let user = nix::unistd::User::from_name(name).ok()??;
    Some(RunAs {
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
    })
}

/// Checks that `user` can traverse every ancestor of `base`, so that a
/// TMPDIR such as /root/tmp yields a clear error instead of a confusing
/// initdb failure.
pub(super) fn check_traversable(base: &Path, user: RunAs) -> Result<(), PgError> {
    match first_blocked(base, user) {
        None => Ok(()),
        Some(dir) => Err(io_err(
            format!(
                "use temp dir {} because uid {} (PostgreSQL's user, since it refuses to run \
                 as root) cannot enter {}; set TMPDIR to a world-accessible directory such \
                 as /tmp",
                base.display(),
                user.uid,
                dir.display()
            ),
            io::Error::from(io::ErrorKind::PermissionDenied),
        )),
    }
}

/// The outermost directory on the way to `path` (itself included) that
/// `user` may not enter, if any.
pub(super) fn first_blocked(path: &Path, user: RunAs) -> Option<PathBuf> {
    let mut ancestors: Vec<&Path> = path.ancestors().collect();
    ancestors.reverse();
    ancestors.into_iter().find_map(|dir| {
        let meta = fs::metadata(dir).ok()?;
        let mode = meta.permissions().mode();
        let ok = mode & 0o001 != 0
            || (std::os::unix::fs::MetadataExt::uid(&meta) == user.uid && mode & 0o100 != 0)
            || (std::os::unix::fs::MetadataExt::gid(&meta) == user.gid && mode & 0o010 != 0);
        (!ok).then(|| dir.to_path_buf())
    })
}

/// Hands `path` and everything below it to `user`, making directories
/// readable so the files can be inspected after [`Cluster::keep`].
pub(super) fn chown_tree(path: &Path, user: RunAs) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(user.uid), Some(user.gid))?;
    let meta = fs::symlink_metadata(path)?;
    if meta.is_dir() {
        let mode = meta.permissions().mode() | 0o755;
        fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
        for entry in fs::read_dir(path)? {
            chown_tree(&entry?.path(), user)?;
        }
    }
    Ok(())
}
