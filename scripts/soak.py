#!/usr/bin/env python3
"""Soak: mixed traffic with faults through one contract-proxy, watching its memory
and open files.

Usage: scripts/soak.py [--minutes 10] [--seed 1] [--workers 8] [--proxy PATH]
(run with the peers' Python: .venv-peers/bin/python, which has websockets and
aioquic; build the proxy first: cargo build --release -p contract-proxy, or pass
--proxy target/debug/contract-proxy).

One proxy runs four routes from one config file: the jobs contract
(proxy/tests/fixtures/jobs.json, not a built-in) enforced over unix, tcp and
quic, and toolchannel observed over WebSocket. The upstreams live in this
process: a jobs runner that answers every request, and a websockets echo host.
WORKERS clients loop until the time is up, each connection a scenario drawn from
random.Random(SEED): a normal session, bad lines until the contract's limit
closes the connection, a peer that dies mid-frame, a half-close, a TCP reset, a
trickle of one byte at a time; on WebSocket an echo session, a close with a code,
or a transport dropped without a close frame.

Every second the proxy's RSS (VmRSS) and open file count (/proc/PID/fd) are
sampled. The run passes when the median of the last minute is within 10% of the
median of the second minute, for both. It prints a Markdown table of the result
(for docs/benchmarks.md) and exits 1 on a failure.
"""

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aioquic.asyncio.client import connect as quic_connect
from aioquic.quic.configuration import QuicConfiguration
from websockets.asyncio.client import connect as ws_connect
from websockets.asyncio.server import serve as ws_serve
from websockets.exceptions import ConnectionClosed

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "proxy/tests/fixtures/jobs.json"
STEP = 5.0  # deadline of any one wait


def line(v):
    return (json.dumps(v, separators=(",", ":")) + "\n").encode()


def req(n, method, params):
    return line({"jsonrpc": "2.0", "id": f"c:{n}", "method": method, "params": params})


# --- upstreams ---------------------------------------------------------------

async def runner(reader, writer):
    """The jobs runner: answers each request with a result that fits its method."""
    try:
        while True:
            raw = await reader.readline()
            if not raw:
                break
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(msg, dict) or "id" not in msg or "method" not in msg:
                continue
            result = {"hello": {"features": ["upload"]}, "job.start": {"accepted": True}}.get(msg["method"], {})
            writer.write(line({"jsonrpc": "2.0", "id": msg["id"], "result": result}))
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def ws_host(ws):
    try:
        async for m in ws:
            await ws.send(m)
    except ConnectionClosed:
        pass


# --- jobs scenarios ------------------------------------------------------------

async def open_jobs(kind, where, quic_config):
    if kind == "unix":
        return await asyncio.open_unix_connection(where), None
    if kind == "tcp":
        host, port = where.rsplit(":", 1)
        return await asyncio.open_connection(host, int(port)), None
    host, port = where.rsplit(":", 1)
    cm = quic_connect(host, int(port), configuration=quic_config)
    client = await cm.__aenter__()
    return await client.create_stream(), cm


async def jobs_session(rng, r, w):
    w.write(req(1, "hello", {}))
    await w.drain()
    await asyncio.wait_for(r.readline(), STEP)
    n = 2
    for j in range(rng.randint(1, 6)):
        job = f"j{rng.randrange(1000)}"
        w.write(req(n, "job.start", {"job": job, "owner": f"o{rng.randrange(50)}"}))
        w.write(req(n + 1, "job.upload", {"job": job, "data": "x" * rng.randrange(4000)}))
        w.write(line({"jsonrpc": "2.0", "method": "job.end", "params": {"job": job}}))
        await w.drain()
        for _ in range(2):
            await asyncio.wait_for(r.readline(), STEP)
        n += 2


