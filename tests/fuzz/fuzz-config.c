/* fuzz-config.c: the flag parser (daemon/config.c) and the endpoint parser
 * it uses (rpc/endpoint.c).
 *
 * Input: the arguments after argv[0], separated by NUL bytes (at most 64),
 * each in its own heap allocation. pcsi_config_parse() writes its messages
 * to /dev/null. Each argument also goes through pcsi_endpoint_parse().
 *
 * Checked: a parse succeeds (0), handles -help/-version (1) or refuses
 * (-EINVAL); what it accepts is consistent (a driver name and node id of
 * the allowed lengths, an endpoint that parses, an absolute state path, TLS
 * files all or none); a parse does not depend on the one before it (a
 * known-good command line parses after every input); an endpoint that
 * parses is absolute (unix) or has a port of 1..65535 (tcp). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "daemon/config.h"
#include "rpc/endpoint.h"
#include "tests/fuzz/common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ARGS 64

static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	devnull = fopen("/dev/null", "w");
	if (!devnull)
		abort();
	return 0;
}

static void check_endpoint(const char *s)
{
	struct pcsi_endpoint ep;
	char err[256] = "";

	if (pcsi_endpoint_parse(s, &ep, err, sizeof(err)) < 0) {
		FUZZ_CHECK(err[0], "endpoint: refused without a reason");
		return;
	}
	if (ep.is_unix) {
		FUZZ_CHECK(ep.path[0] == '/', "endpoint: a relative unix socket path");
		FUZZ_CHECK(strlen(ep.path) < sizeof(((struct sockaddr_un *)0)->sun_path),
			   "endpoint: a unix socket path that does not fit");
	} else {
		FUZZ_CHECK(ep.port >= 1 && ep.port <= 65535, "endpoint: a port out of range");
		FUZZ_CHECK(!strncmp(s, "tcp://", 6), "endpoint: TCP without tcp://");
	}
}

static void check_config(const struct pcsi_config *c)
{
	struct pcsi_endpoint ep;
	const bool tls = c->ca_file || c->cert_file || c->key_file;

	FUZZ_CHECK(c->driver_name[0] && strlen(c->driver_name) <= 63, "config: driver name length");
	FUZZ_CHECK(c->node_id[0] && strlen(c->node_id) <= 128, "config: node id length");
	FUZZ_CHECK(pcsi_endpoint_parse(c->endpoint, &ep, NULL, 0) == 0,
		   "config: an endpoint that does not parse");
	FUZZ_CHECK(c->state_path && c->state_path[0] == '/', "config: a relative state path");
	FUZZ_CHECK(!tls || (c->ca_file && c->cert_file && c->key_file),
		   "config: only some of the TLS files");
	FUZZ_CHECK(!c->kubelet_reg_dir || c->kubelet_reg_path,
		   "config: a kubelet registration dir without a path");
	FUZZ_CHECK(c->mode == PCSI_MODE_NODE || !c->kubelet_reg_dir,
		   "config: kubelet registration in controller mode");
	FUZZ_CHECK(c->pmem_percentage >= 0 && c->pmem_percentage <= 100,
		   "config: pmemPercentage out of range");
	FUZZ_CHECK(c->mode >= PCSI_MODE_CONTROLLER && c->mode <= PCSI_MODE_CONVERT,
		   "config: a mode");
	FUZZ_CHECK(c->kube_api_burst >= 1 && c->kube_api_qps != 0, "config: API pacing");
	FUZZ_CHECK(c->n_node_selector <= PCSI_MAX_SELECTOR && c->n_ignored <= PCSI_MAX_IGNORED,
		   "config: list sizes");
	for (size_t i = 0; i < c->n_node_selector; i++)
		FUZZ_CHECK(c->node_selector[i].key[0] && strlen(c->node_selector[i].key) <= 317 &&
				   strlen(c->node_selector[i].value) <= 63,
			   "config: a node selector label");
	FUZZ_CHECK((!c->log.file || c->log.file[0] == '/') && (!c->log.dir || c->log.dir[0] == '/'),
		   "config: a relative log path");
	FUZZ_CHECK(c->metrics_path && c->metrics_path[0] == '/', "config: a relative metrics path");
	FUZZ_CHECK(c->log.stderr_threshold >= 0 && c->log.stderr_threshold <= 3,
		   "config: a stderr threshold");
	FUZZ_CHECK(c->max_recv_msg >= 1024 && c->max_recv_msg <= (1u << 30),
		   "config: maxRecvMsgSize out of range");
	pcsi_mode_name(c->mode);
	pcsi_config_peer_name(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char good0[] = "pmem-csi-driver", good1[] = "-mode=node",
		    good2[] = "-endpoint=unix:///tmp/fuzz.sock";
	char *good[] = { good0, good1, good2, NULL };
	char *argv[MAX_ARGS + 2], *owned[MAX_ARGS + 1];
	struct pcsi_config cfg;
	size_t i, start = 0;
	int argc = 1, n = 0, rc;

	argv[0] = owned[n++] = fuzz_strndup((const uint8_t *)"pmem-csi-driver", 15);
	for (i = 0; i <= size && argc <= MAX_ARGS; i++) {
		if (i < size && data[i])
			continue;
		argv[argc++] = owned[n++] = fuzz_strndup(data + start, i - start);
		start = i + 1;
	}
	argv[argc] = NULL;
	for (i = 1; i < (size_t)argc; i++)
		check_endpoint(argv[i]);

	rc = pcsi_config_parse(&cfg, argc, argv, devnull, devnull);
	FUZZ_CHECK(rc == 0 || rc == 1 || rc == -EINVAL, "config: an unexpected result");
	if (rc == 0)
		check_config(&cfg);

	/* The next parse must not see anything of this one. */
	rc = pcsi_config_parse(&cfg, 3, good, devnull, devnull);
	FUZZ_CHECK(rc == 0, "config: a good command line refused after another parse");
	FUZZ_CHECK(cfg.mode == PCSI_MODE_NODE, "config: -mode=node lost after another parse");

	for (i = 0; i < (size_t)n; i++)
		free(owned[i]);
	return 0;
}
