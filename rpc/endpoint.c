/* endpoint.c: endpoint string parsing. See endpoint.h. */
#include "rpc/endpoint.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

static int bad(char *err, size_t errlen, const char *s, const char *why)
{
	if (err)
		snprintf(err, errlen, "endpoint \"%s\": %s", s, why);
	return -EINVAL;
}

int pcsi_endpoint_parse(const char *s, struct pcsi_endpoint *ep, char *err, size_t errlen)
{
	const char *p, *colon;
	size_t hl;
	char *end;
	long port;

	memset(ep, 0, sizeof(*ep));
	if (!s || !*s)
		return bad(err, errlen, "", "empty");
	for (p = s; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return bad(err, errlen, "?", "contains control characters");

	if (!strncmp(s, "unix://", 7) || !strncmp(s, "unix:", 5) || s[0] == '/') {
		p = !strncmp(s, "unix://", 7) ? s + 7 : !strncmp(s, "unix:", 5) ? s + 5 : s;
		if (p[0] != '/')
			return bad(err, errlen, s, "unix socket path must be absolute");
		if (strlen(p) >= sizeof(((struct sockaddr_un *)0)->sun_path))
			return bad(err, errlen, s, "unix socket path too long");
		ep->is_unix = true;
		strcpy(ep->path, p);
		return 0;
	}
	if (strncmp(s, "tcp://", 6) != 0)
		return bad(err, errlen, s, "expected unix:///path or tcp://host:port");
	p = s + 6;
	if (*p == '[') {
		const char *rb = strchr(p, ']');
		if (!rb || rb[1] != ':')
			return bad(err, errlen, s, "malformed [ipv6]:port");
		hl = (size_t)(rb - p - 1);
		if (hl >= sizeof(ep->host))
			return bad(err, errlen, s, "host too long");
		memcpy(ep->host, p + 1, hl);
		colon = rb + 1;
	} else {
		colon = strrchr(p, ':');
		if (!colon)
			return bad(err, errlen, s, "missing :port");
		hl = (size_t)(colon - p);
		if (hl >= sizeof(ep->host))
			return bad(err, errlen, s, "host too long");
		memcpy(ep->host, p, hl);
		if (strchr(ep->host, '/') || strchr(ep->host, ':'))
			return bad(err, errlen, s, "malformed host");
	}
	if (colon[1] < '0' || colon[1] > '9')
		return bad(err, errlen, s, "port must be 1..65535");
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end || port < 1 || port > 65535)
		return bad(err, errlen, s, "port must be 1..65535");
	ep->port = (int)port;
	return 0;
}

void pcsi_sockaddr_str(const struct sockaddr_storage *ss, char *out, size_t n)
{
	char host[INET6_ADDRSTRLEN];

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		snprintf(out, n, "%s:%u", host, ntohs(in->sin_port));
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		snprintf(out, n, "[%s]:%u", host, ntohs(in6->sin6_port));
	} else {
		snprintf(out, n, "tcp");
	}
}
