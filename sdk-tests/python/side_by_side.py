"""Two generated SDKs installed side by side (kernel_sdk and rukh_sdk, run.sh step 5) work in one
process over one contract_runtime: each decodes its own contract's example, refuses the other's,
and both name the same runtime module."""

import sys
from importlib import metadata

import contract_runtime
import kernel_sdk.kernel as kernel
import rukh_sdk.rukh as rukh

installed = {d.metadata["Name"]: d.version for d in metadata.distributions()}
want = {"kernel-sdk": "1.0.0", "rukh-sdk": "2.0.0", "contract-runtime": contract_runtime.__version__}
for name, version in want.items():
    if installed.get(name) != version:
        sys.exit(f"FAIL {name}: installed {installed.get(name)!r}, expected {version!r}")

ping = b'{"v":1,"type":"event","id":"s-1","method":"ping","timestamp":1.5,"trace_id":"t-1","payload":{}}'
event = b'{"jsonrpc":"2.0","method":"rukh.log","params":{"level":"info","message":"hi"}}'
for sdk, decode, ok, other in (
    (kernel, kernel.decode_control_message, ping, event),
    (rukh, rukh.decode_ipc_message, event, ping),
):
    decode(ok)
    try:
        decode(other)
    except contract_runtime.ContractError:
        pass
    else:
        sys.exit(f"FAIL {sdk.__name__} accepted another contract's message")
    if sdk._rt is not contract_runtime:
        sys.exit(f"FAIL {sdk.__name__} imports another runtime")
print(f"side by side: {', '.join(f'{n} {v}' for n, v in sorted(want.items()))}: ok")
