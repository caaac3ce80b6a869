#!/usr/bin/env python3
"""PACT_DIAG=1: a line per comm on stderr when it closes and, for those still open, at exit, with
a summary; off by default; a bad value is refused naming the variable. Driven by plugin_probe (one
loopback pair, the send buffer registered twice, one 4 KiB message, the send comm closed, the
receive comm left open at exit) and by pact-perf p2p. Times are printed, never asserted.

Usage: diag_test.py PLUGIN_PROBE PLUGIN PACT_PERF"""
import os
import re
import subprocess
import sys

from checks import fail, finish

probe, plugin, perf = sys.argv[1:4]
env = dict(os.environ, UCX_NET_DEVICES="lo", PACT_NET_DEVICES="lo", UCX_TLS="tcp")
env.pop("PACT_DIAG", None)


def run(cmd, extra=None):
    p = subprocess.run(cmd, env=dict(env, **(extra or {})), capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


LINE = re.compile(r"pact diag: (send|recv) comm 0x[0-9a-f]+ (?:to|from) \S+ on lo \((closed|open at exit)\): "
                  r"setup ([\d.]+) ms over (\d+) call\(s\) \(([\d.]+) ms inside pact, ([\d.]+) ms between the "
                  r"caller's calls\); (\d+) registration\(s\), (\d+) bytes, ([\d.]+) ms, (\d+) cache hit\(s\); "
                  r"requests peak (\d+) of (\d+); (\d+) message\(s\), (\d+) piece\(s\), (\d+) fault\(s\) "
                  r"injected, (\d+) retransmit\(s\)")

rc, out = run([probe, plugin], {"PACT_DIAG": "1"})
lines = [m.groups() for m in LINE.finditer(out)]
if rc != 0:
    fail("plugin_probe exited %d" % rc, out)
else:
    send = [g for g in lines if g[0] == "send"]
    recv = [g for g in lines if g[0] == "recv"]
    if len(send) != 1 or send[0][1] != "closed":
        fail("want one send comm line at close: %s" % send, out)
    elif not (send[0][6] == "2" and send[0][7] == "8192" and send[0][9] == "1" and send[0][12] == "1"
              and int(send[0][10]) >= 1 and int(send[0][3]) >= 1):
        fail("send comm line: 2 registrations of 4096 B (1 cache hit), 1 message, a peak >= 1: %s" % (send[0],), out)
    if len(recv) != 1 or recv[0][1] != "open at exit" or recv[0][6] != "1" or recv[0][12] != "1":
        fail("want the receive comm at exit: 1 registration, 1 message: %s" % recv, out)
    for g in lines:
        total, inside, between = float(g[2]), float(g[4]), float(g[5])
        if abs(inside + between - total) > 0.002:
            fail("setup %.3f ms is not inside %.3f + between %.3f" % (total, inside, between), out)
    if "pact diag: exit: 2 comms opened, 1 closed, 1 still open" not in out:
        fail("no exit summary (2 opened, 1 closed, 1 open)", out)
    else:
        print("ok: PACT_DIAG=1: the send comm's line at close, the receive comm's at exit, the summary", flush=True)

rc, out = run([probe, plugin])
if rc != 0 or "pact diag" in out:
    fail("PACT_DIAG unset: exit %d, diag lines %d" % (rc, out.count("pact diag")), out)
# One line per comm at NCCL's INFO level (NCCL_DEBUG=INFO shows it; plugin_probe's logger prints
# every level), naming peer, device and class.
CONNECTED = re.compile(r"NCCL-LOG INFO \S+ NET/PACT send comm 0x[0-9a-f]+ connected to \S+ on lo: class DEFAULT "
                       r"\(ordered, 1 lane\(s\), chunk \d+\)")
ACCEPTED = re.compile(r"NCCL-LOG INFO \S+ NET/PACT recv comm 0x[0-9a-f]+ accepted from \S+ on lo: class DEFAULT \(ordered\)")
if len(CONNECTED.findall(out)) != 1 or len(ACCEPTED.findall(out)) != 1:
    fail("want one INFO line per comm (connected, accepted): %d, %d" % (len(CONNECTED.findall(out)),
                                                                        len(ACCEPTED.findall(out))), out)
else:
    print("ok: one INFO line per comm (send connected, recv accepted)", flush=True)
rc, out = run([probe, plugin], {"PACT_DIAG": "yes"})
if rc == 0 or "PACT_DIAG" not in out:
    fail("PACT_DIAG=yes was not refused naming the variable (exit %d)" % rc, out)
else:
    print("ok: off by default; PACT_DIAG=yes refused, named", flush=True)

rc, out = run([perf, "p2p", "--no-lat", "--min-size", "64K", "--max-size", "64K"], {"PACT_DIAG": "1"})
closed = [m.groups() for m in LINE.finditer(out) if m.group(2) == "closed"]
busy = [g for g in closed if int(g[12]) > 0]
if rc != 0 or not any(g[0] == "send" for g in busy) or not any(g[0] == "recv" for g in busy):
    fail("pact-perf p2p with PACT_DIAG=1: exit %d, %d closed comm lines, %d that carried messages" % (rc, len(closed), len(busy)), out)
else:
    print("ok: pact-perf p2p: %d comm lines at close, both sides of the measured pair carried messages" % len(closed), flush=True)

finish("PACT_DIAG")
