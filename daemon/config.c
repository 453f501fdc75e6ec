/* config.c: flag parsing and validation. See config.h. */
#include "daemon/config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <json-c/json.h>

#include "rpc/endpoint.h"
#include "daemon/version.h"

enum {
	OPT_MODE = 256,
	OPT_ENDPOINT,
	OPT_REGISTRY_ENDPOINT,
	OPT_CONTROLLER_ENDPOINT,
	OPT_RESIZER_ENDPOINT,
	OPT_NODEID,
	OPT_DRIVERNAME,
	OPT_DEVICE_MANAGER,
	OPT_PMEM_PERCENTAGE,
	OPT_LVM_SHELLS,
	OPT_CXL_REGIONS,
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
	OPT_MAX_CONNS_PEER,
	OPT_MAX_PEER_BYTES,
	OPT_HANDSHAKE_TIMEOUT,
	OPT_CERT_RELOAD,
	OPT_GRACE,
	OPT_REG_GRACE,
	OPT_LOST_GRACE,
	OPT_REG_INTERVAL,
	OPT_MEDIA_SCAN,
	OPT_SA_DIR,
	OPT_KUBELET_DIR,
	OPT_KUBELET_PATH,
	OPT_METRICS_PATH,
	OPT_LOGGING_FORMAT,
	OPT_KUBE_QPS,
	OPT_KUBE_BURST,
	OPT_NODE_SELECTOR,
	OPT_SCHED_LISTEN,
	OPT_INSECURE_SCHED_LISTEN,
	OPT_NODE_IDENTITY,
	OPT_NODE_SA,
	OPT_MAX_NODES,
	OPT_REG_TOKEN,
	/* klog */
	OPT_LOGTOSTDERR,
	OPT_ALSOLOGTOSTDERR,
	OPT_STDERRTHRESHOLD,
	OPT_LOG_FILE,
	OPT_LOG_DIR,
	OPT_LOG_FILE_MAX,
	OPT_SKIP_HEADERS,
	OPT_SKIP_LOG_HEADERS,
	OPT_ADD_DIR_HEADER,
	OPT_ONE_OUTPUT,
	OPT_VMODULE,
	OPT_BACKTRACE_AT,
	OPT_HELP,
	OPT_VERSION,
};

