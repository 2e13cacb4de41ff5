//! The root filesystem of an image with no base image: the `awa` binary,
//! the shared objects it links (resolved from the binary itself), and the
//! few files a process needs in an otherwise empty root.
//!
//! The binary's ELF program headers name its loader (`PT_INTERP`); the
//! loader's `--list` mode resolves every shared object exactly as it will
//! be resolved at run time, so the image holds precisely what the binary
//! loads. A static binary has no loader and needs nothing beside it.
//!
//! Every entry is owned by root, dated 0, and written in a fixed order, so
//! the same binary always gives the same layer (and the same layer digest).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the binary sits in the image; also the image's entrypoint.
pub const BINARY_PATH: &str = "/usr/local/bin/awa";
/// The non-root user every container runs as (`/etc/passwd` names it `awa`).
pub const USER_ID: u32 = 10001;

const PASSWD: &str =
    "root:x:0:0:root:/root:/sbin/nologin\nawa:x:10001:10001:awa runtime:/tmp:/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nawa:x:10001:\n";
// `localhost` must resolve in an empty root (database URLs may use it).
const HOSTS: &str = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
const NSSWITCH: &str = "hosts: files dns\n";

/// Why a root filesystem could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum RootfsError {
    /// A file could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The binary is not a 64-bit little-endian ELF executable.
    #[error("{} is not an x86-64 ELF executable ({why})", path.display())]
    NotElf {
        /// The binary.
        path: PathBuf,
        /// What was wrong.
        why: &'static str,
    },
    /// The loader could not list the binary's shared objects.
    #[error("the loader {loader} could not list the shared objects of {}: {detail}", binary.display())]
    List {
        /// The loader named by the binary.
        loader: String,
        /// The binary.
        binary: PathBuf,
        /// Its complaint.
        detail: String,
    },
}

/// One shared object the binary loads, at the path the loader found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedObject {
    /// The absolute path, which is also its path inside the image.
    pub path: PathBuf,
}

/// What went into a root filesystem, for the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rootfs {
    /// The tar archive itself.
    pub tar: Vec<u8>,
    /// The loader, for a dynamic binary.
    pub loader: Option<PathBuf>,
    /// Shared objects copied beside the binary (loader included).
    pub libraries: Vec<SharedObject>,
}

/// Reads the `PT_INTERP` path of an ELF executable: `None` for a static one.
pub fn interpreter(binary: &Path, bytes: &[u8]) -> Result<Option<String>, RootfsError> {
    let bad = |why| RootfsError::NotElf {
        path: binary.to_owned(),
        why,
    };
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" {
        return Err(bad("no ELF magic"));
    }
    if bytes[4] != 2 || bytes[5] != 1 {
        return Err(bad("not 64-bit little-endian"));
    }
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
    let u64_at = |o: usize| -> Option<usize> {
        let raw: [u8; 8] = bytes.get(o..o + 8)?.try_into().ok()?;
        usize::try_from(u64::from_le_bytes(raw)).ok()
    };
    let phoff = u64_at(0x20).ok_or_else(|| bad("truncated header"))?;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    const PT_INTERP: u32 = 3;
    for i in 0..phnum {
        let at = phoff + i * phentsize;
        let header = bytes
            .get(at..at + 56)
            .ok_or_else(|| bad("truncated program headers"))?;
        let kind = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
        if kind != PT_INTERP {
            continue;
        }
        let (offset, size) = (
            u64_at(at + 8).ok_or_else(|| bad("truncated program headers"))?,
            u64_at(at + 32).ok_or_else(|| bad("truncated program headers"))?,
        );
        let raw = bytes
            .get(offset..offset + size)
            .ok_or_else(|| bad("interpreter path out of bounds"))?;
        let text = String::from_utf8_lossy(raw);
        return Ok(Some(text.trim_end_matches('\0').to_owned()));
    }
    Ok(None)
}

/// Parses the loader's `--list` output into absolute paths.
///
/// Lines look like `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)`,
/// `/lib64/ld-linux-x86-64.so.2 (0x...)`, or `linux-vdso.so.1 (0x...)`
/// (the kernel's, not a file: skipped). `not found` is an error.
// A String: its one caller words it into the image build's error.
pub fn parse_list(text: &str) -> Result<Vec<PathBuf>, String> {
    let mut paths = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let target = match line.split_once("=>") {
            Some((name, rest)) => {
                let rest = rest.trim();
                if rest.starts_with("not found") {
                    return Err(format!("{} not found", name.trim()));
                }
                rest.split_whitespace().next().unwrap_or_default()
            }
            None => line.split_whitespace().next().unwrap_or_default(),
        };
        if target.starts_with('/') {
            let path = PathBuf::from(target);
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
    }
    Ok(paths)
}

