"""csi-sanity runs as TAP: the pieces the conformance tests share.

Run with Debian's /usr/bin/python3 (the tests import ../integration/pcsi_test).

  * csi_sanity_path()   the cached binary: $PCSI_CSI_SANITY, else
                        `scripts/go-tools.sh --path csi-sanity` (the path logic of
                        the script that builds it); "Bail out!" when it is missing
  * Runner              numbers TAP lines across several csi-sanity runs in one
                        process; run() = one csi-sanity run, one TAP line per spec
                        from its JUnit report, then "# run NAME: N passed, N failed,
                        N skipped"; finish() = plan, totals, exit status

A spec that passes is `ok`, a skipped one `ok ... # SKIP reason`, anything else
(failed, timed out, panicked, interrupted, aborted) is `not ok` with csi-sanity's
failure message and location as diagnostics. Ginkgo shuffles the specs: the seed is
printed with each run (PCSI_SANITY_SEED repeats an order). A run without a JUnit report, or
whose exit status disagrees with its report, is one more `not ok`.
"""

import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import pcsi_test as pt  # noqa: E402

MiB = 1 << 20


def bail(msg):
    print("Bail out! %s" % msg, flush=True)
    sys.exit(1)


def csi_sanity_path():
    p = os.environ.get("PCSI_CSI_SANITY")
    if p:
        if not os.access(p, os.X_OK):
            bail("PCSI_CSI_SANITY=%s is not an executable file" % p)
        return p
    tools = os.environ.get("PCSI_GO_TOOLS") or os.path.join(ROOT, "scripts", "go-tools.sh")
    r = subprocess.run(["sh", tools, "--path", "csi-sanity"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True)
    p = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    if r.returncode != 0 or not p or not os.access(p, os.X_OK):
        bail("csi-sanity is not built (%s): run `%s` (scripts/install-deps.sh does), "
             "or set PCSI_CSI_SANITY" % (p or r.stdout.strip(), tools))
    return p


def write_params(path, params):
    """A --csi.testvolumeparameters file: flat YAML of quoted strings."""
    with open(path, "w") as f:
        for k, v in params.items():
            f.write('"%s": "%s"\n' % (k, v))
    return path


def _clean(text):
    return re.sub(r"\x1b\[[0-9;]*m", "", text or "").strip()


def _short(name):
    # "[It] Node Service NodeGetVolumeStats should fail ... [Node Server]"
    return re.sub(r"^\[It\] ", "", name)


class Runner(pt.TAP):
    """pcsi_test's TAP writer, with csi-sanity runs turned into its lines."""

    def __init__(self):
        super().__init__()
        self.runs = []

    def run(self, name, csi_sanity, args, workdir, timeout=3600, filtered_reason=None, unlisted=None,
            reasons=()):
        """Runs csi-sanity ARGS once; returns (passed, failed, skipped).
        filtered_reason: the skip reason shown for specs that --ginkgo.skip or
        --ginkgo.focus filtered out (default "filtered out"); reasons: (regex,
        reason) pairs that name the reason of the filtered specs they match,
        first. unlisted: the
        --ginkgo.focus of a run that repeats part of an earlier one; the specs
        it filtered out get no TAP line, only a count."""
        junit = os.path.join(workdir, re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".junit.xml")
        out_path = os.path.join(workdir, re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".out")
        seed = int(os.environ.get("PCSI_SANITY_SEED") or int.from_bytes(os.urandom(3), "big"))
        cmd = [csi_sanity, "--ginkgo.no-color", "--ginkgo.junit-report=" + junit,
               "--ginkgo.seed=%d" % seed, "--ginkgo.timeout=%ds" % timeout] + list(args)
        self.diag("run %s: %s" % (name, " ".join(cmd)))
        t0 = time.monotonic()
        with open(out_path, "w") as out:
            try:
                rc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    cwd=workdir, timeout=timeout + 120).returncode
            except subprocess.TimeoutExpired:
                rc = None
        secs = time.monotonic() - t0
        passed = failed = skipped = outside = 0
        skips = {}
        times = []
        try:
            cases = ET.parse(junit).getroot().iter("testcase")
        except (OSError, ET.ParseError) as e:
            cases = None
            self.line(False, "%s: csi-sanity produced a JUnit report" % name,
                      why="exit status %s after %.0f s, no usable %s (%s); its output:\n%s"
                      % (rc, secs, junit, e, _tail(out_path)))
            failed += 1
        for tc in cases or ():
            full = tc.get("name", "?")
            status = tc.get("status", "?")
            title = "%s: %s" % (name, _short(full))
            try:
                times.append((float(tc.get("time", "0")), _short(full)))
            except ValueError:
                pass
            if not full.startswith("[It]"):
                # Suite set-up and report nodes: shown only when they fail.
                if status not in ("passed", "skipped", "pending"):
                    failed += 1
                    self.line(False, title, why=self._why(tc, status))
                continue
            if status == "passed":
                passed += 1
                self.line(True, title)
            elif status in ("skipped", "pending"):
                el = tc.find("skipped")
                reason = _clean(el.get("message") if el is not None else status)
                reason = re.sub(r"^skipped( - )?", "", reason)
                if not reason and unlisted and not re.search(unlisted, full):
                    outside += 1
                    continue
                skipped += 1
                if not reason:
                    reason = next((why for rx, why in reasons if re.search(rx, full)), None)
                reason = reason or filtered_reason or "filtered out"
                skips.setdefault(reason, []).append(_short(full))
                self.line(True, title, directive="SKIP " + reason.replace("\n", " "))
            else:
                failed += 1
                self.line(False, title, why=self._why(tc, status))
        if cases is not None and (rc == 0) != (failed == 0):
            failed += 1
            self.line(False, "%s: csi-sanity exit status agrees with its report" % name,
                      why="exit status %s, %d failed specs in the report; its output:\n%s"
                      % (rc, failed - 1, _tail(out_path)))
        self.diag("run %s: %d passed, %d failed, %d skipped (%.0f s)" % (name, passed, failed, skipped, secs))
        for reason, specs in sorted(skips.items()):
            self.diag("  skipped (%s): %d" % (reason, len(specs)))
        # Where a run's time goes (the CI budget): its five slowest specs.
        for secs_, spec in sorted(times, reverse=True)[:5]:
            self.diag("  slowest: %.1f s %s" % (secs_, spec))
        if outside:
            self.diag("  not run, outside this run's focus /%s/: %d" % (unlisted, outside))
        self.runs.append((name, passed, failed, skipped))
        return passed, failed, skipped

    @staticmethod
    def _why(tc, status):
        el = tc.find("failure")
        if el is None:
            el = tc.find("error")
        if el is None:
            return "status %s" % status
        msg = _condense(_clean(el.get("message")))
        desc = _clean(el.text)
        loc = ""
        for line in desc.splitlines():
            if re.search(r"\.go:\d+", line):
                loc = line.strip()
                break
        return "status %s: %s%s" % (status, msg, ("\nat " + loc) if loc else "")

    def finish(self):
        self.plan()
        for name, p, f, s in self.runs:
            self.diag("run %s: %d passed, %d failed, %d skipped" % (name, p, f, s))
        return 1 if self.failed or not self.n else 0


CODES = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
         "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
         "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"]


def _condense(msg):
    """Gomega's message without the Go struct dump of a status error, with code names."""
    m = re.search(r"rpc error: code = .*", msg)
    if m and "{" in msg:
        msg = "%s %s" % (msg.split("\n", 1)[0].strip(), m.group(0).strip())
    msg = re.sub(r"<codes\.Code>: (\d+)",
                 lambda c: "%s (%s)" % (c.group(1), CODES[int(c.group(1))] if int(c.group(1)) < len(CODES) else "?"),
                 msg)
    return re.sub(r"\s*\n\s*", " ", msg)


def _tail(path, lines=40):
    try:
        with open(path, errors="replace") as f:
            ls = f.read().rstrip("\n").split("\n")
    except OSError as e:
        return "(%s)" % e
    if len(ls) > lines:
        ls = ["[... %d lines cut ...]" % (len(ls) - lines)] + ls[-lines:]
    return "\n".join(ls)
