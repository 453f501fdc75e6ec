/* role.h: what main.c hands to a role, and the one way a role listens.
 *
 * A role (node/role.h, controller/role.h) gets the loop, the parsed flags, the
 * gRPC server, the TLS contexts and the Identity service in one struct
 * pcsi_role_env, all borrowed from main.c for the life of the process. */
#ifndef PCSI_ROLE_H
#define PCSI_ROLE_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <uv.h>

#include "daemon/config.h"
#include "daemon/csi/identity.h"
#include "rpc/certwatch.h"
#include "rpc/server.h"
#include "rpc/tls.h"

struct pcsi_role_env {
	uv_loop_t *loop;
	const struct pcsi_config *cfg;
	struct pcsi_server *server;
	struct pcsi_tls_ctx *server_tls; /* NULL: no -caFile */
	struct pcsi_tls_ctx *client_tls; /* outgoing calls: controller -> nodes, node -> registry */
	struct pcsi_certwatch *certwatch; /* reloads the TLS files (NULL: never) */
	struct pcsi_identity *identity;
};

/* Listens on |url| (|what| names it in logs) with |services| (borrowed, must
 * outlive the server). TCP endpoints get mutual TLS, or plaintext with a
 * warning when there is no TLS context (-insecure). Returns 0, or -1 after
 * logging why. */
int pcsi_role_listen(const struct pcsi_role_env *env, const char *what, const char *url,
		     ProtobufCService *const *services, size_t n);

#endif
