/* sandbox.h: running the Node service under a fuzzer, as root, safely.
 *
 * NodeStageVolume, NodePublishVolume and NodeUnpublishVolume create, remove
 * and unmount whatever paths kubelet names, mount and unmount (mount(2),
 * umount2(2)), and run mkfs. A fuzzer names every path there is. The targets
 * that run those handlers (fuzz-grpc, fuzz-csi) are linked with -Wl,--wrap
 * for the few calls that change the filesystem, the mount table or start a
 * process (mkdir, rmdir, unlink, open, open64, rename, mount, umount2,
 * uv_spawn), and while an input runs (between fuzz_sandbox_begin() and
 * fuzz_sandbox_end()):
 *   - a path outside the scratch directory is taken as relative to
 *     <scratch>/root (so "/var/lib/kubelet/x" is made there); a path with a
 *     ".." component is refused with EACCES;
 *   - mount() and umount2() fail with EPERM: the mount table never changes;
 *   - no process starts: uv_spawn() fails as libuv fails for a tool that
 *     cannot run (the handle is initialised, so it can be closed), with
 *     UV_ENOENT.
 * Reading (stat, the mount table, libblkid) is left alone: it changes
 * nothing. fuzz_sandbox_end() empties <scratch>/root and the records in the
 * node's state directory, so every input starts from the same state. Outside
 * an input the calls go through unchanged (libFuzzer's own corpus files). */
#ifndef PCSI_FUZZ_SANDBOX_H
#define PCSI_FUZZ_SANDBOX_H

/* Makes <scratch>/root and <scratch>/state; returns the state path (the
 * node's -statePath). */
const char *fuzz_sandbox_setup(const char *name);

void fuzz_sandbox_begin(void);
void fuzz_sandbox_end(void);

#endif
