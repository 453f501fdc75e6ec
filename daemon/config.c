/* config.c: flag parsing and validation. See config.h. */
#include "daemon/config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/endpoint.h"
#include "daemon/version.h"

enum {
	OPT_MODE = 256,
	OPT_ENDPOINT,
	OPT_REGISTRY_ENDPOINT,
	OPT_CONTROLLER_ENDPOINT,
	OPT_NODEID,
	OPT_DRIVERNAME,
	OPT_DEVICE_MANAGER,
	OPT_PMEM_PERCENTAGE,
	OPT_STATE_PATH,
	OPT_CA,
	OPT_CERT,
	OPT_KEY,
	OPT_CLIENT_CERT,
	OPT_CLIENT_KEY,
	OPT_INSECURE,
	OPT_METRICS_LISTEN,
	OPT_V,
	OPT_LOG_FORMAT,
	OPT_MAX_RECV,
	OPT_MAX_STREAMS,
	OPT_MAX_CONNS,
	OPT_GRACE,
	OPT_REG_GRACE,
	OPT_REG_INTERVAL,
	OPT_SA_DIR,
	OPT_KUBELET_DIR,
	OPT_KUBELET_PATH,
	OPT_HELP,
	OPT_VERSION,
};

static const struct option options[] = {
	{ "mode", required_argument, NULL, OPT_MODE },
	{ "endpoint", required_argument, NULL, OPT_ENDPOINT },
	{ "registryEndpoint", required_argument, NULL, OPT_REGISTRY_ENDPOINT },
	{ "controllerEndpoint", required_argument, NULL, OPT_CONTROLLER_ENDPOINT },
	{ "nodeid", required_argument, NULL, OPT_NODEID },
	{ "drivername", required_argument, NULL, OPT_DRIVERNAME },
	{ "deviceManager", required_argument, NULL, OPT_DEVICE_MANAGER },
	{ "pmemPercentage", required_argument, NULL, OPT_PMEM_PERCENTAGE },
	{ "statePath", required_argument, NULL, OPT_STATE_PATH },
	{ "caFile", required_argument, NULL, OPT_CA },
	{ "certFile", required_argument, NULL, OPT_CERT },
	{ "keyFile", required_argument, NULL, OPT_KEY },
	{ "clientCertFile", required_argument, NULL, OPT_CLIENT_CERT },
	{ "clientKeyFile", required_argument, NULL, OPT_CLIENT_KEY },
	{ "insecure", optional_argument, NULL, OPT_INSECURE },
	{ "metricsListen", required_argument, NULL, OPT_METRICS_LISTEN },
	{ "v", required_argument, NULL, OPT_V },
	{ "logFormat", required_argument, NULL, OPT_LOG_FORMAT },
	{ "maxRecvMsgSize", required_argument, NULL, OPT_MAX_RECV },
	{ "maxConcurrentStreams", required_argument, NULL, OPT_MAX_STREAMS },
	{ "maxConnections", required_argument, NULL, OPT_MAX_CONNS },
	{ "shutdownGrace", required_argument, NULL, OPT_GRACE },
	{ "registrationGrace", required_argument, NULL, OPT_REG_GRACE },
	{ "registrationInterval", required_argument, NULL, OPT_REG_INTERVAL },
	{ "serviceAccountDir", required_argument, NULL, OPT_SA_DIR },
	{ "kubeletRegistrationDir", required_argument, NULL, OPT_KUBELET_DIR },
	{ "kubeletRegistrationPath", required_argument, NULL, OPT_KUBELET_PATH },
	{ "help", no_argument, NULL, OPT_HELP },
	{ "h", no_argument, NULL, OPT_HELP },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ NULL, 0, NULL, 0 },
};

