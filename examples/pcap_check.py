"""Check a capture the proxy wrote (`run --pcap`) against what it logged (`--log json`).

usage: pcap_check.py CONTRACT PCAP LOG...   (the proxy's --log json may share a file with
other output, or be in one of several files: every JSON event line of them is read)

Generates CONTRACT's Wireshark dissector with $CONTRACTGEN, reads PCAP with tshark, and
checks that every frame the proxy logged is in the capture, in the same order on each
connection (connections are matched by the verdict comment each frame carries; between
connections the log and the capture may interleave differently), with the same kind and
method (an answer the proxy could not pair may show its envelope's method),
and that a frame the proxy passed raises none of the dissector's expert info. Prints one
line and exits 0 when they agree, 1 (with the first difference) when not.
Used by the reference peers' run scripts (examples/*/run.sh).
"""

import json
import os
import re
import subprocess
import sys
import tempfile

EXPERTS = ("Not JSON", "over the", "is not on channel", "comes from", "not in the catalog")


def lines(paths):
    for p in paths:
        with open(p, encoding="utf-8", errors="replace") as f:
            yield from f


def logged(paths):
    """The frames of --log json files, per (route, conn): (kind, method, flagged) in order."""
    out = {}
    for line in lines(paths):
        # A peer sharing the file may have written into the line's start.
        try:
            e = json.loads(line[line.index("{"):])
        except ValueError:
            continue
        if not isinstance(e, dict) or "verdict" not in e or "dir" not in e:
            continue
        method = e.get("method") or ""
        if method.startswith("("):  # a deadline or the close: no frame
            continue
        if e.get("stream") is not None:
            method = ""
        verdict = e["verdict"]
        ok = verdict == "ok" or (isinstance(verdict, dict) and verdict.get("verdict") == "ok")
        key = (e.get("route"), str(e.get("conn")))
        out.setdefault(key, []).append((e.get("kind") or "", method, not ok))
    return out


def tshark(script, pcap, display, fields):
    run = subprocess.run(
        ["tshark", "-X", script, "-r", pcap, "-Y", display, "-T", "fields",
         "-E", "separator=\t", "-E", "occurrence=a", "-E", "aggregator=|",
         *[x for f in fields for x in ("-e", f)]],
        capture_output=True, text=True)
    if run.returncode != 0 or "Lua Error" in run.stderr:
        sys.exit(f"FAIL: tshark: {run.stderr.strip()}")
    return [(line.split("\t") + [""] * len(fields))[:len(fields)] for line in run.stdout.splitlines()]


def dissected(contract, pcap, workdir):
    """The dissector's rows for PCAP per (route, conn): (kind, method, experts); the filter
    name."""
    gen = subprocess.run(
        [os.environ["CONTRACTGEN"], "generate", "--lang", "wireshark", "--out", workdir, contract],
        capture_output=True, text=True)
    if gen.returncode != 0:
        sys.exit(f"FAIL: contractgen generate --lang wireshark (exit {gen.returncode}): "
                 f"{' '.join(gen.stderr.split())}")
    [lua] = [f for f in os.listdir(workdir) if f.endswith(".lua")]
    script = f"lua_script:{os.path.join(workdir, lua)}"
    names = subprocess.run(["tshark", "-G", "protocols", "-X", script],
                           capture_output=True, text=True, check=True).stdout
    wanted = lua[:-len(".lua")]
    known = {line.split("\t")[2] for line in names.splitlines() if line.count("\t") >= 2}
    proto = f"{wanted}_contract" if f"{wanted}_contract" in known else wanted
    # Each frame's verdict comment names its route and connection.
    conn_of = {}
    for stream, comment in tshark(script, pcap, "frame.comment", ["tcp.stream", "frame.comment"]):
        m = re.search(r"contract-proxy (\S+)#(\d+) ", comment)
        if m:
            conn_of.setdefault(stream, (m.group(1), m.group(2)))
    rows = {}
    for stream, kind, method, experts in tshark(
            script, pcap, proto,
            ["tcp.stream", f"{proto}.kind", f"{proto}.method", "_ws.expert.message"]):
        rows.setdefault(conn_of.get(stream, ("?", stream)), []).append((kind, method, experts))
    return rows, proto


def main():
    contract, pcap, logs = sys.argv[1], sys.argv[2], sys.argv[3:]
    want = logged(logs)
    with tempfile.TemporaryDirectory() as d:
        rows, proto = dissected(contract, pcap, d)
    if sorted(rows) != sorted(want):
        sys.exit(f"FAIL: {pcap}: connections {sorted(rows)} dissected as {proto}, the proxy logged {sorted(want)}")
    for key, got in rows.items():
        conn = f"{key[0]}#{key[1]}"
        if len(got) != len(want[key]):
            sys.exit(f"FAIL: {pcap} {conn}: {len(got)} frames dissected, the proxy logged {len(want[key])}")
        for i, ((kind, method, experts), (wkind, wmethod, flagged)) in enumerate(zip(got, want[key])):
            if kind.replace("?", "") != wkind or (wmethod and method != wmethod):
                sys.exit(f"FAIL: {pcap} {conn} frame {i}: dissected {kind} {method}, logged {wkind} {wmethod}")
            if not flagged and any(x in experts for x in EXPERTS):
                sys.exit(f"FAIL: {pcap} {conn} frame {i}: a frame the proxy passed raised {experts}")
    total = sum(len(v) for v in rows.values())
    print(f"ok: {pcap}: {total} frames on {len(rows)} connections dissected as {proto}, as the proxy logged them")


if __name__ == "__main__":
    main()
