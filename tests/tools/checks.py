"""What the tools suite's Python tests share: failures counted and printed with the output that
explains them, and the closing line and exit status."""
import sys

failures = 0


def fail(msg, out=""):
    """Counts a failed check; prints it and the tail of the output that shows why."""
    global failures
    failures += 1
    print("FAIL: " + msg, flush=True)
    if out:
        print(out[-3000:], flush=True)


def finish(name):
    """The closing line ("ok: NAME" or "N failure(s)") and the exit status."""
    print("%d failure(s)" % failures if failures else "ok: " + name)
    sys.exit(1 if failures else 0)
