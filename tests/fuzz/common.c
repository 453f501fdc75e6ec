/* common.c: see common.h. */
#include "tests/fuzz/common.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char scratch[128];
static int report_fd = 2;

/* Before libFuzzer's main: -close_fd_mask=2 silences the daemon's log on
 * stderr, but a failed check must still be read. And like main.c: a peer
 * that has gone is a write error, not a signal. */
__attribute__((constructor)) static void setup(void)
{
	int fd = fcntl(2, F_DUPFD_CLOEXEC, 3);

	if (fd >= 0)
		report_fd = fd;
	signal(SIGPIPE, SIG_IGN);
}

/* Sanitizer findings end the run, even when the binary is started by hand. */
const char *__asan_default_options(void);
const char *__ubsan_default_options(void);

const char *__asan_default_options(void)
{
	return "detect_leaks=1";
}

const char *__ubsan_default_options(void)
{
	return "halt_on_error=1:print_stacktrace=1";
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	remove(path);
	return 0;
}

static void remove_scratch(void)
{
	nftw(scratch, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *fuzz_scratch(const char *name)
{
	if (scratch[0])
		return scratch;
	/* tmpfs where there is one: the node's records are fsync'ed. */
	snprintf(scratch, sizeof(scratch), "%s/pcsi-fuzz-%s.XXXXXX",
		 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", name);
	if (!mkdtemp(scratch)) {
		perror("fuzz: mkdtemp");
		abort();
	}
	atexit(remove_scratch);
	return scratch;
}

void fuzz_fail(const char *file, int line, const char *what)
{
	dprintf(report_fd, "FUZZ CHECK FAILED at %s:%d: %s\n", file, line, what);
	abort();
}

char *fuzz_strndup(const uint8_t *p, size_t n)
{
	char *s = malloc(n + 1);

	if (!s)
		abort();
	memcpy(s, p, n);
	s[n] = '\0';
	return s;
}

static void check_handle(uv_handle_t *h, void *arg)
{
	bool *busy = arg;

	if (uv_is_closing(h)) {
		*busy = true;
		return;
	}
	if (!uv_is_active(h))
		return;
	switch (h->type) {
	case UV_PREPARE:
	case UV_IDLE:
	case UV_CHECK:
		*busy = true;
		break;
	case UV_TIMER:
		if (uv_timer_get_due_in((uv_timer_t *)h) == 0)
			*busy = true;
		break;
	default:
		break;
	}
}

uint64_t fuzz_idle_limit_ns(void)
{
	static uint64_t ns;

	if (!ns) {
		const char *e = getenv("PCSI_FUZZ_IDLE_LIMIT_MS");
		unsigned long long ms = e ? strtoull(e, NULL, 10) : 0;

		ns = (ms ? ms : FUZZ_IDLE_LIMIT_MS) * 1000000ull;
	}
	return ns;
}

bool fuzz_loop_idle(uv_loop_t *loop)
{
	bool busy = loop->active_reqs.count > 0;

	if (!busy)
		uv_walk(loop, check_handle, &busy);
	return !busy;
}

/* Work on the thread pool (or a write the peer has yet to read): sleep until
 * the loop has an event, at most 1 ms, rather than spin. */
static void wait_for_loop(uv_loop_t *loop)
{
	struct pollfd p = { .fd = uv_backend_fd(loop), .events = POLLIN };

	poll(&p, 1, 1);
}

void fuzz_run_until_idle(uv_loop_t *loop, bool (*done)(void *data), void (*between)(void *data),
			 void *data)
{
	uint64_t start = uv_hrtime();
	int idle_turns = 0;

	/* Idle twice in a row: the second turn polls once more for I/O that
	 * the first one caused. */
	while (idle_turns < 2) {
		uv_run(loop, UV_RUN_NOWAIT);
		if (between)
			between(data);
		if (fuzz_loop_idle(loop) && (!done || done(data))) {
			idle_turns++;
			continue;
		}
		idle_turns = 0;
		if (uv_hrtime() - start > fuzz_idle_limit_ns())
			fuzz_fail(__FILE__, __LINE__, "the loop did not become idle");
		if (loop->active_reqs.count > 0)
			wait_for_loop(loop);
	}
}

static void count_handle(uv_handle_t *h, void *arg)
{
	(*(unsigned *)arg)++;
}

void fuzz_drain_loop(uv_loop_t *loop)
{
	uint64_t start = uv_hrtime();
	unsigned left = 0;

	while (uv_run(loop, UV_RUN_NOWAIT) != 0) {
		if (uv_hrtime() - start > fuzz_idle_limit_ns())
			fuzz_fail(__FILE__, __LINE__, "the loop did not end");
		if (loop->active_reqs.count > 0)
			wait_for_loop(loop);
	}
	uv_walk(loop, count_handle, &left);
	FUZZ_CHECK(left == 0, "handles left open after everything was shut down");
}

void fuzz_client_read(void *data)
{
	struct fuzz_client *cl = data;
	char buf[16384];
	ssize_t n;

	while (cl->fd >= 0 && !cl->eof) {
		n = recv(cl->fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n > 0 || (n < 0 && errno == EINTR))
			continue;
		if (n == 0 || errno != EAGAIN)
			cl->eof = true;
		break;
	}
}

void fuzz_client_connect(struct fuzz_client *cl, const struct sockaddr *sa, unsigned len)
{
	uint64_t start = uv_hrtime();
	struct pollfd p = { .fd = cl->fd, .events = POLLOUT };
	char why[128];
	int err = 0;
	socklen_t elen = sizeof(err);

	if (connect(cl->fd, sa, len) == 0)
		return;
	err = errno;
	while (err == EINPROGRESS || err == EINTR || err == EAGAIN || err == EALREADY) {
		uv_run(cl->loop, UV_RUN_NOWAIT);
		if (poll(&p, 1, 1) == 1) {
			if (getsockopt(cl->fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
				err = errno;
			break;
		}
		if (uv_hrtime() - start > fuzz_idle_limit_ns())
			fuzz_fail(__FILE__, __LINE__, "the connection was never accepted");
	}
	if (err != 0) {
		snprintf(why, sizeof(why), "cannot connect to the endpoint: %s", strerror(err));
		fuzz_fail(__FILE__, __LINE__, why);
	}
}

void fuzz_client_send(struct fuzz_client *cl, const uint8_t *p, size_t n)
{
	uint64_t start = uv_hrtime();

	while (n > 0 && !cl->eof) {
		ssize_t w = send(cl->fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (w > 0) {
			p += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno != EAGAIN && errno != EINTR)
			break; /* the server closed the connection: the rest is moot */
		uv_run(cl->loop, UV_RUN_NOWAIT);
		fuzz_client_read(cl);
		if (uv_hrtime() - start > fuzz_idle_limit_ns())
			fuzz_fail(__FILE__, __LINE__, "the server stopped reading");
	}
}

/* Length of the valid UTF-8 sequence at |s| (|n| bytes left), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	size_t len, i;
	uint32_t c;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, c = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, c = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, c = s[0] & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3f);
	}
	/* Overlong forms, surrogates, beyond U+10FFFF. */
	if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10ffff)) ||
	    (c >= 0xd800 && c <= 0xdfff))
		return 0;
	return len;
}

static bool name_char(char c, bool first)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
	       (!first && c >= '0' && c <= '9');
}

/* Skips a metric or label name at |p|; NULL when there is none. */
static const char *skip_name(const char *p, const char *end)
{
	const char *s = p;

	while (p < end && name_char(*p, p == s))
		p++;
	return p > s ? p : NULL;
}

static void check_sample(const char *p, const char *end, size_t label_max)
{
	char num[64];
	size_t n;

	p = skip_name(p, end);
	FUZZ_CHECK(p, "metrics: a sample without a metric name");
	if (p < end && *p == '{') {
		p++;
		while (p < end && *p != '}') {
			size_t raw = 0;

			p = skip_name(p, end);
			FUZZ_CHECK(p && p + 1 < end && p[0] == '=' && p[1] == '"',
				   "metrics: a label without name=\"");
			for (p += 2; p < end && *p != '"'; p++, raw++) {
				if (*p != '\\')
					continue;
				p++;
				FUZZ_CHECK(p < end && (*p == '\\' || *p == 'n' || *p == '"'),
					   "metrics: a bad escape in a label value");
			}
			FUZZ_CHECK(p < end, "metrics: a label value without its closing quote");
			FUZZ_CHECK(raw <= label_max, "metrics: a label value above the limit");
			p++;
			if (p < end && *p == ',')
				p++;
		}
		FUZZ_CHECK(p < end, "metrics: labels without their closing brace");
		p++;
	}
	FUZZ_CHECK(p < end && *p == ' ', "metrics: no space before the value");
	p++;
	n = (size_t)(end - p);
	FUZZ_CHECK(n > 0 && n < sizeof(num), "metrics: a value of a strange length");
	memcpy(num, p, n);
	num[n] = '\0';
	if (strcmp(num, "+Inf") && strcmp(num, "-Inf") && strcmp(num, "NaN")) {
		char *e;
		strtod(num, &e);
		FUZZ_CHECK(*e == '\0' && e != num, "metrics: a value that is not a number");
	}
}

void fuzz_check_exposition(const char *text, size_t len, size_t label_max)
{
	const char *p = text, *end = text + len;
	size_t i, l;

	for (i = 0; i < len; i += l) {
		l = utf8_seq((const unsigned char *)text + i, len - i);
		FUZZ_CHECK(l > 0, "metrics: the output is not valid UTF-8");
	}
	FUZZ_CHECK(len == 0 || text[len - 1] == '\n', "metrics: the output does not end a line");
	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));

		FUZZ_CHECK(eol && eol > p, "metrics: an empty line");
		if (*p == '#') {
			const char *n;
			FUZZ_CHECK(eol - p > 7 &&
					   (!strncmp(p, "# HELP ", 7) || !strncmp(p, "# TYPE ", 7)),
				   "metrics: a comment other than HELP or TYPE");
			n = skip_name(p + 7, eol);
			FUZZ_CHECK(n && (n == eol || *n == ' '),
				   "metrics: HELP or TYPE without a name");
		} else {
			check_sample(p, eol, label_max);
		}
		p = eol + 1;
	}
}
