//! Files on the volume shared with other containers: atomic replacement through unpredictable,
//! exclusively created temp files, and bounded reads that never block and never follow a link.
//!
//! The shared directory is writable by every container that mounts it, so nothing here trusts
//! what it finds there: a writer never opens a name another process could have prepared (a
//! symlink to elsewhere, a FIFO), and a reader never blocks on a FIFO, never follows a symlink
//! and never reads more than a small cap — a reader that blocked would freeze the supervisor's
//! single-threaded runtime and with it the dead man's switch.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::{fchmod, Mode};

/// Largest file [`read_capped`] callers accept by default; real grant, ack and token objects
/// are a few hundred bytes.
pub const MAX_READ: u64 = 64 * 1024;

/// How many unpredictable temp names are tried before giving up; a collision needs another
/// process to guess 64 random bits, so more than one try only happens under attack.
const TEMP_ATTEMPTS: usize = 4;

/// Replaces `path` with `contents`, mode 0644: see [`write_with_mode`].
pub fn write(path: &Path, contents: &[u8]) -> io::Result<()> {
    write_with_mode(path, contents, 0o644)
}

/// Replaces `path` with `contents`: writes a temp file with an unpredictable name in the same
/// directory (created with `O_EXCL | O_NOFOLLOW`, so nothing prepared there is ever opened),
/// sets `mode` with `fchmod` (exact, whatever the umask), fsyncs it, renames it over `path` and
/// fsyncs the directory. Readers see the old content or the new, never a torn write.
pub fn write_with_mode(path: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
    let dir = parent_dir(path);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let (tmp, mut file) = create_temp(dir, name)?;
    let result = (|| {
        // The file was created 0600 (less the umask): only now does it get its real mode, set
        // exactly, so a umask of 077 cannot make a 0755 binary unexecutable for others.
        fchmod(file.as_fd(), Mode::from_bits_truncate(mode)).map_err(io::Error::from)?;
        file.write_all(contents)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)?;
        // The rename is durable only once the directory entry is on disk.
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Creates `.NAME.tmp.RANDOM` in `dir` exclusively; retries only on a name collision.
fn create_temp(dir: &Path, name: &std::ffi::OsStr) -> io::Result<(PathBuf, File)> {
    let mut last = io::Error::other("no temp file attempt made");
    for _ in 0..TEMP_ATTEMPTS {
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".tmp.{:016x}", random_u64()?));
        let tmp = dir.join(tmp_name);
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC).bits())
            .open(&tmp)
        {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// 64 bits from the kernel's CSPRNG (getrandom, via ring). No fallback: a predictable temp
/// name in a shared directory is exactly what this module exists to avoid.
fn random_u64() -> io::Result<u64> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 8];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| io::Error::other("the kernel's random number generator is unavailable"))?;
    Ok(u64::from_le_bytes(bytes))
}

/// Reads `path` whole if it is a regular file of at most `max` bytes; `Ok(None)` when it does
/// not exist. Opened with `O_NOFOLLOW | O_NONBLOCK`, checked with `fstat` before any read: a
/// symlink, a FIFO, a device or a directory is an error, never a wait, and so is a larger file.
pub fn read_capped(path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    match open_for_read(path)? {
        Some(file) => read_open_file(file, max).map(Some),
        None => Ok(None),
    }
}

/// The checks and the bounded read of [`read_capped`] on a file opened by [`open_for_read`].
pub fn read_open_file(file: File, max: u64) -> io::Result<Vec<u8>> {
    let meta = file.metadata()?;
    check_regular(&meta, max)?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // The file may grow between fstat and read: never take more than the cap.
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_large(max));
    }
    Ok(bytes)
}

/// Errors unless `meta` is a regular file of at most `max` bytes.
pub fn check_regular(meta: &fs::Metadata, max: u64) -> io::Result<()> {
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file (a FIFO, device, socket or directory is never read)",
        ));
    }
    if meta.len() > max {
        return Err(too_large(max));
    }
    Ok(())
}

fn too_large(max: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("larger than {max} bytes, not read"),
    )
}

/// Opens `path` for reading like [`read_capped`] does (no-follow, non-blocking); `Ok(None)` when
/// it does not exist. For callers that must inspect the file (owner, mode) before reading it.
pub fn open_for_read(path: &Path) -> io::Result<Option<File>> {
    match OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits())
        .open(path)
    {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a symbolic link, never followed",
        )),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    #[test]
    fn replaces_whole_file_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        write(&path, b"first, longer content").unwrap();
        write(&path, b"second").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second");
        let entries: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(entries.len(), 1);
    }

    #[test]
    fn mode_is_applied() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bin");
        write_with_mode(&path, b"x", 0o755).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o755
        );
        write_with_mode(&path, b"x", 0o600).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn missing_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(write(&dir.path().join("no/such/f"), b"x").is_err());
    }

    /// The old temp name was `.NAME.tmp.PID`: anyone could plant a symlink there and have the
    /// writer truncate and fill the file it points to.
    #[test]
    fn a_symlink_planted_at_the_old_predictable_temp_name_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, b"precious").unwrap();
        let planted = dir.path().join(format!(".f.tmp.{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let path = dir.path().join("f");
        write(&path, b"new").unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert!(fs::symlink_metadata(&path).unwrap().file_type().is_file());
    }

    #[test]
    fn temp_names_are_unpredictable() {
        let dir = tempfile::tempdir().unwrap();
        let (a, _) = create_temp(dir.path(), std::ffi::OsStr::new("f")).unwrap();
        let (b, _) = create_temp(dir.path(), std::ffi::OsStr::new("f")).unwrap();
        assert_ne!(a, b);
        assert!(!a
            .to_string_lossy()
            .ends_with(&std::process::id().to_string()));
    }

    #[test]
    fn reads_refuse_symlinks_fifos_directories_and_large_files_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        fs::write(&real, b"ok").unwrap();
        assert_eq!(read_capped(&real, 10).unwrap().unwrap(), b"ok");
        assert!(read_capped(&dir.path().join("absent"), 10)
            .unwrap()
            .is_none());

        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = read_capped(&link, 10).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");

        assert!(read_capped(dir.path(), 10).is_err());

        let big = dir.path().join("big");
        fs::File::create(&big).unwrap().set_len(1 << 30).unwrap();
        let e = read_capped(&big, MAX_READ).unwrap_err();
        assert!(e.to_string().contains("larger than"), "{e}");

        // A FIFO with no writer: a blocking open would hang this thread for ever.
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o666)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(
                read_capped(&fifo, 10)
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
            );
        });
        let got = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("reading a FIFO blocked");
        assert!(got.unwrap_err().contains("not a regular file"));
    }
}
