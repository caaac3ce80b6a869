#!/usr/bin/env python3
"""Two NCCL ranks on ONE GPU talking through the pact net plugin (libnccl-net-pact.so).

Each rank gets its own NCCL_HOSTID, so NCCL sees two hosts: no duplicate-GPU error, no P2P/SHM
between them, every byte goes through the network plugin (NCCL_NET_PLUGIN=pact, NCCL_NET=PACT).
The launcher (default mode) starts both ranks as child processes, each in its own session, with
one deadline for everything; it kills them when the deadline passes.

Per rank: all_reduce(sum) over float32 tensors of 4 B .. 256 MiB (x4 steps, plus odd sizes) with
exact expected values, 20 timed all_reduce iterations at 64 MiB (bus bandwidth), all_gather,
broadcast from each rank, and a send/recv exchange. Each rank prints one JSON line; the launcher
checks the NCCL logs for proof that the plugin carried the traffic (NCCL's "Using network PACT",
"via NET/PACT", the plugin's own "NET/PACT" lines, no fallback to another network) and prints
"GPU-NCCL-CHECK PASS" or "GPU-NCCL-CHECK FAIL: <reason>".

Exit codes: 0 pass, 1 fail, 77 skip (no CUDA device here), 2 usage.

Modes:
  nccl_allreduce.py [--out DIR] [--timeout S] [--bundle-lib DIR]   launcher (the check)
  nccl_allreduce.py --plugin-smoke                                 ctypes load + init + devices
  nccl_allreduce.py --worker --rank R --store FILE --result FILE   one rank (started by launcher)
  nccl_allreduce.py --selftest-cpu       the same ranks on CPU with gloo: checks this script's own
                                         logic where there is no GPU (no plugin involved)

torch is imported lazily: only the ranks and the launcher's CUDA probe need it.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77
PLUGIN_FILE = "libnccl-net-pact.so"
PLUGIN_NAME = "PACT"  # the .name of the ncclNetPlugin_vN tables in plugin/nccl/net_v*.cpp
WORLD = 2
MiB = 1 << 20
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def log(msg):
    print(msg, flush=True)


def nccl_version_str(torch):
    v = torch.cuda.nccl.version()  # (major, minor, patch[, suffix]) in torch 2.x
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


# ----------------------------------------------------------------------------------------------
# --plugin-smoke: load the plugin the way NCCL does and initialise it, without NCCL or torch.


def plugin_smoke(bundle_lib):
    import ctypes

    try:
        lib = ctypes.CDLL(PLUGIN_FILE)  # CPython opens with RTLD_NOW: every symbol must resolve
    except OSError as e:
        log(f"plugin-smoke: FAIL: cannot load {PLUGIN_FILE}: {e}")
        return 1
    tables = []
    for v in range(8, 13):
        try:
            name = ctypes.c_char_p.in_dll(lib, f"ncclNetPlugin_v{v}").value
        except ValueError:
            continue
        tables.append(f"v{v}={name.decode() if name else None}")
    log("plugin-smoke: tables " + " ".join(tables))
    if not tables:
        log("plugin-smoke: FAIL: no ncclNetPlugin_vN symbol")
        return 1

    # v8 layout: name, init(logger), devices(int*): enough to bring the core up over UCX.
    init_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
    devices_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))

    class V8Head(ctypes.Structure):
        _fields_ = [("name", ctypes.c_char_p), ("init", init_t), ("devices", devices_t)]

    rc = 0
    try:
        head = V8Head.in_dll(lib, "ncclNetPlugin_v8")
        r = head.init(None)
        n = ctypes.c_int(-1)
        d = head.devices(ctypes.byref(n)) if r == 0 else -1
        log(f"plugin-smoke: v8 init -> {r}, devices -> {d}, ndev = {n.value}")
        if r != 0 or d != 0 or n.value < 1:
            log("plugin-smoke: FAIL: the plugin did not come up with a device "
                "(PACT_NET_DEVICES / UCX_NET_DEVICES must name an interface UCX lists, e.g. lo)")
            rc = 1
    except ValueError:
        log("plugin-smoke: no ncclNetPlugin_v8 table; init not tried")

    # Which copies got mapped: the bundle's, or something else on this machine?
    mapped = {}
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            base = os.path.basename(path)
            if re.match(r"lib(nccl-net-pact|ucp|uct|ucs|ucm|uct_\w+|sodium|numa|stdc\+\+|gcc_s)\.so", base):
                mapped[base] = path
    for base in sorted(mapped):
        log(f"plugin-smoke: mapped {base} from {os.path.dirname(mapped[base])}")
    if bundle_lib:
        root = os.path.realpath(bundle_lib)
        foreign = [p for b, p in mapped.items()
                   if re.match(r"lib(nccl-net-pact|ucp|uct|ucs|ucm|uct_\w+)\.so", b)
                   and not os.path.realpath(p).startswith(root + os.sep)]
        if foreign:
            log("plugin-smoke: FAIL: plugin/UCX loaded from outside the bundle: " + ", ".join(foreign))
            rc = 1
    log("plugin-smoke: " + ("ok" if rc == 0 else "FAILED"))
    return rc


# ----------------------------------------------------------------------------------------------
# Worker: one rank.


def worker(args):
    t0 = time.time()
    res = {"rank": args.rank, "pid": os.getpid(), "hostid": os.environ.get("NCCL_HOSTID"),
           "ok": False, "errors": [],
           "env": {k: v for k, v in sorted(os.environ.items())
                   if k.startswith(("NCCL_", "UCX_", "PACT_")) or k == "LD_LIBRARY_PATH"}}

    def write_result():
        res["elapsed_s"] = round(time.time() - t0, 2)
        with open(args.result + ".tmp", "w") as f:
            json.dump(res, f)
        os.replace(args.result + ".tmp", args.result)

    def stage(name):
        res["stage"] = name
        write_result()

    def check(name, ok, detail=""):
        if not ok:
            res["errors"].append(f"{name}: {detail}" if detail else name)
        return ok

    try:
        import datetime

        import torch
        import torch.distributed as dist

        cpu = args.selftest_cpu
        dev = torch.device("cpu" if cpu else "cuda:0")
        res["torch"] = torch.__version__
        if cpu:
            res["backend"] = "gloo (self-test on CPU)"
        else:
            torch.cuda.set_device(dev)
            res["nccl"] = nccl_version_str(torch)
            res["gpu"] = torch.cuda.get_device_name(dev)

        def sync():
            if not cpu:
                torch.cuda.synchronize()

        stage("init")
        kw = {"backend": "gloo" if cpu else "nccl", "init_method": "file://" + args.store,
              "rank": args.rank, "world_size": WORLD,
              "timeout": datetime.timedelta(seconds=args.op_timeout)}
        if cpu:
            dist.init_process_group(**kw)
        else:
            try:
                dist.init_process_group(device_id=dev, **kw)  # eager NCCL communicator
            except TypeError:
                dist.init_process_group(**kw)
        r = args.rank

        def pattern(n, mod, dtype=torch.float32):
            return (torch.arange(n, device=dev, dtype=torch.int32) % mod).to(dtype)

        # 1. all_reduce correctness, 4 B .. 256 MiB in x4 steps, plus odd element counts.
        stage("allreduce")
        counts = [4 ** k for k in range(14)] + [3, 1000003, 4 * MiB // 4 + 5]
        res["allreduce"] = []
        for n in counts:
            x = pattern(n, 7) + float(r + 1)        # rank r: (r+1) + i%7, exact in float32
            sync()
            t = time.perf_counter()
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
            sync()
            ms = (time.perf_counter() - t) * 1e3
            want = pattern(n, 7) * WORLD + float(WORLD * (WORLD + 1) // 2)
            ok = bool(torch.equal(x, want))
            if not ok:
                bad = (x != want).nonzero()
                i = int(bad[0]) if bad.numel() else -1
                check(f"allreduce {n * 4} B", False,
                      f"{bad.numel()} wrong, first at {i}: {float(x[i])} != {float(want[i])}")
            res["allreduce"].append({"bytes": n * 4, "ok": ok, "ms": round(ms, 3)})
            del x, want
        write_result()

        # 2. bandwidth: 20 timed all_reduce of 64 MiB (after 2 warm-up); values stay exact
        #    powers of two, so the result is checked too.
        stage("bandwidth")
        n = 64 * MiB // 4
        x = torch.ones(n, device=dev, dtype=torch.float32)
        warm, iters = 2, 20
        for _ in range(warm):
            dist.all_reduce(x)
        sync()
        if not cpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        if not cpu:
            end.record()
        sync()
        wall = time.perf_counter() - t
        avg = (wall if cpu else start.elapsed_time(end) / 1e3) / iters
        algbw = n * 4 / avg / 1e9
        final = float(WORLD ** (warm + iters))
        res["allreduce_bw"] = {
            "bytes": n * 4, "iters": iters, "avg_ms": round(avg * 1e3, 3),
            "wall_s": round(wall, 3), "algbw_GBps": round(algbw, 3),
            "busbw_GBps": round(algbw * 2 * (WORLD - 1) / WORLD, 3),
            "values_ok": check("bandwidth loop values", bool(torch.all(x == final)),
                               f"expected {final}, got {float(x[0])}"),
        }
        del x
        write_result()

        # 3. all_gather: rank r contributes 1000*r + i%13.
        stage("all_gather")
        n = 4 * MiB + 7
        mine = pattern(n, 13) + 1000.0 * r
        out = torch.empty(n * WORLD, device=dev, dtype=torch.float32)
        if cpu:  # gloo has no all_gather_into_tensor in older torch
            dist.all_gather(list(out.chunk(WORLD)), mine)
        else:
            dist.all_gather_into_tensor(out, mine)
        ok = all(torch.equal(out[p * n:(p + 1) * n], pattern(n, 13) + 1000.0 * p) for p in range(WORLD))
        res["all_gather"] = check("all_gather", ok, "gathered data differs")
        del mine, out

        # 4. broadcast from every rank.
        stage("broadcast")
        n = 8 * MiB // 4 + 1
        res["broadcast"] = True
        for src in range(WORLD):
            x = pattern(n, 11) + 100.0 * (src + 1) if r == src else torch.zeros(n, device=dev)
            dist.broadcast(x, src=src)
            if not check(f"broadcast from {src}", bool(torch.equal(x, pattern(n, 11) + 100.0 * (src + 1))),
                         "received data differs"):
                res["broadcast"] = False
        del x

        # 5. send/recv: rank 0 sends, rank 1 answers with the data + 1.
        stage("sendrecv")
        n = 32 * MiB // 4 + 3
        if r == 0:
            x = pattern(n, 17) + 5.0
            dist.send(x, dst=1)
            y = torch.empty(n, device=dev)
            dist.recv(y, src=1)
            ok = bool(torch.equal(y, pattern(n, 17) + 6.0))
        else:
            y = torch.empty(n, device=dev)
            dist.recv(y, src=0)
            ok = bool(torch.equal(y, pattern(n, 17) + 5.0))
            dist.send(y + 1.0, dst=0)
        sync()
        res["sendrecv"] = check("send/recv", ok, "received data differs")
        del y

        # Both ranks agree on the outcome before tearing down.
        stage("teardown")
        errs = torch.tensor([len(res["errors"])], device=dev, dtype=torch.float32)
        dist.all_reduce(errs)
        res["errors_all_ranks"] = int(errs.item())
        res["ok"] = not res["errors"] and res["errors_all_ranks"] == 0
        write_result()
        dist.barrier()
        dist.destroy_process_group()
        stage("done")
    except Exception as e:  # noqa: BLE001 - every failure must end up in the JSON line
        res["ok"] = False
        res["errors"].append(f"{type(e).__name__} in stage {res.get('stage')}: {str(e)[:1500]}")
    write_result()
    log("RESULT-JSON " + json.dumps(res))
    if args.rank == 0:
        log("rank 0 collective checks: " + ("PASS" if res["ok"] else "FAIL: " + "; ".join(res["errors"])[:500]))
    sys.stdout.flush()
    os._exit(0 if res["ok"] else 1)  # skip interpreter teardown (CUDA/NCCL atexit hangs)


# ----------------------------------------------------------------------------------------------
# Launcher.


def have_cuda_device():
    """(bool, why) without torch: the driver's device nodes / proc entries."""
    gpus = "/proc/driver/nvidia/gpus"
    if os.path.isdir(gpus) and os.listdir(gpus):
        return True, f"{len(os.listdir(gpus))} GPU(s) in {gpus}"
    if os.path.exists("/dev/nvidia0"):
        return True, "/dev/nvidia0 exists"
    return False, "no NVIDIA driver device (/proc/driver/nvidia/gpus empty, no /dev/nvidia0)"


