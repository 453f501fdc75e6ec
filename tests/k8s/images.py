#!/usr/bin/python3
"""Container images for the test cluster, built here, nothing pulled.

Each image is one gzip layer (level 1) of files copied from this machine (a
binary, the shared libraries `ldd` names for it, the dynamic loader), written as an OCI
image layout tarball that `ctr -n k8s.io images import` takes. The driver
image holds what manifests/Containerfile installs: pmem-csi-driver and the
tools it runs (mkfs.ext4, mkfs.xfs, lvm2, ndctl, cxl, mount, umount, blkid, wipefs,
blkdiscard, dd) from Debian 12, the same packages. With e2e=True, also the images
that Kubernetes' storage e2e suite runs (e2e_images()), under the names
e2e.test asks for.

usage: images.py [--e2e] OUTDIR DRIVER TOOL=BINARY...   (see build_all())
Tarballs are cached in OUTDIR by the hash of their content.

containerd_disk() imports the tarballs here, with the host's containerd (the
one the guests run), into a containerd root, and makes it an ext4 disk image
that each node mounts as its /var/lib/containerd (vm-run --disk: the guest's
writes are kept apart, the image never changes): importing and unpacking in
each TCG guest took two minutes a node, copying the root in through 9p 50 s
with both nodes booting; from the disk containerd reads only what it uses.
The image is kept in the tools' cache (PCSI_CACHE, /var/cache/pmem-csi), not
in a cluster's work directory.
"""
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

LOADER = "/lib64/ld-linux-x86-64.so.2"


def ldd(path):
    """The shared libraries of an ELF file, resolved ([] for a static one)."""
    r = subprocess.run(["ldd", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if "not a dynamic executable" in r.stdout or "statically linked" in r.stdout:
        return []
    if r.returncode != 0:
        raise RuntimeError("ldd %s: %s" % (path, r.stdout))
    if "not found" in r.stdout:
        raise RuntimeError("ldd %s: unresolved: %s" % (path, r.stdout))
    libs = re.findall(r"=> (/\S+)", r.stdout)
    libs += re.findall(r"^\s*(/\S+)", r.stdout, re.M)
    return sorted(set(libs))


def norm(path):
    """Where |path| lives on a merged-/usr Debian: its directory resolved."""
    path = os.path.abspath(path)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path)).lstrip("/")


