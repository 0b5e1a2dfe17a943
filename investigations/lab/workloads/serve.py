"""The lab's inference server and its load generator.

  serve.py server --port P            a continuous-batching loop (as vLLM's engine): each
      iteration takes new requests (a prefill of its prompt, one request at a time, first come
      first served) and decodes one token for every running request, then copies the sampled
      tokens to the host (a sync, as every decode step is); a request is answered after its
      output tokens. A prompt's prefill costs `prefill_us_per_token` of device time in one
      kernel, so one huge prompt holds every other request until it is done. Each iteration
      that has work is an engine step, an NVTX range ("step N").
  serve.py client --port P --users U --seconds S [--big-every S --big-tokens T]
      U concurrent users, each sending a request (128-512 prompt tokens, 16-48 output tokens)
      and waiting for its answer; optionally one more user sending an oversized prompt, 0.5 s
      after the start and S seconds after each answer. Prints latency percentiles on stderr, then stops the server.
"""

import argparse
import json
import os
import random
import selectors
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torchlike as tl  # noqa: E402


def server(a):
    tl.cuda.init(0)
    model = tl.Model(layers=2, gemm_us=400, small_us=20, act_bytes=4 << 20)
    sampled = tl.Tensor(4096)
    lsock = socket.create_server(("127.0.0.1", a.port))
    lsock.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(lsock, selectors.EVENT_READ)
    bufs = {}
    waiting, running = [], []
    steps = 0
    stop = False
    while not stop:
        for key, _ in sel.select(timeout=0 if (waiting or running) else 0.05):
            if key.fileobj is lsock:
                c, _ = lsock.accept()
                c.setblocking(False)
                sel.register(c, selectors.EVENT_READ)
                bufs[c] = b""
                continue
            c = key.fileobj
            data = c.recv(65536)
            if not data:
                sel.unregister(c)
                c.close()
                continue
            bufs[c] += data
            while b"\n" in bufs[c]:
                line, bufs[c] = bufs[c].split(b"\n", 1)
                parts = line.split()
                if parts[0] == b"QUIT":
                    stop = True
                elif parts[0] == b"REQ":
                    waiting.append({"conn": c, "id": parts[1], "prompt": int(parts[2]), "left": int(parts[3])})
        if not (waiting or running):
            continue
        # the engine's step (schedule, run the batch, answer finished requests) as an NVTX range,
        # as vLLM marks its engine steps; taking new requests off the sockets is outside it
        with tl.cuda.nvtx.range(f"step {steps}"):
            if waiting:
                r = waiting.pop(0)
                # prefill: the whole prompt in one kernel (no chunking)
                tl.launch("gemm_attn", r["prompt"] * a.prefill_us_per_token, sampled.ptr, sampled.ptr)
                running.append(r)
            loss, acts = model.forward(sampled)  # one decode step for the batch
            for act in acts:
                act.free()
            loss.free()
            tl.launch("gemm_small", 100 * len(running), sampled.ptr, sampled.ptr)
            sampled.item()  # the sampled tokens to the host
            for r in list(running):
                r["left"] -= 1
                if r["left"] <= 0:
                    running.remove(r)
                    try:
                        r["conn"].sendall(b"DONE " + r["id"] + b"\n")
                    except OSError:
                        pass
        steps += 1
    tl.cuda.synchronize()


def client(a):
    tl.set_thread_name("loadgen")
    lat = {"normal": [], "big": []}
    deadline = time.monotonic() + a.seconds
    lock = threading.Lock()

    def connect():
        for _ in range(200):
            try:
                return socket.create_connection(("127.0.0.1", a.port))
            except OSError:
                time.sleep(0.05)
        raise SystemExit("the server never listened")

    def user(i, big):
        rnd = random.Random(i)
        s = connect()
        f = s.makefile("rb")
        n = 0
        if big:
            time.sleep(0.5)
        while time.monotonic() < deadline:
            prompt = a.big_tokens if big else rnd.randint(128, 512)
            out = 8 if big else rnd.randint(16, 48)
            t = time.monotonic()
            s.sendall(f"REQ {i}-{n} {prompt} {out}\n".encode())
            f.readline()
            with lock:
                lat["big" if big else "normal"].append(time.monotonic() - t)
            n += 1
            if big:
                time.sleep(a.big_every)
        s.close()

    threads = [threading.Thread(target=user, args=(i, False)) for i in range(a.users)]
    if a.big_every:
        threads.append(threading.Thread(target=user, args=(a.users, True)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s = connect()
    s.sendall(b"QUIT\n")
    s.close()
    out = {"workload": "serve"}
    for k, v in lat.items():
        v.sort()
        if v:
            out[k] = {"requests": len(v), "p50_ms": round(1000 * v[len(v) // 2], 1),
                      "p99_ms": round(1000 * v[int(len(v) * 0.99)], 1)}
    print(json.dumps(out), file=sys.stderr)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("server")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--prefill-us-per-token", type=int, default=10)
    c = sub.add_parser("client")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--users", type=int, default=6)
    c.add_argument("--seconds", type=float, default=8)
    c.add_argument("--big-every", type=float, default=0)
    c.add_argument("--big-tokens", type=int, default=100000)
    a = p.parse_args()
    return server(a) if a.cmd == "server" else client(a)


if __name__ == "__main__":
    sys.exit(main())