async def jobs_scenario(rng, kind, where, quic_config, counts):
    scenario = rng.choice(["session", "session", "bad", "die", "half", "reset", "trickle"])
    if scenario == "reset" and kind != "tcp":
        scenario = "session"
    counts[f"{kind}:{scenario}"] = counts.get(f"{kind}:{scenario}", 0) + 1
    (r, w), cm = await asyncio.wait_for(open_jobs(kind, where, quic_config), STEP)
    try:
        if scenario == "session":
            await jobs_session(rng, r, w)
        elif scenario == "bad":
            w.write(b"{nope\n" * 10)
            await w.drain()
            await asyncio.wait_for(r.read(), STEP)  # answers, then the limit's close
        elif scenario == "die":
            w.write(req(1, "hello", {})[: rng.randrange(1, 20)])
            await w.drain()
        elif scenario == "half":
            w.write(req(1, "hello", {}))
            w.write_eof()
            await asyncio.wait_for(r.read(), STEP)
        elif scenario == "reset":
            w.write(req(1, "hello", {})[:10])
            await w.drain()
            sock = w.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif scenario == "trickle":
            for b in req(1, "hello", {}):
                w.write(bytes([b]))
                await w.drain()
                await asyncio.sleep(0.02)
            await asyncio.wait_for(r.readline(), STEP)
    finally:
        w.close()
        if cm is not None:
            await cm.__aexit__(None, None, None)


async def ws_scenario(rng, url, protocol, counts):
    scenario = rng.choice(["echo", "echo", "close", "drop"])
    counts[f"ws:{scenario}"] = counts.get(f"ws:{scenario}", 0) + 1
    ws = await ws_connect(url, subprotocols=[protocol], additional_headers={"Authorization": "Bearer t0k"},
                          open_timeout=STEP, close_timeout=STEP, ping_interval=None)
    try:
        for i in range(rng.randint(1, 20)):
            await ws.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"n": i}}))
            await asyncio.wait_for(ws.recv(), STEP)
        if scenario == "close":
            await ws.close(4009, "superseded")
        elif scenario == "drop":
            ws.transport.abort()
    finally:
        await ws.close()


async def worker(n, args, deadline, where, quic_config, ws_url, protocol, counts, errors):
    rng = random.Random(args.seed * 1000 + n)
    while time.monotonic() < deadline:
        kind = rng.choice(args.only or ["unix", "tcp", "quic", "ws"])
        try:
            if kind == "ws":
                await ws_scenario(rng, ws_url, protocol, counts)
            else:
                await jobs_scenario(rng, kind, where[kind], quic_config, counts)
        except (ConnectionError, ConnectionClosed, asyncio.TimeoutError, asyncio.IncompleteReadError, OSError) as e:
            # Scenarios that break the connection on purpose end here too; count them.
            errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
        await asyncio.sleep(rng.random() * 0.05)


# --- sampling and the verdict ---------------------------------------------------

def sample(pid):
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


async def sampler(pid, deadline, out):
    while time.monotonic() < deadline:
        out.append(sample(pid))
        await asyncio.sleep(1)


