/* lvmshell.h: lvm2 commands through long-lived `lvm` shell processes.
 * Private to backends/ (the lvm backend's tools).
 *
 * Every lvm2 tool started anew pays for its start (exec, libdevmapper, the
 * configuration, locking set-up) before it does its work; run without a
 * command, `lvm` reads commands from its stdin, one per line, and pays that
 * once. Measured in a 2-vCPU TCG guest, 24 volumes of 64 MiB: lvcreate as
 * separate processes 22.1 s one at a time, 15.4 s four at a time; in one
 * shell 4.5-4.9 s, in two 3.2 s; lvremove 20.4 / 17.3 s against 3.5 s.
 *
 * The shell runs with LVM_COMMAND_PROFILE=lvmdbusd, the command profile
 * lvm2 ships for its D-Bus daemon, which drives the shell the same way:
 * each command then writes one JSON document to the descriptor named by
 * LVM_REPORT_FD, holding the command's report (if it has one) and a log
 * whose last shell status entry carries the command's return code
 * (log_ret_code 1: success). After a failure, `lastlog` gives the error
 * messages. A new shell is first asked `version`; a shell that does not
 * answer that as expected (no such profile, an lvm built without a shell,
 * no lvm at all) is not used again: every command then runs as a process of
 * its own (pcsi_proc_run()), and so does one whose arguments the shell
 * could split differently (anything outside [A-Za-z0-9._+,:=/-]).
 *
 * Contract:
 *  - pcsi_lvmshell_run() completes like pcsi_proc_run(): |cb| runs exactly
 *    once, on a later loop turn, with |p| filled: out = the command's JSON
 *    document (NUL-terminated), err = its error messages, one per line;
 *    exit_status 0 on success, else lvm's return code (5: failed, 3:
 *    invalid command line); error -ETIMEDOUT when it ran past
 *    opts->timeout_ms. A shell whose command times out is stopped (SIGTERM
 *    to its process group, SIGKILL 5 s later) and |cb| runs once it has
 *    exited, as for a process; a shell that dies under a command ends it
 *    with that command failed (term_signal or exit_status set).
 *  - up to |n| shells run, each one command at a time; more commands wait
 *    in submission order. A shell idle for |idle_ms| exits; the next
 *    command starts one again.
 *  - the shells' environment is proc.h's (LC_ALL=C, the fixed PATH) plus
 *    |env| and the two variables above; each runs in its own process group.
 *  - idle shells do not keep the loop alive; a running command does.
 *  - SIGPIPE must be ignored (the daemon does): a command written to a
 *    shell that went away meanwhile fails with EPIPE, and goes to the next
 *    shell, since that one never read it.
 */
#ifndef PCSI_LVMSHELL_H
#define PCSI_LVMSHELL_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/core/proc.h"

struct pcsi_lvmshell;

/* |n| >= 1 shells at most; |env| ("NAME=value", NULL-terminated, may be
 * NULL) is borrowed for the lifetime of the shells. Nothing starts yet. */
struct pcsi_lvmshell *pcsi_lvmshell_new(uv_loop_t *loop, unsigned n, const char *const *env,
					uint64_t idle_ms);

/* Runs lvm2 command |argv| (argv[0] is the command: lvcreate, vgs, ...;
 * borrowed for the duration of the call). */
void pcsi_lvmshell_run(struct pcsi_lvmshell *sh, struct pcsi_proc *p, const char *const *argv,
		       const struct pcsi_proc_opts *opts, pcsi_proc_cb cb, void *data);

/* Whether the shells are used (false once one failed its first question). */
bool pcsi_lvmshell_usable(const struct pcsi_lvmshell *sh);

/* Ends the shells (each exits when it reads the end of its input; one that
 * has not after 5 s is killed), reaps them and frees |sh|. No command may
 * be running. Turns the loop until then: call it only from outside
 * uv_run(). NULL is ignored. */
void pcsi_lvmshell_free(struct pcsi_lvmshell *sh);

#endif
