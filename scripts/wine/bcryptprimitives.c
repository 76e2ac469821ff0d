/* A stand-in for Windows' bcryptprimitives.dll, which Wine 8.0 (Debian 12's) lacks.
 *
 * Rust's standard library for Windows (1.78 and later) takes its random bytes from
 * ProcessPrng in bcryptprimitives.dll, so no Rust program starts under Wine 8.0
 * ("Library bcryptprimitives.dll ... not found", status c0000135). Windows 10 and
 * later, and Wine 9, have the DLL; scripts/wine-test.sh builds this one with mingw
 * and puts it in its own Wine prefix only. ProcessPrng is documented to fill the
 * buffer and return TRUE; BCryptGenRandom with the system RNG does the same work.
 */
#include <windows.h>
#include <bcrypt.h>

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    return BCryptGenRandom(NULL, data, (ULONG)len, BCRYPT_USE_SYSTEM_PREFERRED_RNG) == 0;
}