class Rootfs:
    """Files for one layer, laid out like Debian 12 (merged /usr: bin, sbin,
    lib, lib64 are links into usr/): image path -> (host path or bytes, mode),
    or a symlink target."""

    def __init__(self):
        self.files = {}
        self.links = {"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}
        self.dirs = set(["tmp", "dev", "proc", "sys", "etc", "run", "var", "var/tmp", "usr/bin",
                         "usr/sbin", "usr/lib", "usr/lib64"])

    def add_file(self, host, dest=None, mode=None):
        dest = norm(dest or host)
        st = os.stat(host)
        self.files[dest] = (host, mode if mode is not None else (st.st_mode & 0o7777))
        return dest

    def _add_real(self, path):
        """|path| and, when it is a symlink, the file it names (linked)."""
        real = os.path.realpath(path)
        self.add_file(real)
        if norm(path) != norm(real):
            self.links[norm(path)] = "/" + norm(real)
        return real

    def add_binary(self, host, dest=None):
        """A program with its libraries and the loader; at |dest| when given,
        else where it is here (a link, like lvcreate -> lvm, stays a link)."""
        real = os.path.realpath(host)
        if dest:
            self.add_file(real, dest)
        else:
            self._add_real(host)
        libs = ldd(real)
        for lib in libs:
            self._add_real(lib)
        if libs and os.path.exists(LOADER):
            self._add_real(LOADER)

    def add_link(self, dest, target):
        self.links[norm(dest)] = target

    def add_text(self, dest, text, mode=0o644):
        self.files[dest.lstrip("/")] = (text.encode(), mode)

    def tar(self):
        """A deterministic tar of the rootfs (mtime 0, root-owned, sorted)."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
            dirs = set(self.dirs)
            for p in list(self.files) + list(self.links):
                d = os.path.dirname(p)
                while d:
                    dirs.add(d)
                    d = os.path.dirname(d)
            dirs -= set(self.links)
            for d in sorted(dirs):
                ti = tarfile.TarInfo(d)
                ti.type = tarfile.DIRTYPE
                ti.mode = 0o1777 if d in ("tmp", "var/tmp") else 0o755
                t.addfile(ti)
            for p in sorted(self.links):
                if p in self.files:
                    continue
                ti = tarfile.TarInfo(p)
                ti.type = tarfile.SYMTYPE
                ti.linkname = self.links[p]
                ti.mode = 0o777
                t.addfile(ti)
            for p in sorted(self.files):
                src, mode = self.files[p]
                data = src if isinstance(src, bytes) else open(src, "rb").read()
                ti = tarfile.TarInfo(p)
                ti.size = len(data)
                ti.mode = mode
                t.addfile(ti, io.BytesIO(data))
        return buf.getvalue()


def containerfile_env():
    """The ENV settings of manifests/Containerfile's runtime stage, as
    "NAME=value" strings: the driver image here runs with what the real one has."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "manifests", "Containerfile")
    with open(path) as f:
        runtime = f.read().split("\nFROM ")[-1]
    return re.findall(r"^ENV\s+(\S+=\S+)\s*$", runtime, re.M)


def oci_tarball(rootfs, ref, entrypoint, cmd=None, env=None):
    """An OCI image layout (as a tar) holding one image named |ref|."""
    layer = rootfs.tar()
    gz = gzip.compress(layer, compresslevel=1, mtime=0)  # level 9 took 62 s for all images here
    blobs = {}

    def blob(data):
        d = hashlib.sha256(data).hexdigest()
        blobs[d] = data
        return "sha256:" + d

    config = {
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": entrypoint, "Cmd": cmd or [],
                   "Env": (env or []) + ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                   "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
        "history": [{"created_by": "tests/k8s/images.py"}],
    }
    cdata = json.dumps(config, sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": blob(cdata),
                   "size": len(cdata)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": blob(gz),
                    "size": len(gz)}],
    }
    mdata = json.dumps(manifest, sort_keys=True).encode()
    mdigest = blob(mdata)
    index = {"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": mdigest, "size": len(mdata),
        "annotations": {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1]},
    }]}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as t:
        def add(name, data):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = 0o644
            t.addfile(ti, io.BytesIO(data))
        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", json.dumps(index, sort_keys=True).encode())
        for d in sorted(blobs):
            add("blobs/sha256/" + d, blobs[d])
    return out.getvalue()


def driver_rootfs(driver):
    r = Rootfs()
    r.add_binary(driver, "/usr/local/bin/pmem-csi-driver")
    for tool in ("/sbin/mkfs.ext4", "/sbin/mke2fs", "/sbin/mkfs.xfs", "/bin/mount", "/bin/umount",
                 "/sbin/blkid", "/sbin/wipefs", "/sbin/blkdiscard", "/bin/dd", "/bin/sh", "/sbin/lvm",
                 "/usr/bin/ndctl", "/usr/bin/cxl", "/sbin/resize2fs", "/usr/sbin/xfs_growfs", "/sbin/fsfreeze"):
        if os.path.exists(tool):
            r.add_binary(tool)
    for t in ("lvcreate", "lvremove", "lvrename", "lvs", "vgs", "pvs", "vgcreate", "vgextend", "pvcreate",
              "lvextend", "vgremove", "pvremove"):
        r.add_link("/usr/sbin/" + t, "lvm")
    # lvmdbusd.profile: the driver's lvm shells answer in JSON with it (backends/lvmshell.h).
    for f in ("/etc/mke2fs.conf", "/etc/lvm/lvm.conf", "/etc/lvm/profile/lvmdbusd.profile"):
        if os.path.exists(f):
            r.add_file(f)
    r.add_text("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\n")
    r.add_text("/etc/group", "root:x:0:\n")
    return r


