#!/usr/bin/python3
"""Runs the build stage of manifests/Containerfile on this machine (Debian 12,
the same packages), without a container engine: copies exactly what its COPY
lines copy into an empty directory, runs its meson/ninja/install RUN line
with /build and /out moved to a temp directory, and checks the result: the
binary lands where the manifests' "command" expects it, it runs, and
runtime-packages.sh names the packages of its libraries for the runtime stage.

A file the build needs but the Containerfile does not COPY, a meson option
that does not exist, or a broken install step fails here. TAP output.

usage: test_containerfile_build.py
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
CONTAINERFILE = os.path.join(ROOT, "manifests", "Containerfile")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import pcsi_test as pt  # noqa: E402
BINARY = "/usr/local/bin/pmem-csi-driver"

T = pt.TAP()


def tap(ok, name, detail=""):
    T.line(bool(ok), name, why=detail)


def tail(text, lines=40):
    ls = text.rstrip("\n").split("\n")
    return "\n".join(ls[-lines:])


for tool in ("meson", "ninja", "sh", "dpkg-query", "ldd"):
    if not shutil.which(tool):
        print("Bail out! %s not found (scripts/install-deps.sh installs it)" % tool)
        sys.exit(1)

text = open(CONTAINERFILE).read().replace("\\\n", " ")
stages = re.split(r"^FROM ", text, flags=re.M)[1:]
build = stages[0] if stages else ""
copies = [m.group(1).split() for m in re.finditer(r"^COPY (?!--from)(.+)$", build, re.M)]
runs = [m.group(1) for m in re.finditer(r"^RUN (.+)$", build, re.M)]
meson_run = [r for r in runs if "meson setup" in r]
tap(len(stages) == 2 and copies and len(meson_run) == 1, "Containerfile: two stages, COPY lines and one meson RUN line in the build stage",
    "stages %d, COPY %d, meson RUN %d" % (len(stages), len(copies), len(meson_run)))
if T.failed:
    T.plan()
    sys.exit(1)

work = tempfile.mkdtemp(prefix="pcsi-cf-", dir="/tmp")
try:
    src = os.path.join(work, "src")
    os.makedirs(src)
    problems = []
    for parts in copies:
        *sources, dest = parts
        for s in sources:
            sp = os.path.join(ROOT, s.rstrip("/"))
            if not os.path.exists(sp):
                problems.append("COPY source %s does not exist" % s)
                continue
            dp = os.path.join(src, dest.rstrip("/")) if dest not in ("./", ".") else os.path.join(src, os.path.basename(sp))
            if os.path.isdir(sp):
                shutil.copytree(sp, dp, ignore=shutil.ignore_patterns("node_modules", "__pycache__"))
            else:
                os.makedirs(os.path.dirname(dp), exist_ok=True)
                shutil.copy2(sp, dp)
    tap(not problems, "COPY sources exist", "\n".join(problems))

    cmd = meson_run[0]
    b, o = os.path.join(work, "build"), os.path.join(work, "out")
    cmd = re.sub(r"(?<=[\s=])/build\b", b, cmd)
    cmd = re.sub(r"(?<=[\s=])/out\b", o, cmd)
    r = subprocess.run(["sh", "-ec", cmd], cwd=src, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    out = r.stdout.decode("utf-8", "replace")
    tap(r.returncode == 0, "the build stage's meson/ninja/install step succeeds with only the COPY'd files",
        "exit %d:\n%s" % (r.returncode, tail(out)))

    binary = o + BINARY
    ok = os.access(binary, os.X_OK)
    tap(ok, "the binary is installed at %s (the manifests' command)" % BINARY, "not found under %s" % o)
    if ok:
        v = subprocess.run([binary, "-version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
        tap(v.returncode == 0 and b"pmem-csi-driver" in v.stdout, "the built binary runs (-version)", v.stdout.decode())
    pk = os.path.join(o, "runtime-packages")
    pkgs = open(pk).read().split() if os.path.exists(pk) else []
    tap(len(pkgs) > 0 and "libuv1" in pkgs and "libssl3" in pkgs,
        "runtime-packages lists the library packages for the runtime stage (%s)" % " ".join(pkgs), "got: %r" % pkgs)
    runtime = stages[1]
    tools = ["e2fsprogs", "xfsprogs", "lvm2", "ndctl", "util-linux", "mount"]
    missing = [p for p in tools if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(p), runtime)]
    tap(not missing, "the runtime stage installs %s" % ", ".join(tools), "missing: %s" % ", ".join(missing))
    # Every package the runtime stage would install is a Debian 12 package
    # (known to dpkg here: scripts/install-deps.sh installs the same set).
    unknown = []
    for p in pkgs + tools:
        q = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        if b"installed" not in q.stdout:
            unknown.append(p)
    tap(not unknown, "every runtime package is a known Debian package", "not known to dpkg: %s" % ", ".join(unknown))
finally:
    shutil.rmtree(work, ignore_errors=True)

T.plan()
T.diag("%d passed, %d failed, 0 skipped" % (T.passed, T.failed))
sys.exit(1 if T.failed else 0)
