/* common.h: what the libFuzzer targets share.
 *
 *  - A scratch directory per process (/tmp/pcsi-fuzz-NAME.XXXXXX), removed at
 *    exit: unix sockets, the node's state directory, the sandbox (sandbox.h).
 *  - Running a libuv loop until it is idle: nothing left that would happen
 *    without new input or time passing (no request in flight, no handle
 *    closing, no prepare/idle/check handle active, no timer due). Timers due
 *    later (idle timeouts, grpc-timeout deadlines) do not count. A loop that
 *    does not become idle within FUZZ_IDLE_LIMIT_MS is a bug (a call that
 *    never ends, a busy loop): the target aborts, and libFuzzer keeps the input.
 *  - A client socket that writes an input and reads the answers.
 *  - Checks that abort with a message, so that a broken invariant is a crash
 *    libFuzzer reports and keeps, like a sanitizer finding. */
#ifndef PCSI_FUZZ_COMMON_H
#define PCSI_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

/* How long one input's loop may take before it counts as hung: the
 * environment's PCSI_FUZZ_IDLE_LIMIT_MS (run-fuzz.sh sets it below
 * libFuzzer's -timeout, both from the slowest seed input as the machine runs
 * it now), else FUZZ_IDLE_LIMIT_MS, below libFuzzer's default there. */
#define FUZZ_IDLE_LIMIT_MS 8000
uint64_t fuzz_idle_limit_ns(void);

/* The process's scratch directory, made on first use. */
const char *fuzz_scratch(const char *name);

/* True when |loop| has nothing to do now (see above). */
bool fuzz_loop_idle(uv_loop_t *loop);

/* Runs |loop| (UV_RUN_NOWAIT turns) until it is idle and |done| (may be NULL)
 * returns true; |between| (may be NULL) runs after every turn, e.g. to read
 * what the server wrote to a client socket. Aborts after fuzz_idle_limit_ns(). */
void fuzz_run_until_idle(uv_loop_t *loop, bool (*done)(void *data), void (*between)(void *data),
			 void *data);

/* Runs |loop| until nothing is left in it at all, then checks that every
 * handle was closed. */
void fuzz_drain_loop(uv_loop_t *loop);

/* A client socket of a target (unix or TCP, connected): what it sends, and
 * everything the server answers read and dropped, so that the server never
 * waits for the socket. */
struct fuzz_client {
	uv_loop_t *loop;
	int fd;
	bool eof; /* the server closed the connection */
};

/* Connects |cl|'s socket (made with SOCK_NONBLOCK) to |sa|, running the loop
 * while the connection is under way (a full accept queue empties only when
 * the server accepts), so that neither a signal (libFuzzer's timers) nor a
 * slow accept fails it. Aborts with errno's text when the connect fails. */
void fuzz_client_connect(struct fuzz_client *cl, const struct sockaddr *sa, unsigned len);

/* Sends |n| bytes, running the loop while the socket is full. Stops early
 * when the server closed the connection. */
void fuzz_client_send(struct fuzz_client *cl, const uint8_t *p, size_t n);

/* Reads what has arrived (|data| is the client: a |between| callback). */
void fuzz_client_read(void *data);

/* Checks |text| (|len| bytes) against the Prometheus text format 0.0.4 as
 * metrics.h promises it: valid UTF-8, "# HELP" / "# TYPE" lines, samples
 * "name{label=\"value\",...} number" with only \\, \" and \n escaped, label
 * values of at most |label_max| bytes. Aborts on the first bad line. */
void fuzz_check_exposition(const char *text, size_t len, size_t label_max);

/* Aborts with |what| when |cond| is false. */
#define FUZZ_CHECK(cond, what)                               \
	do {                                                 \
		if (!(cond))                                 \
			fuzz_fail(__FILE__, __LINE__, what); \
	} while (0)

void fuzz_fail(const char *file, int line, const char *what) __attribute__((noreturn));

/* A NUL-terminated heap copy of |n| bytes (ASan sees reads past the end). */
char *fuzz_strndup(const uint8_t *p, size_t n);

#endif