def intel_rootfs(intel):
    """Intel PMEM-CSI v1.1.0's image as its Dockerfile makes it: its driver
    (built from its source by scripts/go-tools.sh) on Debian with file,
    xfsprogs, e2fsprogs, lvm2, ndctl and parted (here Debian 12's)."""
    r = debian_rootfs(("dash", "coreutils", "util-linux", "mount", "e2fsprogs", "xfsprogs", "lvm2",
                       "ndctl", "file", "parted", "kmod"))
    r.add_binary(intel, "/usr/local/bin/pmem-csi-driver")
    for f in ("/etc/mke2fs.conf", "/etc/lvm/lvm.conf", "/usr/share/misc/magic.mgc", "/usr/lib/file/magic.mgc"):
        if os.path.exists(f):
            r._add_real(f)
    return r


def static_rootfs(binary, dest):
    r = Rootfs()
    r.add_binary(binary, dest)
    r.add_text("/etc/passwd", "root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n")
    r.add_text("/etc/group", "root:x:0:\nnobody:x:65534:\n")
    return r


def busybox_rootfs():
    r = static_rootfs("/bin/busybox", "/bin/busybox")
    out = subprocess.run(["/bin/busybox", "--list"], stdout=subprocess.PIPE, text=True, check=True).stdout
    for applet in out.split():
        if applet != "busybox":
            r.add_link("/usr/bin/" + applet, "busybox")
    return r


def debian_rootfs(packages=("dash", "bash", "coreutils", "grep", "sed", "findutils", "diffutils",
                              "util-linux", "mount", "gzip", "tar", "procps")):
    """The programs of these Debian packages (those in bin/ and sbin/) with
    their libraries, /bin/sh being dash, as in a Debian image."""
    r = Rootfs()
    out = subprocess.run(["dpkg", "-L"] + list(packages), stdout=subprocess.PIPE, text=True, check=True).stdout
    for path in out.split("\n"):
        if re.match(r"^/(usr/)?s?bin/[^/]+$", path) and os.path.isfile(path) and os.access(path, os.X_OK):
            r.add_binary(path)
    r.add_link("/usr/bin/sh", "dash")
    r.add_text("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n")
    r.add_text("/etc/group", "root:x:0:\nnobody:x:65534:\n")
    return r


def agnhost_rootfs(agnhost):
    """agnhost as its image has it (test/images/agnhost/Dockerfile): /agnhost
    (and /agnhost-2, a link) on a busybox userland (alpine's there), /uploads
    for netexec, the user and group that a SupplementalGroups test expects."""
    r = busybox_rootfs()
    r.add_binary(agnhost, "/agnhost")
    r.add_link("/agnhost-2", "agnhost")
    r.dirs.add("uploads")
    r.add_text("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n"
               "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n")
    r.add_text("/etc/group", "root:x:0:\nnobody:x:65534:\nuser-defined-in-image:x:1000:\n"
               "group-defined-in-image:x:50000:user-defined-in-image\n")
    return r


# The images of test/utils/image/manifest.go (k8s.io/kubernetes v1.36.1) that
# the External Storage tests run on Linux nodes, by their names there.
E2E_REGISTRY = "registry.k8s.io/e2e-test-images/"
E2E_BUSYBOX = E2E_REGISTRY + "busybox:1.37.0-1"
E2E_AGNHOST = E2E_REGISTRY + "agnhost:2.63.0"
E2E_GLIBC = E2E_REGISTRY + "glibc-dns-testing:2.0.0"
E2E_NGINX = E2E_REGISTRY + "nginx:1.15-4"


def e2e_images(agnhost):
    """{ref: (rootfs, entrypoint, cmd)} for e2e.test's storage tests:
    - busybox (the default test image of e2epod): Debian's busybox, as ours;
    - agnhost (subPath's containers, the hostexec pods that nsenter into the
      node): built from k8s.io/kubernetes/test/images/agnhost of the same
      release (scripts/go-tools.sh agnhost), entrypoint /agnhost, cmd pause;
    - glibc-dns-testing (multiVolume's concurrent-access tests, for GNU dd's
      iflag=direct and oflag=nocache, which busybox lacks): Debian 12's
      coreutils and friends, like the real image (debian:bookworm-slim; its
      dnsutils and CoreDNS only serve the DNS tests);
    - nginx (volumes' exec test, which runs only /bin/sh in it): busybox, like
      the real image's alpine userland; no nginx."""
    return {
        E2E_BUSYBOX: (busybox_rootfs(), [], ["sh"]),
        E2E_AGNHOST: (agnhost_rootfs(agnhost), ["/agnhost"], ["pause"]),
        E2E_GLIBC: (debian_rootfs(), [], ["bash"]),
        E2E_NGINX: (busybox_rootfs(), [], ["sh"]),
    }