def verdict(samples):
    second = samples[60:120]
    last = samples[-60:]
    rows, ok = [], True
    for i, what in ((0, "RSS (KiB)"), (1, "open files")):
        a = statistics.median(s[i] for s in second)
        b = statistics.median(s[i] for s in last)
        within = abs(b - a) <= 0.10 * a
        ok &= within
        rows.append((what, a, b, max(s[i] for s in samples), "yes" if within else "NO"))
    return rows, ok


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--proxy", default=str(ROOT / "target/release/contract-proxy"))
    ap.add_argument("--only", choices=["unix", "tcp", "quic", "ws"], action="append",
                    help="drive only these routes (repeatable; default all four)")
    args = ap.parse_args()
    if args.minutes < 2.5:
        sys.exit("soak: at least 2.5 minutes (the verdict compares the second minute with the last)")
    tmp = Path(tempfile.mkdtemp(prefix="soak-"))
    up_unix = tmp / "runner.sock"
    unix_srv = await asyncio.start_unix_server(runner, path=str(up_unix))
    tcp_srv = await asyncio.start_server(runner, "127.0.0.1", 0)
    tcp_port = tcp_srv.sockets[0].getsockname()[1]
    ws_srv = await ws_serve(ws_host, "127.0.0.1", 0, subprotocols=["agentfy.worker.v1"], ping_interval=None)
    ws_port = ws_srv.sockets[0].getsockname()[1]
    ports = []
    for _ in range(3):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        ports.append(s.getsockname()[1])
        s.close()
    config = tmp / "soak.toml"
    config.write_text(f"""
[[route]]
name = "jobs-unix"
contract = "{JOBS}"
mode = "enforce"
listen = "unix:{tmp / 'jobs.sock'}"
upstream = "unix:{up_unix}"

[[route]]
name = "jobs-tcp"
contract = "{JOBS}"
mode = "enforce"
listen = "tcp:127.0.0.1:{ports[0]}"
upstream = "tcp:127.0.0.1:{tcp_port}"

[[route]]
name = "jobs-quic"
contract = "{JOBS}"
mode = "enforce"
listen = "quic://127.0.0.1:{ports[1]}"
upstream = "unix:{up_unix}"

[[route]]
name = "tool-ws"
contract = "toolchannel"
listen = "ws://127.0.0.1:{ports[2]}/worker"
upstream = "ws://127.0.0.1:{ws_port}/worker"
""")
    log = open(tmp / "proxy.log", "w")
    proxy = subprocess.Popen([args.proxy, "run", "--log", "json", "--config", str(config)],
                             stdout=log, stderr=subprocess.STDOUT)
    await asyncio.sleep(1.5)
    if proxy.poll() is not None:
        sys.exit(f"soak: the proxy did not start; see {tmp / 'proxy.log'}")
    where = {"unix": str(tmp / "jobs.sock"), "tcp": f"127.0.0.1:{ports[0]}", "quic": f"127.0.0.1:{ports[1]}"}
    quic_config = QuicConfiguration(is_client=True, alpn_protocols=["jobs/0"], verify_mode=ssl.CERT_NONE)
    started = time.monotonic()
    deadline = started + args.minutes * 60
    counts, errors, samples = {}, {}, []
    load = [os.getloadavg()[0]]
    await asyncio.gather(
        sampler(proxy.pid, deadline, samples),
        *(worker(n, args, deadline, where, quic_config, f"ws://127.0.0.1:{ports[2]}/worker",
                 "agentfy.worker.v1", counts, errors) for n in range(args.workers)),
    )
    load.append(os.getloadavg()[0])
    proxy.send_signal(signal.SIGTERM)
    try:
        code = proxy.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proxy.kill()
        code = "killed after 10 s"
    for s in (unix_srv, tcp_srv, ws_srv):
        s.close()
    rows, ok = verdict(samples)
    ok &= code == 0
    print(f"\nSoak, {args.minutes:g} min, seed {args.seed}, {args.workers} workers, "
          f"{sum(counts.values())} connections, load average {load[0]:.1f} → {load[-1]:.1f}, "
          f"proxy exit {code}\n")
    print("| measure | 2nd-minute median | last-minute median | peak | within 10% |")
    print("|---|---|---|---|---|")
    for what, a, b, peak, within in rows:
        print(f"| {what} | {a:g} | {b:g} | {peak:g} | {within} |")
    per_minute = [samples[i][0] for i in range(0, len(samples), 60)]
    print("\nRSS (KiB) at the start of each minute: " + ", ".join(str(x) for x in per_minute))
    (tmp / "samples.csv").write_text("second,rss_kib,open_files\n" + "".join(
        f"{i},{r},{f}\n" for i, (r, f) in enumerate(samples)))
    print("\nscenarios: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print("ended by an error (many on purpose): " + (", ".join(f"{k} {v}" for k, v in sorted(errors.items())) or "none"))
    print(f"proxy log: {tmp / 'proxy.log'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    asyncio.run(main())
