/* fuzz-ndctl-report.c: the parser of ndctl's JSON listing
 * (backends/ndctl_report.c), what force-convert-raw-namespaces reads.
 *
 * Input: what `ndctl list --buses --regions --namespaces --idle` would print.
 * It is parsed with room for 4 regions and 4 namespaces and with none.
 *
 * Checked: the result is 0 or -EINVAL and the counts do not depend on the
 * room; filled entries hold NUL-terminated strings, and device names only
 * the characters of device names (they reach ndctl's command line). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backends/ndctl_report.h"
#include "tests/fuzz/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ROOM		  4
#define TERMINATED(field) (strnlen((field), sizeof(field)) < sizeof(field))
#define DEVNAME(field)                                                                           \
	(strspn((field), "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == \
	 strlen(field))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *json = fuzz_strndup(data, size);
	struct pcsi_nd_region r[ROOM];
	struct pcsi_nd_ns n[ROOM];
	size_t nr, nn, nr0, nn0;
	int rc, rc0;

	rc = pcsi_nd_parse_list(json, r, ROOM, &nr, n, ROOM, &nn);
	rc0 = pcsi_nd_parse_list(json, NULL, 0, &nr0, NULL, 0, &nn0);
	FUZZ_CHECK(rc == 0 || rc == -EINVAL, "an unexpected error");
	FUZZ_CHECK(rc == rc0 && nr == nr0 && nn == nn0, "the result depends on the room");
	for (size_t i = 0; rc == 0 && i < nr && i < ROOM; i++)
		FUZZ_CHECK(TERMINATED(r[i].bus) && TERMINATED(r[i].dev) && DEVNAME(r[i].bus) &&
				   DEVNAME(r[i].dev),
			   "a region's names");
	for (size_t i = 0; rc == 0 && i < nn && i < ROOM; i++)
		FUZZ_CHECK(TERMINATED(n[i].dev) && TERMINATED(n[i].mode) &&
				   TERMINATED(n[i].blockdev) && TERMINATED(n[i].name) &&
				   DEVNAME(n[i].dev) && DEVNAME(n[i].blockdev) &&
				   DEVNAME(n[i].region) && DEVNAME(n[i].bus),
			   "a namespace's names");
	free(json);
	return 0;
}
