/* role.c: see role.h. */
#include "daemon/csi/role.h"

#include <errno.h>

#include "daemon/core/log.h"
#include "rpc/endpoint.h"

int pcsi_role_listen(const struct pcsi_role_env *env, const char *what, const char *url,
		     ProtobufCService *const *services, size_t n)
{
	struct pcsi_endpoint ep;
	struct pcsi_tls_ctx *tls = NULL;
	char err[256];
	int rc;

	if (pcsi_endpoint_parse(url, &ep, err, sizeof(err)) < 0) {
		pcsi_err("bad endpoint", "what=%s err=\"%s\"", what, err);
		return -1;
	}
	if (!ep.is_unix) {
		tls = env->server_tls;
		if (!tls)
			pcsi_warn("serving plaintext TCP without TLS (-insecure)",
				  "what=%s endpoint=%s", what, url);
	}
	rc = pcsi_server_listen(env->server, &ep, what, tls, services, n);
	if (rc < 0) {
		pcsi_err("cannot listen", "what=%s endpoint=%s err=\"%s\"", what, url,
			 rc == -EEXIST ? "path exists and is not a socket" : uv_strerror(rc));
		return -1;
	}
	pcsi_info(1, "listening", "what=%s endpoint=%s tls=%s", what, url, tls ? "mutual" : "off");
	return 0;
}
