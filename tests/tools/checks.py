"""What the tools suite's Python tests share: failures and skips counted and printed with the
output that explains them, and the closing line and exit status. A skip is never a pass: a test
with one exits 77 (meson: SKIP), and under CI (the variable CI set) it fails, since ci/setup.sh
installs everything these tests need."""
import os
import sys

failures = 0
skips = []


def fail(msg, out=""):
    """Counts a failed check; prints it and the tail of the output that shows why."""
    global failures
    failures += 1
    print("FAIL: " + msg, flush=True)
    if out:
        print(out[-3000:], flush=True)


def skip(msg):
    """Counts a check that could not run here, with the reason."""
    skips.append(msg)
    print("skip: " + msg, flush=True)


def under_ci():
    return os.environ.get("CI", "") not in ("", "0", "false")


def finish(name):
    """The closing line ("ok: NAME", "N failure(s)" or "N skipped") and the exit status."""
    if skips and not failures and under_ci():
        fail("%d check(s) skipped under CI (ci/setup.sh installs what they need): %s" % (len(skips), "; ".join(skips)))
    if failures:
        print("%d failure(s)" % failures)
        sys.exit(1)
    if skips:
        print("%d check(s) skipped: %s counts as skipped, not passed" % (len(skips), name))
        sys.exit(77)
    print("ok: " + name)
    sys.exit(0)
