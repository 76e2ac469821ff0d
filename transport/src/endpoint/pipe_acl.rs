//! The named pipe's security descriptor: only the user who runs the listener, and
//! LocalSystem, may open the pipe. A pipe's default DACL also lets Everyone and anonymous
//! logons read it, so another user's session on the machine could dial a local-IPC
//! contract meant for one user. Every call here is a Win32 call on memory the OS
//! allocates and this module frees; nothing else in the crate is unsafe on Windows.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::io;
use std::ptr::null_mut;

use windows_sys::Win32::Foundation::{CloseHandle, HANDLE, LocalFree};
use windows_sys::Win32::Security::Authorization::{
    ConvertSidToStringSidW, ConvertStringSecurityDescriptorToSecurityDescriptorW, SDDL_REVISION_1,
};
use windows_sys::Win32::Security::{
    GetTokenInformation, PSECURITY_DESCRIPTOR, SECURITY_ATTRIBUTES, TOKEN_QUERY, TOKEN_USER,
    TokenUser,
};
use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};

/// The descriptor, in SDDL: a protected DACL (`P`: nothing inherited) granting all
/// access (`GA`) to the current user's SID and to LocalSystem (`SY`), and no one else.
pub fn current_user_sddl() -> io::Result<String> {
    Ok(format!("D:P(A;;GA;;;{})(A;;GA;;;SY)", user_sid()?))
}

/// Call `f` with security attributes made from `sddl`, freed when it returns (the
/// kernel copies the descriptor into the object it creates).
pub fn with_attributes<T>(
    sddl: &str,
    f: impl FnOnce(*mut c_void) -> io::Result<T>,
) -> io::Result<T> {
    let wide: Vec<u16> = sddl.encode_utf16().chain([0]).collect();
    let mut sd: PSECURITY_DESCRIPTOR = null_mut();
    // SAFETY: `wide` is NUL-terminated; on success `sd` is a LocalAlloc'd descriptor,
    // freed below.
    let ok = unsafe {
        ConvertStringSecurityDescriptorToSecurityDescriptorW(
            wide.as_ptr(),
            SDDL_REVISION_1,
            &mut sd,
            null_mut(),
        )
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    let mut sa = SECURITY_ATTRIBUTES {
        nLength: size_of::<SECURITY_ATTRIBUTES>() as u32,
        lpSecurityDescriptor: sd,
        bInheritHandle: 0,
    };
    let out = f((&raw mut sa).cast());
    // SAFETY: `sd` came from the conversion above and is freed once.
    unsafe { LocalFree(sd) };
    out
}

/// A process token handle, closed on drop.
struct Token(HANDLE);

impl Drop for Token {
    fn drop(&mut self) {
        // SAFETY: the handle came from OpenProcessToken and is closed once.
        unsafe { CloseHandle(self.0) };
    }
}

/// The current process user's SID, as `S-1-5-…`.
fn user_sid() -> io::Result<String> {
    let mut h: HANDLE = null_mut();
    // SAFETY: GetCurrentProcess is a pseudo handle; `h` receives a handle Token closes.
    if unsafe { OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &mut h) } == 0 {
        return Err(io::Error::last_os_error());
    }
    let token = Token(h);
    let mut len = 0u32;
    // SAFETY: a size query: no buffer, the size needed comes back in `len`.
    unsafe { GetTokenInformation(token.0, TokenUser, null_mut(), 0, &mut len) };
    // u64 words: TOKEN_USER holds pointers, so the buffer must be pointer-aligned.
    let mut buf = vec![0u64; (len as usize).div_ceil(8).max(1)];
    let size = u32::try_from(buf.len() * 8).unwrap_or(u32::MAX);
    // SAFETY: `buf` is writable for `size` bytes.
    let ok =
        unsafe { GetTokenInformation(token.0, TokenUser, buf.as_mut_ptr().cast(), size, &mut len) };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the call filled `buf`, aligned for it, with a TOKEN_USER whose SID points
    // into the same buffer, alive until the end of this function.
    let sid = unsafe { (*buf.as_ptr().cast::<TOKEN_USER>()).User.Sid };
    let mut text: *mut u16 = null_mut();
    // SAFETY: `sid` is valid (above); `text` receives a LocalAlloc'd string freed below.
    if unsafe { ConvertSidToStringSidW(sid, &mut text) } == 0 {
        return Err(io::Error::last_os_error());
    }
    let mut n = 0;
    // SAFETY: the string is NUL-terminated.
    while unsafe { *text.add(n) } != 0 {
        n += 1;
    }
    // SAFETY: `n` u16s were just read from it.
    let s = String::from_utf16_lossy(unsafe { std::slice::from_raw_parts(text, n) });
    // SAFETY: freed once, as ConvertSidToStringSidW asks.
    unsafe { LocalFree(text.cast()) };
    Ok(s)
}
