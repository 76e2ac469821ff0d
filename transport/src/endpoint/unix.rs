//! `unix:PATH`: Unix domain sockets. A listening socket is created 0600, in a
//! directory the proxy creates 0700 when it is missing; a symlink at the path is
//! refused, so the proxy never binds somewhere another user chose for it.

use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::Path;

use tokio::net::{UnixListener, UnixStream};

/// Bind `path` with the modes above; a stale socket file is replaced.
pub fn listen(path: &Path) -> io::Result<UnixListener> {
    if let Some(dir) = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.exists())
    {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "refusing to follow a symlink",
            ));
        }
        Ok(m) if m.file_type().is_socket() => {
            // Only a socket nobody answers on is stale; a live one means a second proxy.
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "a live socket is already listening there",
                ));
            }
            std::fs::remove_file(path)?
        }
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a non-socket file is in the way",
            ));
        }
        Err(_) => {}
    }
    let l = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

/// Connect to `path`.
pub async fn connect(path: &Path) -> io::Result<UnixStream> {
    UnixStream::connect(path).await
}
