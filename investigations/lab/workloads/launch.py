"""The lab's launcher: the command a case records. Starts the background processes of a case
(competitors, with their CPU affinity), then its main processes, waits for the mains, then
stops the background ones and waits for them too, so that every process of the case, culprit
included, starts and exits inside the recording (its exit carries its CPU time).

  launch.py [--cgroup DIR]... [--bg 'CPUS;COMMAND']... --main 'CPUS;COMMAND' [--main ...]

--cgroup moves the launcher into the cgroup DIR first (its cgroup.procs), so that every process
of the case is in it (repeated: one directory per cgroup v1 hierarchy, e.g. memory and blkio). CPUS is a CPU list (0,1) or '-' for no pinning. Background processes read /dev/zero and write
to /dev/null (`gzip -1` is then a busy compressor). Exit status: the first failing main's.
"""

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time


def spec(s):
    """'CPUS;[NAME=VALUE ...] COMMAND': leading NAME=VALUE words go into the command's
    environment, as a shell would put them (no `env` process in between)."""
    cpus, _, cmd = s.partition(";")
    cpus = None if cpus.strip() in ("", "-") else {int(c) for c in cpus.split(",")}
    words = shlex.split(cmd)
    env = {}
    while words and "=" in words[0] and "/" not in words[0].partition("=")[0]:
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return cpus, words, env


def start(cpus, cmd, env, **kw):
    def pin():
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
    return subprocess.Popen(cmd, preexec_fn=pin, env={**os.environ, **env}, **kw)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bg", action="append", default=[], type=spec)
    p.add_argument("--main", action="append", default=[], type=spec, required=True)
    p.add_argument("--cgroup", action="append", default=[],
                   help="cgroup directory to join before starting anything (repeatable)")
    p.add_argument("--settle", type=float, default=0.3, help="seconds between the background and the mains")
    a = p.parse_args()
    for cg in a.cgroup:
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    zero = open("/dev/zero", "rb")
    null = open(os.devnull, "wb")
    bg = [start(c, cmd, env, stdin=zero, stdout=null) for c, cmd, env in a.bg]
    if bg:
        time.sleep(a.settle)
    mains = [start(c, cmd, env) for c, cmd, env in a.main]
    rc = 0
    for m in mains:
        r = m.wait()
        rc = rc or r
    for b in bg:
        b.send_signal(signal.SIGTERM)
    for b in bg:
        try:
            b.wait(timeout=5)
        except subprocess.TimeoutExpired:
            b.kill()
            b.wait()
    return rc


if __name__ == "__main__":
    sys.exit(main())
