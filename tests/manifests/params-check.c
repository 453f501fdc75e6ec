/* params-check.c: runs the driver's own parameter parser (daemon/params.c)
 * over the parameters that the manifests hand to the driver, so that a
 * StorageClass or inline-volume attribute the driver would refuse fails the
 * manifest tests instead of a CreateVolume in a cluster.
 *
 *   params-check create|ephemeral|mutable [KEY=VALUE ...]
 *
 * "create": StorageClass parameters (CreateVolumeRequest.parameters);
 * "ephemeral": volumeAttributes of a CSI inline volume; "mutable": a
 * VolumeAttributesClass' parameters (mutable_parameters). Exit 0 and no output
 * when the driver accepts them; exit 1 with the driver's message otherwise;
 * exit 2 on usage errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/volid.h"
#include "daemon/csi/params.h"

int main(int argc, char **argv)
{
	enum pcsi_param_origin origin;
	struct pcsi_kv *kv;
	struct pcsi_params p;
	char err[512] = "";
	int i, n = argc - 2;

	if (argc < 2) {
		fprintf(stderr, "usage: %s create|ephemeral|mutable [KEY=VALUE ...]\n", argv[0]);
		return 2;
	}
	if (!strcmp(argv[1], "create") || !strcmp(argv[1], "mutable"))
		origin = PCSI_ORIGIN_CREATE;
	else if (!strcmp(argv[1], "ephemeral"))
		origin = PCSI_ORIGIN_EPHEMERAL;
	else {
		fprintf(stderr, "params-check: unknown origin %s\n", argv[1]);
		return 2;
	}
	kv = calloc(n > 0 ? (size_t)n : 1, sizeof(*kv));
	if (!kv)
		return 2;
	for (i = 0; i < n; i++) {
		char *eq = strchr(argv[i + 2], '=');

		if (!eq) {
			fprintf(stderr, "params-check: %s is not KEY=VALUE\n", argv[i + 2]);
			free(kv);
			return 2;
		}
		*eq = '\0';
		kv[i].key = argv[i + 2];
		kv[i].value = eq + 1;
	}
	if (!strcmp(argv[1], "mutable")
		    ? pcsi_params_mutable(kv, (size_t)n, &p, err, sizeof(err)) < 0
		    : pcsi_params_parse(origin, kv, (size_t)n, &p, err, sizeof(err)) < 0) {
		printf("%s\n", err);
		free(kv);
		return 1;
	}
	free(kv);
	return 0;
}