static const char usage[] =
	"Usage: pmem-csi-driver [flags]\n"
	"\n"
	"A Kubernetes CSI driver for persistent memory. Flags take one or two dashes.\n"
	"\n"
	"  -mode=controller|node      role of this process (default controller)\n"
	"  -endpoint=URL              CSI endpoint, unix:///path or tcp://host:port\n"
	"                             (default unix:///tmp/pmem-csi.sock)\n"
	"  -registryEndpoint=URL      controller: where the Registry service listens (TCP);\n"
	"                             node: the controller's registry to register with\n"
	"  -controllerEndpoint=URL    node: where its controller service listens (TCP)\n"
	"  -nodeid=ID                 node id (default nodeid)\n"
	"  -drivername=NAME           CSI driver name (default pmem-csi.intel.com)\n"
	"  -deviceManager=NAME        lvm or direct (alias ndctl) (default lvm); controller:\n"
	"                             the nodes' one (volume expansion only with lvm)\n"
	"  -pmemPercentage=N          lvm: percentage of each region to use (default 100)\n"
	"  -statePath=DIR             node: volume records (default /var/lib/<drivername>)\n"
	"  -caFile=FILE               CA certificate that signs peers (mutual TLS)\n"
	"  -certFile=FILE -keyFile=FILE   this process's certificate and key\n"
	"  -clientCertFile=FILE -clientKeyFile=FILE   for outgoing calls (default: the above)\n"
	"  -insecure                  allow TCP endpoints without TLS (not for production)\n"
	"  -metricsListen=HOST:PORT   serve Prometheus metrics (default off)\n"
	"  -v=N                       log verbosity (default 2; 5 logs every call)\n"
	"  -logFormat=text|json       log line format (default text)\n"
	"  -maxRecvMsgSize=BYTES      largest accepted gRPC message (default 4194304)\n"
	"  -maxConcurrentStreams=N    concurrent calls per connection (default 128)\n"
	"  -maxConnections=N          open connections per process (default 1024)\n"
	"  -shutdownGrace=SECONDS     time calls in flight get on SIGTERM (default 10)\n"
	"  -registrationGrace=SECONDS controller: after a start, unknown volume ids are\n"
	"                             UNAVAILABLE this long, until nodes re-registered (default "
	"90)\n"
	"  -serviceAccountDir=DIR     controller: Kubernetes service account (token, ca.crt)\n"
	"                             to end the grace period once every node Kubernetes lists\n"
	"                             for the driver registered (default\n"
	"                             /var/run/secrets/kubernetes.io/serviceaccount; \"\": never)\n"
	"  -registrationInterval=SECONDS  node: re-register (heartbeat) this often (default 30)\n"
	"  -kubeletRegistrationDir=DIR    node: register with kubelet through a socket in DIR\n"
	"                             (kubelet's plugins_registry; no node-driver-registrar "
	"needed)\n"
	"  -kubeletRegistrationPath=PATH  node: the CSI socket as kubelet sees it (default: the\n"
	"                             -endpoint path)\n"
	"  -help, -version\n";

bool pcsi_config_volumes_grow(const struct pcsi_config *cfg)
{
	return strcmp(cfg->device_manager, "direct") && strcmp(cfg->device_manager, "ndctl");
}

const char *pcsi_mode_name(enum pcsi_mode m)
{
	return m == PCSI_MODE_NODE ? "node" : "controller";
}

const char *pcsi_config_peer_name(const struct pcsi_config *cfg)
{
	return cfg->mode == PCSI_MODE_NODE ? "pmem-registry" : "pmem-node-controller";
}

/* NULL (not given) or an absolute path without ".." that fits a socket name. */
static bool abs_path_ok(const char *p)
{
	return !p || (p[0] == '/' && !strstr(p, "/../") && strlen(p) < 100);
}

static int parse_num(const char *name, const char *s, long long min, long long max, long long *ret,
		     FILE *err)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max) {
		fprintf(err, "pmem-csi-driver: -%s=%s: expected an integer in %lld..%lld\n", name,
			s, min, max);
		return -EINVAL;
	}
	*ret = v;
	return 0;
}

