"""pact-perf coll on loopback: every collective on 4 forked ranks over tcp and over shared memory,
sizes from 0 through odd element counts to 1 MiB, out-of-place and in-place, every element
checked (#wrong 0), allreduce over the tree too; the output parsed back as nccl-tests prints it (13 columns, busbw = algbw x
the op's factor); --channels 4 opens 4x the comms and still verifies; a rank killed mid-run
makes the others fail within 30 s (no hang); and the ranks come from mpirun (when installed),
Slurm's or torchrun's variables (plot_test.py draws results). No timing is asserted. Usage: coll_test.py PACT_PERF"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from checks import fail, finish, skip

perf = sys.argv[1]
env = dict(os.environ, UCX_NET_DEVICES="lo", PACT_NET_DEVICES="lo")
FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
          "reducescatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
          "broadcast": lambda n: 1, "sendrecv": lambda n: 1}


def parse(out, ranks, name):
    """Rows per op; checks the nccl-tests layout of every row and the footer."""
    rows, op = {}, None
    for line in out.splitlines():
        m = re.match(r"# (allreduce|allgather|reducescatter|alltoall|broadcast|sendrecv)$", line)
        if m:
            op = m.group(1)
            rows[op] = []
            continue
        if line.startswith("#") or not line.strip():
            continue
        cols = line.split()
        if len(cols) != 13:
            fail("%s: a row with %d columns, not 13: %r" % (name, len(cols), line))
            continue
        size, count = int(cols[0]), int(cols[1])
        for t, algbw, busbw, wrong in (cols[5:9], cols[9:13]):
            if wrong != "0":
                fail("%s: %s size %d: #wrong %s" % (name, op, size, wrong))
            f = FACTOR[op](ranks)
            want = float(algbw) * f
            # Both are printed with 2 decimals: algbw's rounding (0.005) grows by the factor.
            if abs(float(busbw) - want) > 0.006 + 0.006 * f + 0.01 * want:
                fail("%s: %s size %d: busbw %s is not algbw %s x factor" % (name, op, size, busbw, algbw))
        rows[op].append((size, count, cols[2], cols[3], int(cols[4])))
    if "# Out of bounds values : 0 OK" not in out:
        fail("%s: no '# Out of bounds values : 0 OK' footer" % name)
    if not re.search(r"# Avg bus bandwidth    : [0-9.e+-]+", out):
        fail("%s: no '# Avg bus bandwidth' footer" % name)
    return rows


def run(args, name, ranks, extra_env=None, launcher=None):
    cmd = (launcher or []) + [perf, "coll"] + args
    p = subprocess.run(cmd, env=dict(env, **(extra_env or {})), capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0:
        fail("%s: exit %d\n%s\n%s" % (name, p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
        return {}, p.stdout
    return parse(p.stdout, ranks, name), p.stdout


# 1. Every op, tcp and sm, 4 ranks: sizes 0, 4 (one float), 20, 100, ... (odd counts) to 1 MiB.
tmp = tempfile.mkdtemp()
for tls in ("tcp", "sm"):
    rows, out = run(["-np", "4", "--op", "all", "-b", "0", "-e", "1M", "-f", "5", "-n", "2", "-w", "1",
                     "--json", os.path.join(tmp, tls + ".json")], "all ops over " + tls, 4, {"UCX_TLS": tls})
    for op in FACTOR:
        sizes = [r[0] for r in rows.get(op, [])]
        if not sizes or sizes[0] != 0 or sizes[-1] < 500000:
            fail("%s over %s: sizes %s" % (op, tls, sizes))
        if op in ("allreduce", "broadcast", "sendrecv") and not any(r[1] % 2 == 1 for r in rows.get(op, [])):
            fail("%s over %s: no odd count among %s" % (op, tls, [r[1] for r in rows.get(op, [])]))
    red = rows.get("allreduce", [(0, 0, "", "", 0)])
    if red and (red[0][2] != "float" or red[0][3] != "sum" or red[0][4] != -1):
        fail("allreduce row type/redop/root: %s" % (red[0],))
    print("ok: every op over %s on 4 ranks, %d rows, #wrong 0" % (tls, sum(len(v) for v in rows.values())), flush=True)

# 2. Other types and reductions, a non-zero root.
for d, o in (("int8", "prod"), ("double", "max"), ("uint64", "min"), ("int32", "sum")):
    rows, _ = run(["-np", "3", "--op", "allreduce", "-b", "0", "-e", "64K", "-f", "7", "-n", "1", "-w", "0",
                   "-d", d, "-o", o], "allreduce %s %s on 3 ranks" % (d, o), 3, {"UCX_TLS": "tcp"})
rows, _ = run(["-np", "3", "--op", "broadcast", "-r", "2", "-b", "4", "-e", "1M", "-f", "16", "-n", "1"],
              "broadcast from rank 2", 3, {"UCX_TLS": "tcp"})
if rows and any(r[4] != 2 for r in rows["broadcast"]):
    fail("broadcast rows do not name root 2: %s" % rows["broadcast"])
print("ok: int8 prod, double max, uint64 min, int32 sum on 3 ranks; broadcast from rank 2", flush=True)

# 2b. allreduce over the double binary tree (--algo tree): 5 ranks (a node with one child), both
# transports, two channels, a sum and an int8 product; 2 ranks (each the other's child in one tree).
# Rank 0 is linked to 1 and 2 in tree 0 and to 3 in tree 1 (the mirrored heap: 4 is its root, 3
# its child and rank 0's parent): 3 peers x 2 trees x 2 channels, each way.
for np_, tls, d, o in ((5, "tcp", "float", "sum"), (5, "sm", "int8", "prod"), (5, "sm", "double", "sum"),
                       (2, "tcp", "float", "sum")):
    rows, out = run(["-np", str(np_), "--op", "allreduce", "--algo", "tree", "--channels", "2", "-b", "0", "-e", "2M",
                     "-f", "7", "-n", "2", "-w", "1", "-d", d, "-o", o],
                    "tree allreduce %s %s over %s on %d ranks" % (d, o, tls, np_), np_, {"UCX_TLS": tls})
    if rows and "allreduce tree" not in out:
        fail("tree: the header does not name the algorithm")
    want = 24 if np_ == 5 else 8
    if rows and "# comms per rank: %d " % want not in out:
        fail("tree on %d ranks: %s, want %d comms (two trees)" % (np_, re.findall(r"# comms per rank: .*", out), want))
print("ok: double-tree allreduce on 5 and 2 ranks, 2 channels, tcp and sm, verified", flush=True)

# 3. --channels 4: four times the comms, still verified.
counts = {}
for ch in (1, 4):
    rows, out = run(["-np", "4", "--op", "all", "-b", "4K", "-e", "256K", "-f", "8", "-n", "1", "-w", "0",
                     "--channels", str(ch)], "--channels %d" % ch, 4, {"UCX_TLS": "tcp"})
    m = re.search(r"# comms per rank: (\d+) ", out)
    counts[ch] = int(m.group(1)) if m else -1
if counts[4] != 4 * counts[1] or counts[1] != 2 + 2 * 3:
    fail("comms per rank with 1 and 4 channels: %s (want 8 and 32)" % counts)
else:
    print("ok: --channels 4 opens %d comms per rank (1 channel: %d), verified" % (counts[4], counts[1]), flush=True)

# 4. A rank killed mid-run: the others fail, all of them, within 30 s.
p = subprocess.Popen([perf, "coll", "-np", "4", "--op", "allreduce", "-b", "16M", "-e", "16M", "-n", "100000",
                      "-c", "0", "--timeout", "120"], env=dict(env, UCX_TLS="tcp"),
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
pids, deadline = {}, time.monotonic() + 60
while len(pids) < 4 and time.monotonic() < deadline:
    line = p.stdout.readline()
    if not line:
        break
    m = re.match(r"#  Rank\s+(\d+) Group\s+0 Pid\s+(\d+)", line)
    if m:
        pids[int(m.group(1))] = int(m.group(2))
if len(pids) < 4:
    fail("kill test: the ranks' pids were not printed: %s" % pids)
    p.kill()
else:
    while not p.stdout.readline().startswith("# allreduce"):  # the timed loop is running
        pass
    time.sleep(1)  # mid-run (not synchronisation: any moment of the run will do)
    os.kill(pids[2], signal.SIGKILL)
    t0 = time.monotonic()
    try:
        rc = p.wait(timeout=30)
        took = time.monotonic() - t0
        alive = [r for r, pid in pids.items() if os.path.exists("/proc/%d" % pid) and
                 open("/proc/%d/stat" % pid).read().split()[2] != "Z"]
        if rc == 0 or alive:
            fail("kill test: exit %d, ranks still running %s" % (rc, alive))
        else:
            print("ok: rank 2 killed, the job failed after %.2f s (exit %d): %s" %
                  (took, rc, p.stderr.read().strip().splitlines()[:2]), flush=True)
    except subprocess.TimeoutExpired:
        fail("kill test: the other ranks still ran 30 s after rank 2 was killed")
        p.kill()

# 5. mpirun -np 4 (OpenMPI): ranks from the launcher, handles through the store.
mpirun = shutil.which("mpirun")
if mpirun is None:
    skip("mpirun -np 4: mpirun is not installed (ci/setup.sh installs openmpi-bin)")
else:
    launcher = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "4", "-x", "UCX_TLS=tcp",
                "-x", "UCX_NET_DEVICES=lo", "-x", "PACT_NET_DEVICES=lo", "-x", "MASTER_PORT=%d" % (29600 + os.getpid() % 300)]
    rows, out = run(["--op", "all", "-b", "0", "-e", "64K", "-f", "9", "-n", "1", "-w", "0"], "mpirun -np 4", 4,
                    launcher=launcher)
    if rows and "4 ranks (mpirun)" not in out:
        fail("mpirun: the header does not say 4 ranks (mpirun)")
    elif rows:
        print("ok: mpirun -np 4, every op verified", flush=True)

# 6. Slurm's and torchrun's variables: three processes started here, each told its rank.
for how, rank_var, size_var in (("slurm", "SLURM_PROCID", "SLURM_NTASKS"), ("torchrun", "RANK", "WORLD_SIZE")):
    port = str(29950 + os.getpid() % 40 + (7 if how == "slurm" else 0))
    procs = [subprocess.Popen([perf, "coll", "--op", "allgather", "-b", "0", "-e", "48K", "-f", "8", "-n", "1",
                               "-w", "0", "--timeout", "60"],
                              env=dict(env, UCX_TLS="tcp", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                                       **{rank_var: str(r), size_var: "3"}),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(3)]
    outs = [pr.communicate(timeout=120) for pr in procs]
    if any(pr.returncode != 0 for pr in procs):
        fail("%s: exits %s\n%s" % (how, [pr.returncode for pr in procs], outs[0][1][-2000:]))
    elif "3 ranks (%s)" % how not in outs[0][0]:
        fail("%s: rank 0's header does not say 3 ranks (%s)" % (how, how))
    else:
        parse(outs[0][0], 3, how)
        print("ok: 3 ranks from %s's variables, allgather verified" % how, flush=True)

shutil.rmtree(tmp, ignore_errors=True)

finish("pact-perf coll")
