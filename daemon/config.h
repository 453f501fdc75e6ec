/* config.h: command-line configuration, parsed once into an immutable struct.
 *
 * Flags follow the original Go driver and work in both spellings,
 * -mode=node and --mode=node (getopt_long_only), with Go's value rules
 * (-flag=value or -flag value; a boolean as -flag or -flag=false).
 * pcsi_config_parse() returns 0, 1 when --help or --version was handled
 * (exit 0), or -EINVAL after printing one line that says what is wrong
 * (exit 2).
 *
 * Every flag Intel's PMEM-CSI v1.1.0 accepts is accepted too, so that its
 * deployment files and operator run this driver unchanged: its own flags
 * (-logging-format, -kube-api-qps, -kube-api-burst, -metricsPath,
 * -nodeSelector, -schedulerListen, -insecureSchedulerListen, the modes
 * webhooks and force-convert-raw-namespaces) and klog's (-v, -vmodule,
 * -logtostderr, -alsologtostderr, -stderrthreshold, -log_file, -log_dir,
 * -log_file_max_size, -skip_headers, -skip_log_headers, -add_dir_header,
 * -one_output, -log_backtrace_at), with their meaning. Those that mean
 * nothing here are named in |ignored| for main to log once. */
#ifndef PCSI_CONFIG_H
#define PCSI_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "daemon/core/log.h"

enum pcsi_mode {
	PCSI_MODE_CONTROLLER, /* central controller: Controller service + Registry */
	PCSI_MODE_NODE,	      /* node: Identity, Node and the node's Controller */
	PCSI_MODE_WEBHOOKS,   /* Intel's v1.1 controller: the PVC rescheduler (and,
				 when asked, the scheduler extender and pod webhook) */
	PCSI_MODE_CONVERT,    /* force-convert-raw-namespaces: once per node, then wait */
};

#define PCSI_MAX_SELECTOR 16
#define PCSI_MAX_IGNORED  16

/* One label of -nodeSelector. */
struct pcsi_label {
	const char *key, *value;
};

struct pcsi_config {
	enum pcsi_mode mode;
	const char *endpoint;		 /* CSI socket (unix:// or tcp://) */
	const char *registry_endpoint;	 /* controller: listen; node: where to register */
	const char *controller_endpoint; /* node: TCP controller service */
	const char *resizer_endpoint;	 /* node: unix socket for a cluster-wide csi-resizer */
	const char *node_id;
	const char *driver_name;
	const char *device_manager; /* "lvm", "direct" (alias "ndctl") */
	const char *state_path;	    /* node: volume records (default /var/lib/<drivername>) */
	int pmem_percentage;
	unsigned lvm_shells; /* lvm: lvm shells (0: a process per command) */
	bool cxl_auto;	     /* node: -cxlRegions=auto (cxl.h) */
	const char *ca_file, *cert_file, *key_file;
	const char *client_cert_file, *client_key_file; /* default: cert/key */
	bool insecure;					/* allow plaintext TCP */
	/* controller: who may speak for a node at the registry (nodeauth.h) */
	bool node_identity_shared, node_identity_set;
	const char *node_service_account; /* "[NS:]NAME" of the node pods */
	uint32_t max_nodes;
	const char *registry_token_file; /* node: its proof for the registry */
	const char *metrics_listen;
	int verbosity;
	enum pcsi_log_format log_format;
	size_t max_recv_msg;
	uint32_t max_streams, max_conns; /* max_conns: of each listener */
	uint32_t max_conns_per_peer;	 /* TCP: of one address on one listener */
	uint64_t max_peer_bytes;	 /* request bytes of a connection / TCP address (0: 4 x
					    max_recv_msg) */
	uint32_t handshake_timeout_s;	 /* TLS + preface + SETTINGS; HTTP: the first request */
	uint32_t cert_reload_s;		 /* look at the TLS files this often (0: never) */
	uint32_t shutdown_grace_s;
	uint32_t registration_grace_s;	  /* controller: unknown ids are UNAVAILABLE this long */
	uint32_t lost_node_grace_s;	  /* webhooks, controller: grace of a missing Node */
	const char *service_account_dir;  /* controller: Kubernetes API token + CA ("": none) */
	uint32_t registration_interval_s; /* node: heartbeat re-registration period */
	uint32_t media_scan_interval_s;	  /* node: media-error scans (0: none) */
	const char *kubelet_reg_dir;	  /* node: kubelet's plugins_registry (NULL: none) */
	const char *kubelet_reg_path;	  /* node: the CSI socket as kubelet sees it */
	const char *metrics_path;	  /* -metricsPath: /metrics moves there (+ /simple) */
	/* Kubernetes API clients (webhooks, force-convert, the controller's node list) */
	double kube_api_qps; /* -kube-api-qps: sustained requests per second */
	int kube_api_burst;  /* -kube-api-burst: requests above that rate at once */
	/* -nodeSelector (JSON map): the labels of nodes meant to run the driver */
	bool has_node_selector; /* given and not "null" */
	struct pcsi_label node_selector[PCSI_MAX_SELECTOR];
	size_t n_node_selector;
	/* webhooks: the scheduler extender and the pod mutating webhook */
	const char *scheduler_listen;	       /* HTTPS (needs -caFile, -certFile, -keyFile) */
	const char *insecure_scheduler_listen; /* HTTP */
	struct pcsi_log_output log;	       /* klog's output flags */
	/* flags accepted for compatibility that have no effect here, for the log */
	const char *ignored[PCSI_MAX_IGNORED];
	size_t n_ignored;
	char store[2048]; /* -nodeSelector's strings */
};

int pcsi_config_parse(struct pcsi_config *cfg, int argc, char **argv, FILE *out, FILE *err);

const char *pcsi_mode_name(enum pcsi_mode m);

/* Whether volumes of -deviceManager grow in place, online (not direct: an
 * fsdax namespace keeps its size, and a volume grows offline by copying,
 * daemon/node/regrow.h). The controller role announces ONLINE or OFFLINE
 * expansion by it: it has no backend of its own, the flag names the nodes'. */
bool pcsi_config_volumes_grow(const struct pcsi_config *cfg);

/* The peer name this role expects from the other role's certificate, and the
 * name of its own certificate. */
const char *pcsi_config_peer_name(const struct pcsi_config *cfg);

#endif
