"""The Linux ends of scripts/wine-test.sh's burst check (rukh framing: a 4-byte
big-endian length, then JSON-RPC).

  echo.py serve PORT      answer every request on every connection with an empty result
  echo.py burst PORT N    N connections at once, one rukh.call each; prints how many
                          got their own answer (each waits at most 30 s). The caller
                          waits for the proxy to listen: a probe would be a client too.
"""

import json
import socket
import struct
import sys
import threading

DEADLINE = 30.0


def read_frame(s):
    head = s.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        return None
    return json.loads(s.recv(struct.unpack(">I", head)[0], socket.MSG_WAITALL))


def send_frame(s, value):
    body = json.dumps(value).encode()
    s.sendall(struct.pack(">I", len(body)) + body)


def serve(port):
    srv = socket.create_server(("127.0.0.1", port))

    def one(c):
        with c:
            while (req := read_frame(c)) is not None:
                send_frame(c, {"jsonrpc": "2.0", "id": req["id"], "result": {}})

    while True:
        threading.Thread(target=one, args=(srv.accept()[0],), daemon=True).start()


def burst(port, n):
    answered = []

    def one(i):
        try:
            with socket.create_connection(("127.0.0.1", port), DEADLINE) as s:
                s.settimeout(DEADLINE)
                send_frame(s, {"jsonrpc": "2.0", "id": f"e:{i}", "method": "rukh.call",
                               "params": {"operation": "fs.read", "version": "1", "input": {},
                                          "timeoutMs": 1000}})
                reply = read_frame(s)
                if reply and reply.get("id") == f"e:{i}":
                    answered.append(i)
        except (OSError, ValueError, struct.error) as e:
            print(f"client {i}: {e}", file=sys.stderr)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(len(answered))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    else:
        burst(int(sys.argv[2]), int(sys.argv[3]))