def write(outdir, name, data):
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, name + ".tar")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return path


CONTAINERD_ROOTS = os.path.join(os.environ.get("PCSI_CACHE", "/var/cache/pmem-csi"), "containerd")


def containerd_disk(tars, outdir=CONTAINERD_ROOTS, keep=3, timeout=300):
    """An ext4 disk image whose root is a containerd root (content store,
    metadata, overlayfs snapshots) that holds the images of |tars| imported
    and unpacked, in the namespace k8s.io, built by a containerd started here
    for this alone (its own root, state and socket; no CRI plugin) and stopped
    afterwards. Kept in OUTDIR under a key made of the images' index.json
    (which names each manifest by its digest): an unchanged set is reused;
    the |keep| images used last stay, older ones go."""
    key = hashlib.sha256()
    for t in sorted(tars):
        with tarfile.open(t) as tf:
            key.update(tf.extractfile("index.json").read())
    disk = os.path.join(outdir, "containerd-" + key.hexdigest()[:16] + ".ext4")
    if os.path.isfile(disk):
        os.utime(disk)
        return disk
    os.makedirs(outdir, exist_ok=True)
    old = sorted((os.path.getmtime(os.path.join(outdir, d)), d) for d in os.listdir(outdir)
                 if d.startswith("containerd-"))
    for _, d in old[:max(0, len(old) - keep + 1)]:
        d = os.path.join(outdir, d)
        if os.path.isdir(d):  # a root directory of an older version of this script
            shutil.rmtree(d, ignore_errors=True)
        else:
            os.remove(d)
    tmp = tempfile.mkdtemp(prefix=".containerd-", dir=outdir)
    try:
        root = os.path.join(tmp, "root")
        _import_all(tars, root, timeout)
        used = int(subprocess.run(["du", "-sb", root], check=True, stdout=subprocess.PIPE,
                                  text=True).stdout.split()[0])
        # Sparse: room for what the pods write (their containers' layers)
        # costs nothing until written. No journal: nothing written survives.
        img = os.path.join(tmp, "disk.ext4")
        with open(img, "wb") as f:
            f.truncate((used * 3 // 2 + (2 << 30)) >> 20 << 20)
        r = subprocess.run(["mke2fs", "-q", "-F", "-t", "ext4", "-O", "^has_journal", "-m", "0", "-L", "containerd",
                            "-E", "root_owner=0:0", "-d", root, img],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError("mke2fs -d %s: %s" % (root, r.stdout.strip()))
        os.rename(img, disk)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return disk


def _import_all(tars, root, timeout):
    """containerd_disk()'s work: a containerd of its own imports |tars| into |root|."""
    state = tempfile.mkdtemp(prefix="pcsi-ctrd-")  # short: the socket's path
    sock = os.path.join(state, "sock")
    with open(os.path.join(state, "config.toml"), "w") as f:
        f.write('version = 2\nroot = "%s"\nstate = "%s"\n'
                'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs",'
                ' "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",'
                ' "io.containerd.snapshotter.v1.aufs"]\n'
                '[grpc]\n  address = "%s"\n[ttrpc]\n  address = "%s.ttrpc"\n'
                % (root, os.path.join(state, "run"), sock, sock))
    log = open(os.path.join(state, "containerd.log"), "w+")
    proc = subprocess.Popen(["containerd", "--config", os.path.join(state, "config.toml")],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(sock):
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError("containerd for the image store did not start:\n" + log.read()[-3000:])
            time.sleep(0.1)
        for t in sorted(tars):
            r = subprocess.run(["ctr", "--address", sock, "-n", "k8s.io", "images", "import",
                                "--snapshotter", "overlayfs", "--no-unpack=false", t],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout)
            if r.returncode != 0:
                raise RuntimeError("ctr images import %s: %s" % (t, r.stderr.strip()))
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(state, ignore_errors=True)


def build_pause(outdir):
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pause.c")
    exe = os.path.join(outdir, "pause")
    subprocess.run(["cc", "-static", "-O2", "-o", exe, src], check=True)
    return exe


# Intel PMEM-CSI v1.1.0's deployment files name these images. The
# provisioner is v6.3.0 under v3.2.1's name (the Go module proxy serves no
# release before v6; v6.3.0 takes every flag the YAML gives v3.2.1); the
# registrar is our stand-in (tests/tools/pcsi-registrar.c: no release of
# node-driver-registrar is served at all).
INTEL_DRIVER = "docker.io/intel/pmem-csi-driver:v1.1.0"
INTEL_PROVISIONER = "registry.k8s.io/sig-storage/csi-provisioner:v3.2.1"
INTEL_REGISTRAR = "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.5.1"


def intel_images(tools):
    return {
        INTEL_DRIVER: (intel_rootfs(tools["intel-pmem-csi"]), ["/usr/local/bin/pmem-csi-driver"], None),
        INTEL_PROVISIONER: (static_rootfs(tools["csi-provisioner"], "/csi-provisioner"), ["/csi-provisioner"], None),
        INTEL_REGISTRAR: (static_rootfs(tools["pcsi-registrar"], "/csi-node-driver-registrar"),
                          ["/csi-node-driver-registrar"], None),
    }


def build_all(outdir, driver, tools, e2e=False, intel=False):
    """The images the cluster and its tests use; |tools| maps a Go tool name
    to its binary (scripts/go-tools.sh). With |e2e|, also e2e_images() (then
    |tools| names agnhost too); with |intel|, intel_images() (|tools| names
    intel-pmem-csi and pcsi-registrar). Returns {ref: tarball path}."""
    os.makedirs(outdir, exist_ok=True)
    imgs = {
        "docker.io/library/pmem-csi-driver:0.1.0":
            (driver_rootfs(driver), ["/usr/local/bin/pmem-csi-driver"], None, containerfile_env()),
        "registry.k8s.io/pause:3.10":
            (static_rootfs(build_pause(outdir), "/pause"), ["/pause"], None),
        "docker.io/library/busybox:1.36":
            (busybox_rootfs(), [], ["sh"]),
        "registry.k8s.io/sig-storage/csi-provisioner:v6.3.0":
            (static_rootfs(tools["csi-provisioner"], "/csi-provisioner"), ["/csi-provisioner"], None),
        "registry.k8s.io/sig-storage/csi-resizer:v2.3.0":
            (static_rootfs(tools["csi-resizer"], "/csi-resizer"), ["/csi-resizer"], None),
        "registry.k8s.io/sig-storage/csi-snapshotter:v8.7.0":
            (static_rootfs(tools["csi-snapshotter"], "/csi-snapshotter"), ["/csi-snapshotter"], None),
        "registry.k8s.io/sig-storage/snapshot-controller:v8.7.0":
            (static_rootfs(tools["snapshot-controller"], "/snapshot-controller"), ["/snapshot-controller"], None),
        "registry.k8s.io/coredns/coredns:pcsi":
            (static_rootfs(tools["coredns"], "/coredns"), ["/coredns"], None),
    }
    if e2e:
        imgs.update(e2e_images(tools["agnhost"]))
    if intel:
        imgs.update(intel_images(tools))
    out = {}
    for ref, (rootfs, ep, cmd, *env) in imgs.items():
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", ref)
        out[ref] = write(outdir, name, oci_tarball(rootfs, ref, ep, cmd, env[0] if env else None))
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    e2e = bool(args) and args[0] == "--e2e"
    args = args[1:] if e2e else args
    if len(args) < 2:
        sys.exit(__doc__)
    tools = dict(a.split("=", 1) for a in args[2:])
    for ref, path in build_all(args[0], args[1], tools, e2e).items():
        print(ref, path, os.path.getsize(path))