def rank_env(rank, bundle_lib, base):
    env = dict(base)
    paths = [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
    if bundle_lib and os.path.realpath(bundle_lib) not in map(os.path.realpath, paths):
        paths.insert(0, bundle_lib)
    env["LD_LIBRARY_PATH"] = ":".join(paths)
    if bundle_lib and "UCX_MODULE_DIR" not in env:
        env["UCX_MODULE_DIR"] = os.path.join(bundle_lib, "ucx")
    env.update({
        "NCCL_HOSTID": f"pact-gpu-check-host{rank}",  # two "hosts" on one machine
        "NCCL_NET_PLUGIN": "pact",                    # -> dlopen("libnccl-net-pact.so")
        "NCCL_NET": PLUGIN_NAME,                      # only this network: no silent fallback
        "NCCL_P2P_DISABLE": "1",
        "NCCL_SHM_DISABLE": "1",
        "NCCL_IB_DISABLE": "1",
        "NCCL_MNNVL_ENABLE": "0",                     # no NVLink fabric between the "hosts"
        "NCCL_NVLS_ENABLE": "0",
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "NCCL_SOCKET_IFNAME": "lo",                   # NCCL's own bootstrap sockets
        "CUDA_VISIBLE_DEVICES": env.get("CUDA_VISIBLE_DEVICES", "0"),
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "PYTHONUNBUFFERED": "1",
    })
    env.setdefault("UCX_NET_DEVICES", "lo")
    env.setdefault("PACT_NET_DEVICES", "lo")
    return env


def kill_group(p, sig):
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def analyse_log(text):
    """Proof from one rank's NCCL log that PACT carried the traffic; (problems, facts)."""
    problems, facts = [], {}
    nets = sorted(set(re.findall(r"NCCL INFO Using network (\S+)", text)))
    facts["using_network"] = nets
    facts["loaded_plugin"] = re.findall(r"NET/Plugin: Loaded net plugin (\S+) \((v\d+)\)", text)[:1]
    facts["via_net_pact"] = len(re.findall(r"via NET/" + PLUGIN_NAME + r"/\d+", text))
    own = re.findall(r"NET/" + PLUGIN_NAME + r" (.*)", text)  # the plugin's own log lines
    facts["net_pact_lines"] = len(own)
    facts["net_pact_sample"] = [line[:160] for line in own[:6]]
    facts["net_socket_lines"] = len(re.findall(r"NET/Socket", text))
    facts["nccl_warn"] = len(re.findall(r"NCCL WARN", text))
    m = re.search(r"NCCL version (\S+)", text)
    facts["nccl_version_log"] = m.group(1) if m else None
    if PLUGIN_NAME not in nets:
        problems.append(f"no 'Using network {PLUGIN_NAME}' (networks: {nets or 'none logged'})")
    other = [n for n in nets if n != PLUGIN_NAME]
    if other:
        problems.append("NCCL fell back to " + ",".join(other))
    if facts["via_net_pact"] == 0:
        problems.append(f"no channel 'via NET/{PLUGIN_NAME}/<dev>'")
    if facts["net_pact_lines"] == 0:
        problems.append(f"no 'NET/{PLUGIN_NAME} ...' line from the plugin itself")
    return problems, facts


def launcher(args):
    deadline = time.monotonic() + args.timeout
    present, why = have_cuda_device()
    try:
        import torch  # lazy: the smoke mode and the no-GPU path work without it
    except ImportError as e:
        if not present:
            log(f"torch is not importable here ({e}); not needed to see that there is no GPU")
            log(f"SKIP: no CUDA device ({why})")
            return SKIP
        log(f"GPU-NCCL-CHECK FAIL: a GPU is present ({why}) but torch is not importable: {e}")
        return 1
    if args.selftest_cpu:
        log(f"launcher: SELF-TEST on CPU with gloo (torch {torch.__version__}); the plugin is not used")
    elif not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        log(f"SKIP: no CUDA device (torch {torch.__version__}: torch.cuda.is_available() is "
            f"{torch.cuda.is_available()}; driver: {why})")
        return SKIP
    else:
        log(f"launcher: torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL "
            f"{nccl_version_str(torch)}, {torch.cuda.device_count()} device(s); "
            f"GPU driver: {why}")

    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="pact-gpu-")
    store = os.path.join(tmp, "store")
    procs, logs, results = [], [], []
    for r in range(WORLD):
        logs.append(os.path.join(args.out, f"nccl-rank{r}.log"))
        results.append(os.path.join(tmp, f"rank{r}.json"))
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--rank", str(r),
               "--store", store, "--result", results[r],
               "--op-timeout", str(max(30, int(args.timeout) - 30))]
        if args.selftest_cpu:
            cmd.append("--selftest-cpu")
        with open(logs[r], "w") as lf:
            procs.append(subprocess.Popen(cmd, env=rank_env(r, args.bundle_lib, os.environ),
                                          stdout=lf, stderr=subprocess.STDOUT, cwd=REPO,
                                          start_new_session=True))
        log(f"launcher: rank {r} pid {procs[-1].pid}, log {logs[r]}")

    reason = None
    first_exit = None
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            break
        now = time.monotonic()
        if any(c is not None for c in codes) and first_exit is None:
            first_exit = now
        if first_exit is not None and now - first_exit > args.straggler:
            reason = (f"rank(s) {[r for r, c in enumerate(codes) if c is None]} still running "
                      f"{args.straggler:.0f} s after the other exited")
            break
        if now > deadline:
            stages = []
            for r, path in enumerate(results):
                try:
                    with open(path) as f:
                        stages.append(f"rank{r}:{json.load(f).get('stage')}")
                except (OSError, ValueError):
                    stages.append(f"rank{r}:starting")
            reason = f"timeout after {args.timeout:.0f} s (stages {' '.join(stages)})"
            break
        time.sleep(0.2)
    if reason:
        for p in procs:
            if p.poll() is None:
                kill_group(p, signal.SIGTERM)
        t = time.monotonic()
        while any(p.poll() is None for p in procs) and time.monotonic() - t < 5:
            time.sleep(0.1)
        for p in procs:
            if p.poll() is None:
                kill_group(p, signal.SIGKILL)
                p.wait()

    failures = [reason] if reason else []
    lines = []
    for r in range(WORLD):
        try:
            with open(results[r]) as f:
                res = json.load(f)
        except (OSError, ValueError):
            res = {"rank": r, "ok": False, "errors": ["no result (crashed or killed before writing it)"]}
        res["exit_code"] = procs[r].returncode
        try:
            with open(logs[r], errors="replace") as f:
                text = f.read()
        except OSError:
            text = ""
        problems, facts = analyse_log(text)
        if args.selftest_cpu:
            facts["ignored_in_selftest"], problems = problems, []
        res["nccl_log"] = facts
        res["plugin_problems"] = problems
        if not res.get("ok"):
            failures.append(f"rank {r}: " + "; ".join(
                res.get("errors") or [f"did not finish (stage {res.get('stage')}, exit code {res['exit_code']})"]))
        elif res["exit_code"] != 0:
            failures.append(f"rank {r}: exit code {res['exit_code']} (stage {res.get('stage')})")
        failures.extend(f"rank {r}: {p}" for p in problems)
        if facts["net_socket_lines"] and not problems:
            res.setdefault("warnings", []).append("NET/Socket lines present (Socket net initialised)")
        lines.append(json.dumps(res, sort_keys=True))
        log(json.dumps(res, sort_keys=True))
        if not res.get("ok") or problems:
            tail = [t for t in text.splitlines() if not t.startswith("RESULT-JSON ")][-25:]
            log(f"---- last {len(tail)} lines of {logs[r]} ----")
            for t in tail:
                log("  " + t)
    with open(os.path.join(args.out, "results.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
        f.write(json.dumps({"verdict": "PASS" if not failures else "FAIL",
                            "failures": failures}) + "\n")
    for path in results:
        try:
            os.remove(path)
        except OSError:
            pass
    try:
        for name in os.listdir(tmp):
            os.remove(os.path.join(tmp, name))
        os.rmdir(tmp)
    except OSError:
        pass

    if args.selftest_cpu:
        log("SELFTEST-CPU " + ("PASS" if not failures else "FAIL: " + " | ".join(failures)[:2000]))
        return 1 if failures else 0
    if failures:
        log("GPU-NCCL-CHECK FAIL: " + " | ".join(failures)[:2000])
        return 1
    log("GPU-NCCL-CHECK PASS")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp/gpu-out",
                    help="folder for nccl-rank<N>.log and results.jsonl (default $OUT or /tmp/gpu-out)")
    ap.add_argument("--timeout", type=float, default=225.0,
                    help="seconds for the whole check, children killed after (default 225)")
    ap.add_argument("--straggler", type=float, default=30.0,
                    help="seconds a rank may outlive the other before both are killed")
    ap.add_argument("--bundle-lib", default=os.path.join(REPO, ".gpu-bundle", "lib"),
                    help="folder with libnccl-net-pact.so and its libraries ('' to use the environment)")
    ap.add_argument("--plugin-smoke", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--selftest-cpu", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--op-timeout", type=int, default=180, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.bundle_lib and not os.path.isdir(args.bundle_lib):
        args.bundle_lib = ""
    if args.plugin_smoke:
        return plugin_smoke(args.bundle_lib)
    if args.worker:
        if not args.store or not args.result:
            ap.error("--worker needs --store and --result")
        worker(args)
        return 1  # not reached
    return launcher(args)


if __name__ == "__main__":
    sys.exit(main())
