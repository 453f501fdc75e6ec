/* endpoint.h: parsing of endpoint strings.
 *
 *   unix:///abs/path/csi.sock   unix:/abs/path   /abs/path  -> a unix socket
 *   tcp://host:port   tcp://:port   tcp://[::1]:port        -> TCP
 *
 * An empty host means every address (0.0.0.0) for a listener. Paths must be
 * absolute, shorter than sun_path, and free of control characters. */
#ifndef PCSI_ENDPOINT_H
#define PCSI_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>

struct pcsi_endpoint {
	bool is_unix;
	union {
		char path[108]; /* unix */
		char host[256]; /* tcp; without brackets */
	};
	int port; /* tcp */
};

/* Returns 0 or -EINVAL; |err| (may be NULL) then says what is wrong. */
int pcsi_endpoint_parse(const char *s, struct pcsi_endpoint *ep, char *err, size_t errlen);

struct sockaddr_storage;

/* "1.2.3.4:56" or "[::1]:56" for a peer's address; "tcp" for anything else. */
void pcsi_sockaddr_str(const struct sockaddr_storage *ss, char *out, size_t n);

#endif
