#!/usr/bin/python3
"""The documentation against the code: every flag the driver's -help lists
and every StorageClass parameter its parser reads is in
docs/configuration.md, every metric it registers in docs/metrics.md; every
relative link of README.md, CONTRIBUTING.md, CHANGELOG.md and docs/ resolves
(file and, with #, heading); the README stays a front page (at most 150
lines, an index naming every page of docs/); LICENSE is the Apache-2.0 text
meson.build declares. TAP output.

usage: test_docs.py PATH-TO-pmem-csi-driver
"""
import os
import re
import subprocess
import sys

TOP = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DRIVER = sys.argv[1]
results = []


def test(name):
    def deco(fn):
        problems = []
        try:
            problems = fn() or []
        except Exception as e:  # a crash of the check is a failure, said
            problems = ["%s: %s" % (type(e).__name__, e)]
        results.append((name, problems))
        return fn
    return deco


def read(*p):
    with open(os.path.join(TOP, *p), encoding="utf-8") as f:
        return f.read()


def docs():
    return sorted(f for f in os.listdir(os.path.join(TOP, "docs")) if f.endswith(".md"))


def help_flags():
    r = subprocess.run([DRIVER, "-help"], capture_output=True, text=True, timeout=30)
    text = r.stdout + r.stderr
    return sorted(set(re.findall(r"(?:^|\s)-([A-Za-z][A-Za-z0-9_-]*)(?==|,|\s|$)", text, re.M)))


@test("every flag in `pmem-csi-driver -help` is documented in docs/configuration.md")
def _():
    flags = help_flags()
    conf = read("docs", "configuration.md")
    if len(flags) < 30:
        return ["only %d flags parsed from -help: %r" % (len(flags), flags)]
    return ["-%s is not in docs/configuration.md" % f for f in flags
            if not re.search(r"`-%s[`=, ]" % re.escape(f), conf)]


@test("every StorageClass parameter daemon/csi/params.c reads is documented in docs/configuration.md")
def _():
    keys = sorted(set(re.findall(r'strcmp\(k, "([^"]+)"\)', read("daemon", "csi", "params.c"))))
    conf = read("docs", "configuration.md")
    if len(keys) < 8:
        return ["only %d parameters found in params.c: %r" % (len(keys), keys)]
    return ["parameter %s is not in docs/configuration.md" % k for k in keys if "`%s`" % k not in conf]


@test("every metric daemon/metrics/metrics.c registers is documented in docs/metrics.md")
def _():
    names = sorted(set(re.findall(r'(?:gauge|counter)\(\s*"([a-z_]+)"|METRIC_HISTOGRAM, "([a-z_]+)"',
                                  read("daemon", "metrics", "metrics.c"))))
    names = sorted(set(a or b for a, b in names))
    doc = read("docs", "metrics.md")
    if len(names) < 15:
        return ["only %d metrics found: %r" % (len(names), names)]
    return ["%s is not in docs/metrics.md" % n for n in names if n not in doc]


def anchors(path):
    """GitHub's heading anchors of a Markdown file."""
    out = set()
    for h in re.findall(r"^#{1,6} (.+)$", open(path, encoding="utf-8").read(), re.M):
        a = re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        out.add(a)
    return out


@test("every relative link in README.md, CONTRIBUTING.md, CHANGELOG.md and docs/*.md resolves")
def _():
    problems, n = [], 0
    files = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md"] + ["docs/" + f for f in docs()]
    for f in files:
        text = re.sub(r"```.*?```", "", read(f), flags=re.S)  # not in code blocks
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http:, mailto:
            n += 1
            path, _, frag = target.partition("#")
            full = os.path.normpath(os.path.join(TOP, os.path.dirname(f), path)) if path else os.path.join(TOP, f)
            if not os.path.exists(full):
                problems.append("%s: %s does not exist" % (f, target))
            elif frag and full.endswith(".md") and frag not in anchors(full):
                problems.append("%s: %s: no such heading" % (f, target))
    if n < 20:
        problems.append("only %d links checked" % n)
    return problems


@test("README.md is a front page: at most 150 lines, its index links every page of docs/")
def _():
    readme = read("README.md")
    problems = []
    if readme.count("\n") > 150:
        problems.append("README.md has %d lines" % readme.count("\n"))
    for f in docs():
        if "](docs/%s)" % f not in readme:
            problems.append("docs/%s is not in the README's index" % f)
    return problems


@test("LICENSE is the Apache License 2.0, as meson.build declares; CONTRIBUTING.md and CHANGELOG.md exist")
def _():
    problems = []
    lic = read("LICENSE")
    if "Apache License" not in lic or "Version 2.0, January 2004" not in lic or "END OF TERMS AND CONDITIONS" not in lic:
        problems.append("LICENSE is not the Apache-2.0 text")
    if not re.search(r"license:\s*'Apache-2.0'", read("meson.build")):
        problems.append("meson.build does not declare Apache-2.0")
    for f in ("CONTRIBUTING.md", "CHANGELOG.md"):
        if not os.path.exists(os.path.join(TOP, f)):
            problems.append(f + " is missing")
    return problems


print("TAP version 13")
print("1..%d" % len(results))
failed = 0
for i, (name, problems) in enumerate(results, 1):
    print("%s %d - %s" % ("not ok" if problems else "ok", i, name))
    for p in problems:
        print("# " + p)
    failed += bool(problems)
sys.exit(1 if failed else 0)
