"""How the kernel serves the page faults of a MAP_SYNC mapping on a DAX
file (fs_dax tracepoints), for the vm tests that check huge pages."""
import mmap
import os
import subprocess

MiB = 1 << 20
TRACING = "/sys/kernel/tracing"


def dax_faults(path, size=64 * MiB):
    """Maps |size| bytes of a file on a DAX mount with MAP_SYNC, writes to
    every 4 KiB page, and counts how the kernel served the faults (fs_dax
    tracepoints): (bytes mapped with 2 MiB pages, PMD faults that fell back,
    4 KiB faults)."""
    if not os.path.ismount(TRACING):
        subprocess.run(["mount", "-t", "tracefs", "nodev", TRACING], check=True)
    for ev in ("dax_pmd_fault_done", "dax_pte_fault_done"):
        with open(os.path.join(TRACING, "events", "fs_dax", ev, "enable"), "w") as f:
            f.write("1")
    with open(os.path.join(TRACING, "trace"), "w") as f:
        f.write("")  # clear
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
        m = mmap.mmap(fd, size, flags=0x03 | 0x80000)  # MAP_SHARED_VALIDATE | MAP_SYNC
        for off in range(0, size, 4096):
            m[off] = 1
        m.close()
    finally:
        os.close(fd)
    with open(os.path.join(TRACING, "trace")) as f:
        trace = f.read()
    for ev in ("dax_pmd_fault_done", "dax_pte_fault_done"):
        with open(os.path.join(TRACING, "events", "fs_dax", ev, "enable"), "w") as f:
            f.write("0")
    pmd = [l for l in trace.splitlines() if "dax_pmd_fault_done:" in l]
    mapped = sum(1 for l in pmd if l.rstrip().endswith(("NOPAGE", "NEEDDSYNC")))
    return mapped * 2 * MiB, sum(1 for l in pmd if l.rstrip().endswith("FALLBACK")), \
        sum(1 for l in trace.splitlines() if "dax_pte_fault_done:" in l)