static const struct option options[] = {
	{ "mode", required_argument, NULL, OPT_MODE },
	{ "endpoint", required_argument, NULL, OPT_ENDPOINT },
	{ "registryEndpoint", required_argument, NULL, OPT_REGISTRY_ENDPOINT },
	{ "controllerEndpoint", required_argument, NULL, OPT_CONTROLLER_ENDPOINT },
	{ "resizerEndpoint", required_argument, NULL, OPT_RESIZER_ENDPOINT },
	{ "nodeid", required_argument, NULL, OPT_NODEID },
	{ "drivername", required_argument, NULL, OPT_DRIVERNAME },
	{ "deviceManager", required_argument, NULL, OPT_DEVICE_MANAGER },
	{ "pmemPercentage", required_argument, NULL, OPT_PMEM_PERCENTAGE },
	{ "lvmShells", required_argument, NULL, OPT_LVM_SHELLS },
	{ "cxlRegions", required_argument, NULL, OPT_CXL_REGIONS },
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
	{ "maxConnectionsPerPeer", required_argument, NULL, OPT_MAX_CONNS_PEER },
	{ "maxPeerRequestBytes", required_argument, NULL, OPT_MAX_PEER_BYTES },
	{ "handshakeTimeout", required_argument, NULL, OPT_HANDSHAKE_TIMEOUT },
	{ "certReloadInterval", required_argument, NULL, OPT_CERT_RELOAD },
	{ "shutdownGrace", required_argument, NULL, OPT_GRACE },
	{ "registrationGrace", required_argument, NULL, OPT_REG_GRACE },
	{ "lostNodeGrace", required_argument, NULL, OPT_LOST_GRACE },
	{ "registrationInterval", required_argument, NULL, OPT_REG_INTERVAL },
	{ "mediaScanInterval", required_argument, NULL, OPT_MEDIA_SCAN },
	{ "serviceAccountDir", required_argument, NULL, OPT_SA_DIR },
	{ "kubeletRegistrationDir", required_argument, NULL, OPT_KUBELET_DIR },
	{ "kubeletRegistrationPath", required_argument, NULL, OPT_KUBELET_PATH },
	{ "metricsPath", required_argument, NULL, OPT_METRICS_PATH },
	{ "logging-format", required_argument, NULL, OPT_LOGGING_FORMAT },
	{ "kube-api-qps", required_argument, NULL, OPT_KUBE_QPS },
	{ "kube-api-burst", required_argument, NULL, OPT_KUBE_BURST },
	{ "nodeSelector", required_argument, NULL, OPT_NODE_SELECTOR },
	{ "schedulerListen", required_argument, NULL, OPT_SCHED_LISTEN },
	{ "insecureSchedulerListen", required_argument, NULL, OPT_INSECURE_SCHED_LISTEN },
	{ "nodeIdentity", required_argument, NULL, OPT_NODE_IDENTITY },
	{ "nodeServiceAccount", required_argument, NULL, OPT_NODE_SA },
	{ "maxNodes", required_argument, NULL, OPT_MAX_NODES },
	{ "registryTokenFile", required_argument, NULL, OPT_REG_TOKEN },
	{ "logtostderr", optional_argument, NULL, OPT_LOGTOSTDERR },
	{ "alsologtostderr", optional_argument, NULL, OPT_ALSOLOGTOSTDERR },
	{ "stderrthreshold", required_argument, NULL, OPT_STDERRTHRESHOLD },
	{ "log_file", required_argument, NULL, OPT_LOG_FILE },
	{ "log_dir", required_argument, NULL, OPT_LOG_DIR },
	{ "log_file_max_size", required_argument, NULL, OPT_LOG_FILE_MAX },
	{ "skip_headers", optional_argument, NULL, OPT_SKIP_HEADERS },
	{ "skip_log_headers", optional_argument, NULL, OPT_SKIP_LOG_HEADERS },
	{ "add_dir_header", optional_argument, NULL, OPT_ADD_DIR_HEADER },
	{ "one_output", optional_argument, NULL, OPT_ONE_OUTPUT },
	{ "vmodule", required_argument, NULL, OPT_VMODULE },
	{ "log_backtrace_at", required_argument, NULL, OPT_BACKTRACE_AT },
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
	"  -mode=MODE                 role of this process (default controller):\n"
	"                             controller, node, webhooks (Intel v1.1's controller:\n"
	"                             the PVC rescheduler) or force-convert-raw-namespaces\n"
	"  -endpoint=URL              CSI endpoint, unix:///path or tcp://host:port\n"
	"                             (default unix:///tmp/pmem-csi.sock)\n"
	"  -registryEndpoint=URL      controller: where the Registry service listens (TCP);\n"
	"                             node: the controller's registry to register with\n"
	"  -controllerEndpoint=URL    node: where its controller service listens (TCP)\n"
	"  -nodeIdentity=proven|shared  controller: a node registers, moves or unregisters\n"
	"                             only with proof that it runs on that node: a per-node\n"
	"                             certificate or a ServiceAccount token (default proven;\n"
	"                             shared: any holder of the nodes' certificate, the\n"
	"                             default with -insecure)\n"
	"  -nodeServiceAccount=[NS:]NAME  controller: the node pods' ServiceAccount whose\n"
	"                             tokens prove a node (default pmem-csi-node in the\n"
	"                             controller's namespace)\n"
	"  -maxNodes=N                controller: most nodes registered at once (default 10000)\n"
	"  -registryTokenFile=FILE    node: a ServiceAccount token for the audience\n"
	"                             <drivername> that proves this node to the registry\n"
	"                             (read before each registration)\n"
	"  -resizerEndpoint=URL       node: a unix socket for one cluster-wide csi-resizer\n"
	"                             (distributed mode): it leaves growing a volume to\n"
	"                             NodeExpandVolume on the node that holds it\n"
	"  -nodeid=ID                 node id (default nodeid)\n"
	"  -drivername=NAME           CSI driver name (default pmem-csi.intel.com)\n"
	"  -deviceManager=NAME        lvm or direct (alias ndctl) (default lvm); controller:\n"
	"                             the nodes' one (volume expansion only with lvm)\n"
	"  -pmemPercentage=N          lvm: percentage of each region to use (default 100)\n"
	"  -lvmShells=N               lvm: long-lived lvm shells that run its commands\n"
	"                             (default 2; 0: each command a process of its own)\n"
	"  -cxlRegions=off|auto       node: auto assembles a region on each CXL memory\n"
	"                             device whose labels hold no other software's\n"
	"                             namespaces, and again after every reboot (default off)\n"
	"  -statePath=DIR             node: volume records (default /var/lib/<drivername>)\n"
	"  -caFile=FILE               CA certificate that signs peers (mutual TLS)\n"
	"  -certFile=FILE -keyFile=FILE   this process's certificate and key\n"
	"  -clientCertFile=FILE -clientKeyFile=FILE   for outgoing calls (default: the above)\n"
	"  -insecure                  allow TCP endpoints without TLS (not for production)\n"
	"  -metricsListen=HOST:PORT   serve Prometheus metrics (default off)\n"
	"  -metricsPath=PATH          where the metrics are served (default /metrics;\n"
	"                             PATH/simple has build_info only)\n"
	"  -v=N                       log verbosity (default 2; 5 logs every call)\n"
	"  -logFormat=text|json       log line format (default text); also -logging-format\n"
	"  klog's flags: -vmodule=PATTERN=N,... -logtostderr=BOOL (default true)\n"
	"                             -alsologtostderr -stderrthreshold=SEVERITY -log_file=FILE\n"
	"                             -log_dir=DIR -log_file_max_size=MB -skip_headers\n"
	"                             -add_dir_header -log_backtrace_at=FILE:LINE\n"
	"                             (-skip_log_headers, -one_output: accepted, no effect)\n"
	"  -kube-api-qps=QPS -kube-api-burst=N  Kubernetes API requests per second and\n"
	"                             burst (default 5 and 10)\n"
	"  -nodeSelector=JSON         webhooks, force-convert-raw-namespaces: labels of the\n"
	"                             nodes meant to run the driver, e.g. {\"storage\":\"pmem\"}\n"
	"  -schedulerListen=ADDR      webhooks: HTTPS scheduler extender and pod webhook\n"
	"  -insecureSchedulerListen=ADDR  the same over plain HTTP\n"
	"  -lostNodeGrace=SECONDS     webhooks, controller: a node whose Node object is missing\n"
	"                             this long is gone for good, with its volumes (default 30)\n"
	"  -maxRecvMsgSize=BYTES      largest accepted gRPC message (default 4194304)\n"
	"  -maxConcurrentStreams=N    concurrent calls per connection (default 128)\n"
	"  -maxConnections=N          open gRPC connections of each listener, each unix\n"
	"                             socket and TCP port on its own (default 1024; before\n"
	"                             0.1.0 one budget for all of them together: the same\n"
	"                             N now bounds each); a newcomer makes an idle or\n"
	"                             handshaking connection give way, else it is closed\n"
	"  -maxConnectionsPerPeer=N   gRPC over TCP: connections of one peer address on one\n"
	"                             listener (default 32)\n"
	"  -maxPeerRequestBytes=BYTES gRPC: request bytes buffered for one connection and for\n"
	"                             one TCP peer address on a listener; more is refused\n"
	"                             RESOURCE_EXHAUSTED (default 4 x -maxRecvMsgSize; at\n"
	"                             least -maxRecvMsgSize, at most 2147483647)\n"
	"  -handshakeTimeout=SECONDS  a new connection's TLS handshake, HTTP/2 preface and\n"
	"                             SETTINGS, or (metrics, scheduler endpoints) its TLS\n"
	"                             handshake and each whole request, must take at most\n"
	"                             this (default 10)\n"
	"  -certReloadInterval=SECONDS  look at -caFile, -certFile, -keyFile (and the client\n"
	"                             ones) this often; changed files are loaded for new\n"
	"                             connections (default 10; 0: never)\n"
	"  -shutdownGrace=SECONDS     time calls in flight get on SIGTERM (default 10)\n"
	"  -registrationGrace=SECONDS controller: after a start, unknown volume ids are\n"
	"                             UNAVAILABLE this long, until nodes re-registered (default "
	"90)\n"
	"  -serviceAccountDir=DIR     Kubernetes service account (token, ca.crt, namespace):\n"
	"                             controller: end the grace period once every node listed\n"
	"                             registered, lost nodes; webhooks; node: volume events,\n"
	"                             lost volumes (default\n"
	"                             /var/run/secrets/kubernetes.io/serviceaccount; \"\": never)\n"
	"  -registrationInterval=SECONDS  node: re-register (heartbeat) this often (default 30)\n"
	"  -mediaScanInterval=SECONDS  node: look for media errors in the regions and volumes\n"
	"                             this often, for metrics and the log (default 30; 0: never)\n"
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
	switch (m) {
	case PCSI_MODE_NODE:
		return "node";
	case PCSI_MODE_WEBHOOKS:
		return "webhooks";
	case PCSI_MODE_CONVERT:
		return "force-convert-raw-namespaces";
	default:
		return "controller";
	}
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

/* A Go boolean flag: "-flag" alone is true; "-flag=V" takes strconv.ParseBool's values. */
static int parse_go_bool(const char *name, const char *arg, bool *ret, FILE *err)
{
	if (!arg) {
		*ret = true;
		return 0;
	}
	if (pcsi_parse_bool(arg, ret) == 0)
		return 0;
	fprintf(err, "pmem-csi-driver: -%s=%s: expected true or false\n", name, arg);
	return -EINVAL;
}

/* Copies |s| into the config's string store; NULL when it is full. */
static const char *store_str(struct pcsi_config *c, size_t *used, const char *s)
{
	size_t len = strlen(s) + 1;
	char *p;

	if (*used + len > sizeof(c->store))
		return NULL;
	p = c->store + *used;
	memcpy(p, s, len);
	*used += len;
	return p;
}

/* -nodeSelector: a JSON object of string values, as Intel's driver reads it
 * (Go's encoding/json into map[string]string); "null" is no selector. */
static int parse_selector(struct pcsi_config *c, const char *v, FILE *err)
{
	enum json_tokener_error jerr;
	json_object *o = json_tokener_parse_verbose(v, &jerr);
	size_t used = 0;
	int rc = 0;

	c->n_node_selector = 0;
	c->has_node_selector = false;
	if (!o && jerr == json_tokener_success)
		return 0; /* null */
	if (!o || !json_object_is_type(o, json_type_object)) {
		fprintf(err,
			"pmem-csi-driver: -nodeSelector=%s: expected a JSON object of labels, "
			"e.g. {\"storage\":\"pmem\"}\n",
			v);
		json_object_put(o);
		return -EINVAL;
	}
	json_object_object_foreach(o, key, val)
	{
		const char *k, *vs;

		if (!json_object_is_type(val, json_type_string) || !*key || strlen(key) > 317 ||
		    json_object_get_string_len(val) > 63 || !safe_string(key) ||
		    !safe_string(json_object_get_string(val))) {
			fprintf(err,
				"pmem-csi-driver: -nodeSelector: label \"%.64s\" needs a name of "
				"at "
				"most 317 and a string value of at most 63 printable characters\n",
				key);
			rc = -EINVAL;
			break;
		}
		if (c->n_node_selector == PCSI_MAX_SELECTOR || !(k = store_str(c, &used, key)) ||
		    !(vs = store_str(c, &used, json_object_get_string(val)))) {
			fprintf(err, "pmem-csi-driver: -nodeSelector: at most %d labels\n",
				PCSI_MAX_SELECTOR);
			rc = -EINVAL;
			break;
		}
		c->node_selector[c->n_node_selector++] = (struct pcsi_label){ k, vs };
	}
	json_object_put(o);
	c->has_node_selector = rc == 0;
	return rc;
}

/* klog's severities, by name or number. */
static int parse_severity(const char *s, int *ret, FILE *err)
{
	static const char *const names[] = { "INFO", "WARNING", "ERROR", "FATAL" };
	int i;

	for (i = 0; i < 4; i++)
		if (!strcasecmp(s, names[i]) || (s[0] == '0' + i && !s[1])) {
			*ret = i;
			return 0;
		}
	fprintf(err,
		"pmem-csi-driver: -stderrthreshold=%s: expected INFO, WARNING, ERROR or FATAL\n",
		s);
	return -EINVAL;
}

static void ignored(struct pcsi_config *c, const char *flag)
{
	size_t i;

	for (i = 0; i < c->n_ignored; i++)
		if (!strcmp(c->ignored[i], flag))
			return;
	if (c->n_ignored < PCSI_MAX_IGNORED)
		c->ignored[c->n_ignored++] = flag;
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
	    strcmp(c->device_manager, "ndctl") && strcmp(c->device_manager, "fake") &&
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
	if (c->mode != PCSI_MODE_NODE && (c->kubelet_reg_dir || c->kubelet_reg_path)) {
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
	if (c->resizer_endpoint &&
	    (c->mode != PCSI_MODE_NODE || strncmp(c->resizer_endpoint, "unix://", 7) ||
	     check_endpoint("resizerEndpoint", c->resizer_endpoint, false, err) < 0)) {
		fprintf(err, "pmem-csi-driver: -resizerEndpoint is a node flag and a unix:// "
			     "endpoint\n");
		return -EINVAL;
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
	if (!c->node_identity_set)
		c->node_identity_shared = c->insecure;
	if (c->node_service_account &&
	    (!*c->node_service_account || strlen(c->node_service_account) > 317 ||
	     strspn(c->node_service_account, "abcdefghijklmnopqrstuvwxyz0123456789.-:") !=
		     strlen(c->node_service_account) ||
	     strchr(c->node_service_account, ':') != strrchr(c->node_service_account, ':'))) {
		fprintf(err, "pmem-csi-driver: -nodeServiceAccount must be NAME or NAMESPACE:NAME "
			     "(lower-case letters, digits, '.', '-')\n");
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
	if (c->mode == PCSI_MODE_WEBHOOKS && c->scheduler_listen && !tls) {
		fprintf(err,
			"pmem-csi-driver: -schedulerListen (HTTPS) needs -caFile, -certFile and "
			"-keyFile; -insecureSchedulerListen serves plain HTTP\n");
		return -EINVAL;
	}
	/* Flags of another mode: accepted, as Intel's driver accepts them. */
	if (c->has_node_selector && c->mode != PCSI_MODE_WEBHOOKS && c->mode != PCSI_MODE_CONVERT)
		ignored(c, "-nodeSelector");
	if (c->mode != PCSI_MODE_NODE && c->cxl_auto)
		ignored(c, "-cxlRegions");
	if (c->mode != PCSI_MODE_WEBHOOKS && c->scheduler_listen)
		ignored(c, "-schedulerListen");
	if (c->mode != PCSI_MODE_WEBHOOKS && c->insecure_scheduler_listen)
		ignored(c, "-insecureSchedulerListen");
	if (c->max_peer_bytes && c->max_peer_bytes < c->max_recv_msg) {
		fprintf(err,
			"pmem-csi-driver: -maxPeerRequestBytes=%llu is less than "
			"-maxRecvMsgSize=%zu: "
			"a largest request would never fit\n",
			(unsigned long long)c->max_peer_bytes, c->max_recv_msg);
		return -EINVAL;
	}
	if (c->kube_api_qps == 0)
		c->kube_api_qps = 5; /* client-go's default for 0 */
	if (c->kube_api_burst <= 0)
		c->kube_api_burst = 10;
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
		.lvm_shells = 2,
		.verbosity = 2,
		.log_format = PCSI_LOG_TEXT,
		.max_recv_msg = 4u << 20,
		.max_streams = 128,
		.max_conns = 1024,
		.max_conns_per_peer = 32,
		.handshake_timeout_s = 10,
		.cert_reload_s = 10,
		.shutdown_grace_s = 10,
		.registration_grace_s = 90,
		.lost_node_grace_s = 30,
		.service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount",
		.registration_interval_s = 30,
		.media_scan_interval_s = 30,
		.metrics_path = "/metrics",
		.kube_api_qps = 5,
		.kube_api_burst = 10,
		.node_service_account = "pmem-csi-node",
		.max_nodes = 10000,
		.log = { .to_stderr = true, .stderr_threshold = 2, .file_max_mb = 1800 },
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
			else if (!strcmp(optarg, "webhooks"))
				cfg->mode = PCSI_MODE_WEBHOOKS;
			else if (!strcmp(optarg, "force-convert-raw-namespaces"))
				cfg->mode = PCSI_MODE_CONVERT;
			else {
				fprintf(err,
					"pmem-csi-driver: -mode=%s: expected controller, node, "
					"webhooks or force-convert-raw-namespaces\n",
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
		case OPT_RESIZER_ENDPOINT:
			cfg->resizer_endpoint = *optarg ? optarg : NULL;
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
		case OPT_PMEM_PERCENTAGE: /* 0: make no new namespace, use what is there */
			if (parse_num("pmemPercentage", optarg, 0, 100, &n, err) < 0)
				return -EINVAL;
			cfg->pmem_percentage = (int)n;
			break;
		case OPT_LVM_SHELLS:
			if (parse_num("lvmShells", optarg, 0, 16, &n, err) < 0)
				return -EINVAL;
			cfg->lvm_shells = (unsigned)n;
			break;
		case OPT_CXL_REGIONS:
			if (!strcmp(optarg, "auto") || !strcmp(optarg, "off")) {
				cfg->cxl_auto = !strcmp(optarg, "auto");
				break;
			}
			fprintf(err,
				"pmem-csi-driver: -cxlRegions: expected off or auto, got \"%s\"\n",
				optarg);
			return -EINVAL;
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
			if (parse_go_bool("insecure", optarg, &cfg->insecure, err) < 0)
				return -EINVAL;
			break;
		case OPT_METRICS_LISTEN:
			cfg->metrics_listen = *optarg ? optarg : NULL;
			break;
		case OPT_V: /* klog's level: an int32 */
			if (parse_num("v", optarg, INT32_MIN, INT32_MAX, &n, err) < 0)
				return -EINVAL;
			cfg->verbosity = (int)n;
			break;
		case OPT_LOG_FORMAT:
		case OPT_LOGGING_FORMAT:
			if (!strcmp(optarg, "text"))
				cfg->log_format = PCSI_LOG_TEXT;
			else if (!strcmp(optarg, "json"))
				cfg->log_format = PCSI_LOG_JSON;
			else {
				fprintf(err, "pmem-csi-driver: -%s=%s: expected text or json\n",
					opt == OPT_LOG_FORMAT ? "logFormat" : "logging-format",
					optarg);
				return -EINVAL;
			}
			break;
		case OPT_METRICS_PATH:
			if (optarg[0] != '/' || strlen(optarg) > 256 || strchr(optarg, ' ')) {
				fprintf(err,
					"pmem-csi-driver: -metricsPath=%s: expected an absolute "
					"URL path\n",
					optarg);
				return -EINVAL;
			}
			cfg->metrics_path = optarg;
			break;
		case OPT_KUBE_QPS: {
			char *end;
			errno = 0;
			cfg->kube_api_qps = strtod(optarg, &end);
			if (errno || end == optarg || *end ||
			    cfg->kube_api_qps != cfg->kube_api_qps) {
				fprintf(err,
					"pmem-csi-driver: -kube-api-qps=%s: expected a number\n",
					optarg);
				return -EINVAL;
			}
			break;
		}
		case OPT_KUBE_BURST:
			if (parse_num("kube-api-burst", optarg, INT32_MIN, INT32_MAX, &n, err) < 0)
				return -EINVAL;
			cfg->kube_api_burst = (int)n;
			break;
		case OPT_NODE_SELECTOR:
			if (parse_selector(cfg, optarg, err) < 0)
				return -EINVAL;
			break;
		case OPT_SCHED_LISTEN:
			cfg->scheduler_listen = *optarg ? optarg : NULL;
			break;
		case OPT_INSECURE_SCHED_LISTEN:
			cfg->insecure_scheduler_listen = *optarg ? optarg : NULL;
			break;
		case OPT_NODE_IDENTITY:
			if (strcmp(optarg, "proven") && strcmp(optarg, "shared")) {
				fprintf(err,
					"pmem-csi-driver: -nodeIdentity=%s: expected proven or "
					"shared\n",
					optarg);
				return -EINVAL;
			}
			cfg->node_identity_shared = !strcmp(optarg, "shared");
			cfg->node_identity_set = true;
			break;
		case OPT_NODE_SA:
			cfg->node_service_account = optarg;
			break;
		case OPT_MAX_NODES:
			if (parse_num("maxNodes", optarg, 1, 1000000, &n, err) < 0)
				return -EINVAL;
			cfg->max_nodes = (uint32_t)n;
			break;
		case OPT_REG_TOKEN:
			if (*optarg && optarg[0] != '/') {
				fprintf(err,
					"pmem-csi-driver: -registryTokenFile=%s: expected an "
					"absolute path\n",
					optarg);
				return -EINVAL;
			}
			cfg->registry_token_file = *optarg ? optarg : NULL;
			break;
		case OPT_LOGTOSTDERR:
			if (parse_go_bool("logtostderr", optarg, &cfg->log.to_stderr, err) < 0)
				return -EINVAL;
			break;
		case OPT_ALSOLOGTOSTDERR:
			if (parse_go_bool("alsologtostderr", optarg, &cfg->log.also_stderr, err) <
			    0)
				return -EINVAL;
			break;
		case OPT_STDERRTHRESHOLD:
			if (parse_severity(optarg, &cfg->log.stderr_threshold, err) < 0)
				return -EINVAL;
			break;
		case OPT_LOG_FILE:
		case OPT_LOG_DIR:
			if (*optarg && optarg[0] != '/') {
				fprintf(err, "pmem-csi-driver: -%s=%s: expected an absolute path\n",
					opt == OPT_LOG_FILE ? "log_file" : "log_dir", optarg);
				return -EINVAL;
			}
			if (opt == OPT_LOG_FILE)
				cfg->log.file = *optarg ? optarg : NULL;
			else
				cfg->log.dir = *optarg ? optarg : NULL;
			break;
		case OPT_LOG_FILE_MAX:
			if (parse_num("log_file_max_size", optarg, 0, 1ll << 40, &n, err) < 0)
				return -EINVAL;
			cfg->log.file_max_mb = (uint64_t)n;
			break;
		case OPT_SKIP_HEADERS:
			if (parse_go_bool("skip_headers", optarg, &cfg->log.skip_headers, err) < 0)
				return -EINVAL;
			break;
		case OPT_ADD_DIR_HEADER:
			if (parse_go_bool("add_dir_header", optarg, &cfg->log.add_dir_header, err) <
			    0)
				return -EINVAL;
			break;
		case OPT_SKIP_LOG_HEADERS:
		case OPT_ONE_OUTPUT: {
			/* Satisfied as they are: no header lines, one file at most. */
			const char *name =
				opt == OPT_ONE_OUTPUT ? "one_output" : "skip_log_headers";
			bool b;
			if (parse_go_bool(name, optarg, &b, err) < 0)
				return -EINVAL;
			ignored(cfg, opt == OPT_ONE_OUTPUT ? "-one_output" : "-skip_log_headers");
			break;
		}
		case OPT_VMODULE:
			if (strlen(optarg) > 1024) {
				fprintf(err, "pmem-csi-driver: -vmodule: too long\n");
				return -EINVAL;
			}
			cfg->log.vmodule = *optarg ? optarg : NULL;
			break;
		case OPT_BACKTRACE_AT:
			if (*optarg && (!strchr(optarg, ':') || strlen(optarg) > 256)) {
				fprintf(err,
					"pmem-csi-driver: -log_backtrace_at=%s: expected "
					"FILE:LINE\n",
					optarg);
				return -EINVAL;
			}
			cfg->log.backtrace_at = *optarg ? optarg : NULL;
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
		case OPT_MAX_CONNS_PEER:
			if (parse_num("maxConnectionsPerPeer", optarg, 1, 1 << 20, &n, err) < 0)
				return -EINVAL;
			cfg->max_conns_per_peer = (uint32_t)n;
			break;
		case OPT_MAX_PEER_BYTES:
			if (parse_num("maxPeerRequestBytes", optarg, 1024, INT32_MAX, &n, err) < 0)
				return -EINVAL;
			cfg->max_peer_bytes = (uint64_t)n;
			break;
		case OPT_HANDSHAKE_TIMEOUT:
			if (parse_num("handshakeTimeout", optarg, 1, 3600, &n, err) < 0)
				return -EINVAL;
			cfg->handshake_timeout_s = (uint32_t)n;
			break;
		case OPT_CERT_RELOAD:
			if (parse_num("certReloadInterval", optarg, 0, 86400, &n, err) < 0)
				return -EINVAL;
			cfg->cert_reload_s = (uint32_t)n;
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
		case OPT_LOST_GRACE:
			if (parse_num("lostNodeGrace", optarg, 0, 86400, &n, err) < 0)
				return -EINVAL;
			cfg->lost_node_grace_s = (uint32_t)n;
			break;
		case OPT_REG_INTERVAL:
			if (parse_num("registrationInterval", optarg, 1, 3600, &n, err) < 0)
				return -EINVAL;
			cfg->registration_interval_s = (uint32_t)n;
			break;
		case OPT_MEDIA_SCAN:
			if (parse_num("mediaScanInterval", optarg, 0, 86400, &n, err) < 0)
				return -EINVAL;
			cfg->media_scan_interval_s = (uint32_t)n;
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