fn shared_objects(binary: &Path, loader: &str) -> Result<Vec<PathBuf>, RootfsError> {
    let fail = |detail: String| RootfsError::List {
        loader: loader.to_owned(),
        binary: binary.to_owned(),
        detail,
    };
    let out = Command::new(loader)
        .arg("--list")
        .arg(binary)
        .env_clear()
        .output()
        .map_err(|e| fail(e.to_string()))?;
    if !out.status.success() {
        return Err(fail(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let mut paths = parse_list(&String::from_utf8_lossy(&out.stdout)).map_err(fail)?;
    let loader = PathBuf::from(loader);
    if !paths.contains(&loader) {
        paths.push(loader);
    }
    Ok(paths)
}

/// Assembles the root filesystem for `binary`.
pub fn assemble(binary: &Path) -> Result<Rootfs, RootfsError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| RootfsError::Read {
            path: path.to_owned(),
            source,
        })
    };
    let program = read(binary)?;
    let loader = interpreter(binary, &program)?;
    let libraries = match &loader {
        Some(loader) => shared_objects(binary, loader)?,
        None => Vec::new(),
    };
    let mut tar = Writer::default();
    for dir in ["etc", "tmp", "usr", "usr/local", "usr/local/bin"] {
        tar.dir(dir, if dir == "tmp" { 0o1777 } else { 0o755 });
    }
    tar.file("etc/passwd", PASSWD.as_bytes(), 0o644);
    tar.file("etc/group", GROUP.as_bytes(), 0o644);
    tar.file("etc/hosts", HOSTS.as_bytes(), 0o644);
    tar.file("etc/nsswitch.conf", NSSWITCH.as_bytes(), 0o644);
    tar.file(BINARY_PATH.trim_start_matches('/'), &program, 0o755);
    let mut made: Vec<PathBuf> = Vec::new();
    for lib in &libraries {
        let inside = lib.strip_prefix("/").unwrap_or(lib);
        for parent in inside
            .ancestors()
            .skip(1)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            if parent.as_os_str().is_empty() || made.iter().any(|m| m == parent) {
                continue;
            }
            if !["etc", "tmp", "usr", "usr/local", "usr/local/bin"]
                .iter()
                .any(|d| Path::new(d) == parent)
            {
                tar.dir(&parent.to_string_lossy(), 0o755);
            }
            made.push(parent.to_owned());
        }
        // The file the path resolves to, stored under the path itself.
        tar.file(&inside.to_string_lossy(), &read(lib)?, 0o755);
    }
    Ok(Rootfs {
        tar: tar.finish(),
        loader: loader.map(PathBuf::from),
        libraries: libraries
            .into_iter()
            .map(|path| SharedObject { path })
            .collect(),
    })
}

/// A tar writer with fixed owners and dates.
#[derive(Default)]
struct Writer {
    inner: Option<tar::Builder<Vec<u8>>>,
}

impl Writer {
    fn builder(&mut self) -> &mut tar::Builder<Vec<u8>> {
        self.inner
            .get_or_insert_with(|| tar::Builder::new(Vec::new()))
    }

    fn header(kind: tar::EntryType, size: u64, mode: u32) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h
    }

    fn dir(&mut self, path: &str, mode: u32) {
        let mut h = Self::header(tar::EntryType::Directory, 0, mode);
        // Writing into a Vec cannot fail.
        self.builder()
            .append_data(&mut h, format!("{path}/"), std::io::empty())
            .expect("tar into memory");
    }

    fn file(&mut self, path: &str, data: &[u8], mode: u32) {
        let mut h = Self::header(tar::EntryType::Regular, data.len() as u64, mode);
        self.builder()
            .append_data(&mut h, path, data)
            .expect("tar into memory");
    }

    fn finish(mut self) -> Vec<u8> {
        self.builder();
        self.inner
            .take()
            .expect("just made")
            .into_inner()
            .expect("tar into memory")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loader_lists_are_parsed() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f5f)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f5e)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f5f)\n";
        assert_eq!(
            parse_list(text).unwrap(),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        let missing = "\tlibfoo.so.1 => not found\n";
        assert_eq!(parse_list(missing).unwrap_err(), "libfoo.so.1 not found");
        assert!(parse_list("").unwrap().is_empty());
    }

    #[test]
    fn not_an_elf_is_refused() {
        let err = interpreter(Path::new("/x"), b"#!/bin/sh\necho hi\n").unwrap_err();
        assert!(err.to_string().contains("no ELF magic"), "{err}");
    }

    #[test]
    fn a_dynamic_binary_brings_its_loader_and_libraries() {
        // This test binary itself is dynamic, like a release build of awa.
        let me = std::env::current_exe().unwrap();
        let bytes = std::fs::read(&me).unwrap();
        let loader = interpreter(&me, &bytes)
            .unwrap()
            .expect("a dynamic test binary");
        assert!(
            loader.starts_with('/') && loader.contains("ld-linux"),
            "{loader}"
        );
        let fs = assemble(&me).unwrap();
        assert!(
            fs.libraries.iter().any(|l| l.path.ends_with("libc.so.6")),
            "{:?}",
            fs.libraries
        );
        let mut archive = tar::Archive::new(fs.tar.as_slice());
        let mut names = Vec::new();
        for entry in archive.entries().unwrap() {
            let entry = entry.unwrap();
            assert_eq!(entry.header().uid().unwrap(), 0);
            assert_eq!(entry.header().mtime().unwrap(), 0);
            names.push(entry.path().unwrap().display().to_string());
        }
        for want in [
            "etc/passwd",
            "etc/hosts",
            "usr/local/bin/awa",
            loader.trim_start_matches('/'),
        ] {
            assert!(
                names.iter().any(|n| n == want),
                "{want} missing from {names:?}"
            );
        }
        // The same binary always gives the same bytes.
        assert_eq!(assemble(&me).unwrap().tar, fs.tar);
    }
}
