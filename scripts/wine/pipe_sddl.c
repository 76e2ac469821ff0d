/* Prints the DACL of the named pipe \\.\pipe\NAME (argv[1]) in SDDL, as its server set
 * it: scripts/wine-test.sh checks that contract-proxy's pipe listener lets only its own
 * user (and LocalSystem) in. Built with mingw-w64, run under Wine. */
#include <windows.h>
#include <aclapi.h>
#include <sddl.h>
#include <stdio.h>

int main(int argc, char **argv) {
    char path[512];
    if (argc != 2) { fprintf(stderr, "usage: pipe_sddl NAME\n"); return 2; }
    snprintf(path, sizeof path, "\\\\.\\pipe\\%s", argv[1]);
    HANDLE h = CreateFileA(path, READ_CONTROL, 0, NULL, OPEN_EXISTING, 0, NULL);
    if (h == INVALID_HANDLE_VALUE) { fprintf(stderr, "open %s: %lu\n", path, GetLastError()); return 1; }
    PSECURITY_DESCRIPTOR sd = NULL;
    DWORD rc = GetSecurityInfo(h, SE_KERNEL_OBJECT, DACL_SECURITY_INFORMATION, NULL, NULL, NULL, NULL, &sd);
    if (rc != ERROR_SUCCESS) { fprintf(stderr, "GetSecurityInfo: %lu\n", rc); return 1; }
    LPSTR text = NULL;
    if (!ConvertSecurityDescriptorToStringSecurityDescriptorA(sd, SDDL_REVISION_1, DACL_SECURITY_INFORMATION, &text, NULL)) {
        fprintf(stderr, "to SDDL: %lu\n", GetLastError());
        return 1;
    }
    printf("%s\n", text);
    LocalFree(text);
    LocalFree(sd);
    CloseHandle(h);
    return 0;
}