static bool safe_string(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

static int check_endpoint(const char *flag, const char *v, bool need_tcp, FILE *err)
{
	struct pcsi_endpoint ep;
	char msg[256];

	if (pcsi_endpoint_parse(v, &ep, msg, sizeof(msg)) < 0) {
		fprintf(err, "pmem-csi-driver: -%s: %s\n", flag, msg);
		return -EINVAL;
	}
	if (need_tcp && ep.is_unix) {
		fprintf(err, "pmem-csi-driver: -%s=%s: must be a tcp:// endpoint\n", flag, v);
		return -EINVAL;
	}
	return 0;
}

static bool is_tcp(const char *ep)
{
	return ep && !strncmp(ep, "tcp://", 6);
}

static int validate(struct pcsi_config *c, FILE *err)
{
	const bool tls = c->ca_file || c->cert_file || c->key_file;

	if (!*c->driver_name || strlen(c->driver_name) > 63 ||
	    strspn(c->driver_name,
		   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") !=
		    strlen(c->driver_name) ||
	    !isalnum((unsigned char)c->driver_name[0])) {
		fprintf(err, "pmem-csi-driver: -drivername must be a domain-style name of 1..63 "
			     "characters (letters, digits, '.', '-')\n");
		return -EINVAL;
	}
	if (!*c->node_id || strlen(c->node_id) > 128 || !safe_string(c->node_id)) {
		fprintf(err, "pmem-csi-driver: -nodeid must be 1..128 printable characters\n");
		return -EINVAL;
	}
	if (strcmp(c->device_manager, "lvm") && strcmp(c->device_manager, "direct") &&
	    strcmp(c->device_manager, "ndctl") &&
	    strcmp(c->device_manager, "fake-for-testing-only")) {
		fprintf(err, "pmem-csi-driver: -deviceManager=%s: expected lvm or direct\n",
			c->device_manager);
		return -EINVAL;
	}
	if (c->state_path && (c->state_path[0] != '/' || strstr(c->state_path, "/../") ||
			      strlen(c->state_path) > 1024)) {
		fprintf(err, "pmem-csi-driver: -statePath must be an absolute path\n");
		return -EINVAL;
	}
	if (!c->state_path) {
		static char def[128];
		snprintf(def, sizeof(def), "/var/lib/%s", c->driver_name);
		c->state_path = def;
	}
	if (check_endpoint("endpoint", c->endpoint, false, err) < 0)
		return -EINVAL;
	if (!abs_path_ok(c->kubelet_reg_dir) || !abs_path_ok(c->kubelet_reg_path)) {
		fprintf(err,
			"pmem-csi-driver: -kubeletRegistrationDir and -kubeletRegistrationPath "
			"must be absolute paths\n");
		return -EINVAL;
	}
	if (c->mode == PCSI_MODE_CONTROLLER && (c->kubelet_reg_dir || c->kubelet_reg_path)) {
		fprintf(err,
			"pmem-csi-driver: -kubeletRegistrationDir and -kubeletRegistrationPath "
			"are node flags\n");
		return -EINVAL;
	}
	if (c->kubelet_reg_dir && !c->kubelet_reg_path) {
		if (strncmp(c->endpoint, "unix://", 7)) {
			fprintf(err, "pmem-csi-driver: -kubeletRegistrationDir needs a unix:// "
				     "-endpoint or -kubeletRegistrationPath\n");
			return -EINVAL;
		}
		c->kubelet_reg_path = c->endpoint + 7;
	}
	if (c->registry_endpoint &&
	    check_endpoint("registryEndpoint", c->registry_endpoint, true, err) < 0)
		return -EINVAL;
	if (c->controller_endpoint &&
	    check_endpoint("controllerEndpoint", c->controller_endpoint, true, err) < 0)
		return -EINVAL;
	if (tls && !(c->ca_file && c->cert_file && c->key_file)) {
		fprintf(err, "pmem-csi-driver: mutual TLS needs all of -caFile, -certFile and "
			     "-keyFile\n");
		return -EINVAL;
	}
	if (c->mode == PCSI_MODE_NODE && c->registry_endpoint && !c->controller_endpoint) {
		fprintf(err,
			"pmem-csi-driver: -registryEndpoint in node mode needs -controllerEndpoint "
			"(the address the controller calls back)\n");
		return -EINVAL;
	}
	if (!c->client_cert_file)
		c->client_cert_file = c->cert_file;
	if (!c->client_key_file)
		c->client_key_file = c->key_file;
	if (!tls && !c->insecure &&
	    (is_tcp(c->endpoint) || is_tcp(c->registry_endpoint) ||
	     is_tcp(c->controller_endpoint))) {
		fprintf(err, "pmem-csi-driver: TCP endpoints need -caFile, -certFile and -keyFile "
			     "(mutual TLS), or -insecure to allow plaintext\n");
		return -EINVAL;
	}
	return 0;
}

int pcsi_config_parse(struct pcsi_config *cfg, int argc, char **argv, FILE *out, FILE *err)
{
	long long n;
	int opt;

	*cfg = (struct pcsi_config){
		.mode = PCSI_MODE_CONTROLLER,
		.endpoint = "unix:///tmp/pmem-csi.sock",
		.node_id = "nodeid",
		.driver_name = "pmem-csi.intel.com",
		.device_manager = "lvm",
		.pmem_percentage = 100,
		.verbosity = 2,
		.log_format = PCSI_LOG_TEXT,
		.max_recv_msg = 4u << 20,
		.max_streams = 128,
		.max_conns = 1024,
		.shutdown_grace_s = 10,
		.registration_grace_s = 90,
		.service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount",
		.registration_interval_s = 30,
	};
	/* 0, not 1: glibc then also forgets a place inside an argument where an
	 * earlier parse stopped ("-:x"), which it would go on reading. */
	optind = 0;
	opterr = 0;
	while ((opt = getopt_long_only(argc, argv, ":", options, NULL)) != -1) {
		if (optarg && !safe_string(optarg)) {
			fprintf(err, "pmem-csi-driver: flag value contains control characters\n");
			return -EINVAL;
		}
		switch (opt) {
		case OPT_MODE:
			if (!strcmp(optarg, "controller"))
				cfg->mode = PCSI_MODE_CONTROLLER;
			else if (!strcmp(optarg, "node"))
				cfg->mode = PCSI_MODE_NODE;
			else {
				fprintf(err,
					"pmem-csi-driver: -mode=%s: expected controller or node\n",
					optarg);
				return -EINVAL;
			}
			break;
		case OPT_ENDPOINT:
			cfg->endpoint = optarg;
			break;
		case OPT_REGISTRY_ENDPOINT:
			cfg->registry_endpoint = *optarg ? optarg : NULL;
			break;
		case OPT_CONTROLLER_ENDPOINT:
			cfg->controller_endpoint = *optarg ? optarg : NULL;
			break;
		case OPT_NODEID:
			cfg->node_id = optarg;
			break;
		case OPT_DRIVERNAME:
			cfg->driver_name = optarg;
			break;
		case OPT_DEVICE_MANAGER:
			cfg->device_manager = optarg;
			break;
		case OPT_PMEM_PERCENTAGE:
			if (parse_num("pmemPercentage", optarg, 1, 100, &n, err) < 0)
				return -EINVAL;
			cfg->pmem_percentage = (int)n;
			break;
		case OPT_STATE_PATH:
			cfg->state_path = *optarg ? optarg : NULL;
			break;
		case OPT_CA:
			cfg->ca_file = *optarg ? optarg : NULL;
			break;
		case OPT_CERT:
			cfg->cert_file = *optarg ? optarg : NULL;
			break;
		case OPT_KEY:
			cfg->key_file = *optarg ? optarg : NULL;
			break;
		case OPT_CLIENT_CERT:
			cfg->client_cert_file = *optarg ? optarg : NULL;
			break;
		case OPT_CLIENT_KEY:
			cfg->client_key_file = *optarg ? optarg : NULL;
			break;
		case OPT_INSECURE: /* Go style: -insecure, -insecure=true|false */
			if (!optarg || !strcmp(optarg, "true") || !strcmp(optarg, "1"))
				cfg->insecure = true;
			else if (!strcmp(optarg, "false") || !strcmp(optarg, "0"))
				cfg->insecure = false;
			else {
				fprintf(err,
					"pmem-csi-driver: -insecure=%s: expected true or false\n",
					optarg);
				return -EINVAL;
			}
			break;
		case OPT_METRICS_LISTEN:
			cfg->metrics_listen = *optarg ? optarg : NULL;
			break;
		case OPT_V:
			if (parse_num("v", optarg, 0, 10, &n, err) < 0)
				return -EINVAL;
			cfg->verbosity = (int)n;
			break;
		case OPT_LOG_FORMAT:
			if (!strcmp(optarg, "text"))
				cfg->log_format = PCSI_LOG_TEXT;
			else if (!strcmp(optarg, "json"))
				cfg->log_format = PCSI_LOG_JSON;
			else {
				fprintf(err,
					"pmem-csi-driver: -logFormat=%s: expected text or json\n",
					optarg);
				return -EINVAL;
			}
			break;
		case OPT_MAX_RECV:
			if (parse_num("maxRecvMsgSize", optarg, 1024, 1ll << 30, &n, err) < 0)
				return -EINVAL;
			cfg->max_recv_msg = (size_t)n;
			break;
		case OPT_MAX_STREAMS:
			if (parse_num("maxConcurrentStreams", optarg, 1, 1 << 20, &n, err) < 0)
				return -EINVAL;
			cfg->max_streams = (uint32_t)n;
			break;
		case OPT_MAX_CONNS:
			if (parse_num("maxConnections", optarg, 1, 1 << 20, &n, err) < 0)
				return -EINVAL;
			cfg->max_conns = (uint32_t)n;
			break;
		case OPT_GRACE:
			if (parse_num("shutdownGrace", optarg, 0, 3600, &n, err) < 0)
				return -EINVAL;
			cfg->shutdown_grace_s = (uint32_t)n;
			break;
		case OPT_REG_GRACE:
			if (parse_num("registrationGrace", optarg, 0, 3600, &n, err) < 0)
				return -EINVAL;
			cfg->registration_grace_s = (uint32_t)n;
			break;
		case OPT_REG_INTERVAL:
			if (parse_num("registrationInterval", optarg, 1, 3600, &n, err) < 0)
				return -EINVAL;
			cfg->registration_interval_s = (uint32_t)n;
			break;
		case OPT_SA_DIR:
			cfg->service_account_dir = optarg;
			break;
		case OPT_KUBELET_DIR:
			cfg->kubelet_reg_dir = *optarg ? optarg : NULL;
			break;
		case OPT_KUBELET_PATH:
			cfg->kubelet_reg_path = *optarg ? optarg : NULL;
			break;
		case OPT_HELP:
			fputs(usage, out);
			return 1;
		case OPT_VERSION:
			fprintf(out, "pmem-csi-driver %s\n", PCSI_VERSION);
			return 1;
		case ':':
			fprintf(err, "pmem-csi-driver: flag %s needs a value\n", argv[optind - 1]);
			return -EINVAL;
		default:
			fprintf(err, "pmem-csi-driver: unknown flag %s (see -help)\n",
				argv[optind - 1]);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		fprintf(err, "pmem-csi-driver: unexpected argument \"%s\" (see -help)\n",
			argv[optind]);
		return -EINVAL;
	}
	return validate(cfg, err);
}
