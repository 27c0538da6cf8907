//! `copy-self DEST`: places this binary in a shared volume, for images without a shell or `cp`.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::atomic_file;

#[derive(Debug, clap::Args)]
pub struct CopySelfArgs {
    /// Where to put the binary (written atomically, mode 0755); its directory must exist.
    pub dest: PathBuf,
}

pub fn main(args: CopySelfArgs) -> ExitCode {
    match copy_self(&args.dest) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("passmower-elector copy-self: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Why the binary could not be copied.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("cannot read the running binary: {0}")]
    Read(#[source] std::io::Error),
    #[error("cannot write {}: {source}", .dest.display())]
    Write {
        dest: PathBuf,
        source: std::io::Error,
    },
}

/// Copies the running executable to `dest` atomically with mode 0755.
pub fn copy_self(dest: &std::path::Path) -> Result<(), CopyError> {
    // /proc/self/exe names the running image even if the file was replaced since it started.
    // Without /proc (an empty chroot, some sandboxes) argv[0] still names the file when it
    // holds a path, as it does in the injected initContainer's absolute `command`.
    let bytes = std::fs::read("/proc/self/exe")
        .or_else(|_| std::env::current_exe().and_then(std::fs::read))
        .or_else(|e| match std::env::args_os().next() {
            Some(argv0) if std::path::Path::new(&argv0).components().count() > 1 => {
                std::fs::read(argv0)
            }
            _ => Err(e),
        })
        .map_err(CopyError::Read)?;
    atomic_file::write_with_mode(dest, &bytes, 0o755).map_err(|source| CopyError::Write {
        dest: dest.to_owned(),
        source,
    })
}
