/* config.h: command-line configuration, parsed once into an immutable struct.
 *
 * Flags follow the original Go driver and work in both spellings,
 * -mode=node and --mode=node (getopt_long_only). pcsi_config_parse() returns
 * 0, 1 when --help or --version was handled (exit 0), or -EINVAL after
 * printing one line that says what is wrong (exit 2). */
#ifndef PCSI_CONFIG_H
#define PCSI_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "daemon/core/log.h"

enum pcsi_mode { PCSI_MODE_CONTROLLER, PCSI_MODE_NODE };

struct pcsi_config {
	enum pcsi_mode mode;
	const char *endpoint;		 /* CSI socket (unix:// or tcp://) */
	const char *registry_endpoint;	 /* controller: listen; node: where to register */
	const char *controller_endpoint; /* node: TCP controller service */
	const char *node_id;
	const char *driver_name;
	const char *device_manager; /* "lvm", "direct" (alias "ndctl") */
	const char *state_path;	    /* node: volume records (default /var/lib/<drivername>) */
	int pmem_percentage;
	const char *ca_file, *cert_file, *key_file;
	const char *client_cert_file, *client_key_file; /* default: cert/key */
	bool insecure;					/* allow plaintext TCP */
	const char *metrics_listen;
	int verbosity;
	enum pcsi_log_format log_format;
	size_t max_recv_msg;
	uint32_t max_streams, max_conns;
	uint32_t shutdown_grace_s;
	uint32_t registration_grace_s;	  /* controller: unknown ids are UNAVAILABLE this long */
	const char *service_account_dir;  /* controller: Kubernetes API token + CA ("": none) */
	uint32_t registration_interval_s; /* node: heartbeat re-registration period */
	const char *kubelet_reg_dir;	  /* node: kubelet's plugins_registry (NULL: none) */
	const char *kubelet_reg_path;	  /* node: the CSI socket as kubelet sees it */
};

int pcsi_config_parse(struct pcsi_config *cfg, int argc, char **argv, FILE *out, FILE *err);

const char *pcsi_mode_name(enum pcsi_mode m);

/* Whether volumes of -deviceManager can grow (not direct: an fsdax namespace
 * cannot). The controller role announces expansion by it: it has no backend
 * of its own, the flag names the nodes' one. */
bool pcsi_config_volumes_grow(const struct pcsi_config *cfg);

/* The peer name this role expects from the other role's certificate, and the
 * name of its own certificate. */
const char *pcsi_config_peer_name(const struct pcsi_config *cfg);

#endif
