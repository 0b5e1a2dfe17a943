"""The lab's data: writes the sample files the DataLoader reads, evicts them from the page cache,
and serves them over TCP as a remote object store would (the slow-remote-input case).

  lab_data.py make DIR --files N --sample-bytes B [--level L]   zlib-compressed samples (about
                                                                 2:1), or raw with --level -1
  lab_data.py evict DIR                             drop DIR's files from the page cache
  lab_data.py serve DIR --host H --port P           'GET name\\n' -> 8-byte length + the file
"""

import argparse
import os
import socketserver
import sys
import zlib


def make(root, files, sample_bytes, level=1):
    """level -1: raw files (.raw), as large on disk as in memory, read without decoding."""
    os.makedirs(root, exist_ok=True)
    # 16 symbols: random, so that decompressing is real work, and compressible about 2:1.
    table = bytes(b % 16 + 65 for b in range(256))
    for i in range(files):
        raw = os.urandom(sample_bytes).translate(table)
        if level < 0:
            with open(os.path.join(root, f"sample-{i:05d}.raw"), "wb") as f:
                f.write(raw)
            continue
        with open(os.path.join(root, f"sample-{i:05d}.z"), "wb") as f:
            f.write(zlib.compress(raw, level))
    with open(os.path.join(root, "READY"), "w") as f:
        f.write(f"{files} {sample_bytes}\n")


def evict(root):
    for name in os.listdir(root):
        fd = os.open(os.path.join(root, name), os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def serve(root, host, port):
    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            while True:
                line = self.rfile.readline()
                if not line:
                    return
                name = os.path.basename(line.decode().split()[1])
                with open(os.path.join(root, name), "rb") as f:
                    data = f.read()
                self.wfile.write(len(data).to_bytes(8, "little") + data)

    class Server(socketserver.ThreadingTCPServer):
        allow_reuse_address = True
        daemon_threads = True

    with Server((host, port), Handler) as srv:
        print("serving", flush=True)
        srv.serve_forever()


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    m.add_argument("--files", type=int, default=256)
    m.add_argument("--sample-bytes", type=int, default=256 << 10)
    m.add_argument("--level", type=int, default=1, help="zlib level; -1: raw files, not compressed")
    e = sub.add_parser("evict")
    e.add_argument("dir")
    s = sub.add_parser("serve")
    s.add_argument("dir")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=7070)
    a = p.parse_args()
    if a.cmd == "make":
        make(a.dir, a.files, a.sample_bytes, a.level)
    elif a.cmd == "evict":
        evict(a.dir)
    else:
        serve(a.dir, a.host, a.port)


if __name__ == "__main__":
    sys.exit(main())
