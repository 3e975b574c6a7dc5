#!/usr/bin/env python3
"""Builds the trees the benchmarks remove (used by scripts/bench).

  bench-tree.py stale-roots DIR N FILES [CGROUPS [kept]]
      DIR (created 0700) gets N stale roots `run-<id>`, each as a run leaves it: a real version-1
      marker (mode 0600) whose owner is a process that has exited, the layout directories, and
      FILES small files in home/. DIR is usable as a cleanroom namespace (`--state-dir DIR`), and
      a second copy made the same way is the identical tree for `rm -rf`.
      CGROUPS: `none` (default: the session rung), `recorded` (each marker records its cgroup
      `<cgroup2 mount>/cleanroom-<id>`, as every run made as root does, and the cgroup is gone, as
      a watchdog leaves it), or `real` (the empty cgroup directories exist too, as a runner killed
      without its watchdog leaves them: gc must kill and remove each; needs root). `kept`: the
      roots were made with --keep-root (gc leaves them, `gc --kept` reclaims them).

  bench-tree.py plain DIR NDIRS NFILES
      DIR gets NDIRS directories holding NFILES 12-byte files each.
"""

import json
import os
import subprocess
import sys
import time

LAYOUT = ["home", "tmp", "xdg", "xdg/config", "xdg/cache", "xdg/data", "xdg/state",
          "xdg/runtime", "homes"]


def start_time(pid):
    stat = open(f"/proc/{pid}/stat").read()
    return int(stat[stat.rindex(")") + 1:].split()[19])


def dead_owner():
    child = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    owner = {"pid": child.pid, "start_time": start_time(child.pid)}
    child.stdin.close()
    child.wait()
    return owner


def cgroup2_mount():
    for line in open("/proc/self/mountinfo"):
        fields = line.split()
        if fields[fields.index("-") + 1] == "cgroup2":
            return fields[4].replace("\\040", " ")
    sys.exit("no cgroup2 mount")


def stale_roots(top, n, files, cgroups="none", kept=""):
    os.mkdir(top, 0o700)
    mount = cgroup2_mount() if cgroups != "none" else None
    host = {
        "boot_id": open("/proc/sys/kernel/random/boot_id").read().strip(),
        "pid_ns": os.stat("/proc/self/ns/pid").st_ino,
        "hostname": os.uname().nodename,
    }
    owner = dead_owner()
    salt = int.from_bytes(os.urandom(4), "little")
    now_ms = int(time.time() * 1000)
    for i in range(n):
        run_id = "20261129T093000Z-%08x%08x" % (salt, i)
        root = os.path.join(top, "run-" + run_id)
        os.mkdir(root, 0o700)
        cgroup = None
        if mount:
            cgroup = os.path.join(mount, "cleanroom-" + run_id)
            if cgroups == "real":
                os.mkdir(cgroup)
        marker = {
            "format": "cleanroom-root-marker", "version": 1, "run_id": run_id,
            "euid": os.geteuid(), "owner": owner, "host": host, "created_unix_ms": now_ms,
            "command": ["cargo", "test"], "keep": kept == "kept", "cgroup": cgroup,
        }
        fd = os.open(os.path.join(root, "cleanroom-root.json"),
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, (json.dumps(marker) + "\n").encode())
        os.close(fd)
        for sub in LAYOUT:
            os.mkdir(os.path.join(root, sub), 0o700)
        for f in range(files):
            with open(os.path.join(root, "home", f"file{f}"), "w") as out:
                out.write("hello world\n")


def plain(top, ndirs, nfiles):
    os.mkdir(top, 0o700)
    for d in range(ndirs):
        sub = os.path.join(top, f"d{d:05}")
        os.mkdir(sub)
        for f in range(nfiles):
            with open(os.path.join(sub, f"f{f:04}"), "w") as out:
                out.write("hello world\n")


if __name__ == "__main__":
    kind, top, a, b = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    {"stale-roots": stale_roots, "plain": plain}[kind](top, a, b, *sys.argv[5:])
