#!/usr/bin/env python3
"""Write a seed corpus for each fuzz target from the examples in the built-in
contracts (schema/contracts/*.json), encoded in each target's input format:
one leading byte for the split schedule (0: no cuts) before framed streams,
one leading party/answers byte for classify_toolchannel. Run from fuzz/:
`python3 seeds.py` (writes corpus/<target>/seed-*; corpus/ is gitignored)."""
import hashlib, json, pathlib, struct

root = pathlib.Path(__file__).resolve().parent
contracts = {n: json.loads((root / f"../schema/contracts/{n}.json").read_text())
             for n in ("kernel", "xsession", "rukh", "toolchannel")}
contracts["lsp"] = json.loads((root / "../examples/lsp/lsp.json").read_text())

def examples(name):
    for mname, m in contracts[name]["methods"].items():
        for ex in m.get("examples", []):
            if "message" in ex:
                yield mname, ex, json.dumps(ex["message"], ensure_ascii=False, separators=(",", ":")).encode()

def write(target, data):
    d = root / "corpus" / target
    d.mkdir(parents=True, exist_ok=True)
    (d / ("seed-" + hashlib.sha1(data).hexdigest()[:16])).write_bytes(data)

rukh = [m for _, _, m in examples("rukh")]
for m in rukh:
    write("length_prefixed", b"\0" + struct.pack(">I", len(m)) + m)
write("length_prefixed", b"\0" + b"".join(struct.pack(">I", len(m)) + m for m in rukh))

kernel = [m for _, _, m in examples("kernel")]
for i, m in enumerate(kernel[:8]):
    write("binary_frame", b"\0" + struct.pack(">IIQ", 12 + len(m), 1, i) + m)
write("binary_frame", b"\0" + struct.pack(">IIQ", 12, 0, 0))

xs = [m for _, _, m in examples("xsession")]
for m in xs:
    write("ndjson", b"\0" + m + b"\n")
write("ndjson", b"\0" + b"\r\n".join(xs))

lsp = [m for _, _, m in examples("lsp")]
for m in lsp:
    write("header_delimited", b"\0" + b"Content-Length: %d\r\n\r\n" % len(m) + m)
write("header_delimited", b"\0" + b"".join(
    b"Content-Length: %d\r\ncontent-type: application/vscode-jsonrpc; charset=utf8\r\n\r\n" % len(m) + m
    for m in lsp))

for name in contracts:
    for _, _, m in examples(name):
        write("strict_json", m)

methods = list(contracts["toolchannel"]["methods"])
for mname, ex, m in examples("toolchannel"):
    party = 0 if ex.get("from") == "worker" else 1
    answers = methods.index(mname) + 1 if ex.get("part") in ("result", "error") else 0
    write("classify_toolchannel", bytes([(answers << 1) | party]) + m)

# Targets beyond the decoders.
write("ws_upgrade", b"GET /worker?s=1 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
      b"Sec-WebSocket-Protocol: agentfy.worker.v1\r\nAuthorization: Bearer t0k\r\n\r\n")
doc = (root / "../docs/proxy.md").read_text()
start = doc.index('mode = "observe"')
write("config_toml", doc[start:doc.index("```", start)].encode())
write("config_toml", b'[[route]]\ncontract = "rukh"\nlisten = "tcp:0"\nupstream = "tcp:127.0.0.1:9"\n'
      b'[[route.ratelimit]]\nmethod = "rukh.log"\nburst = 5\nper_second = 1.0\n')
for name in contracts:
    src = root / (f"../schema/contracts/{name}.json" if name != "lsp" else "../examples/lsp/lsp.json")
    write("contract_check", src.read_bytes())
write("contract_check", (root / "../proxy/tests/fixtures/jobs.json").read_bytes())
# A recording: `contract-proxy run --record` output, if one was made for the seeds
# (fuzz/seed.rec, gitignored); without it the fuzzer starts from the magic line.
rec = root / "seed.rec"
write("recording", rec.read_bytes() if rec.exists() else b"CPREC1\n")
