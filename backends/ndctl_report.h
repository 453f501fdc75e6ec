/* ndctl_report.h: parsing of `ndctl list --buses --regions --namespaces
 * --idle` JSON (pure, unit-tested), for work that is done with the ndctl
 * tool rather than libndctl (the raw-namespace conversion, as Intel's
 * driver did it).
 *
 * ndctl prints one bus as an object and several as an array; a bus holds
 * "regions", a region "namespaces". Only pmem regions are reported. */
#ifndef PCSI_NDCTL_REPORT_H
#define PCSI_NDCTL_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pcsi_nd_region {
	char bus[32];  /* "ndbus0" */
	char dev[32];  /* "region0" */
	bool active;   /* not "state":"disabled" */
	bool readonly; /* "readonly": true (or "ro") */
	uint64_t size, available;
};

struct pcsi_nd_ns {
	char bus[32], region[32];
	char dev[32];	   /* "namespace0.0" */
	char mode[16];	   /* "raw", "fsdax", "devdax", "sector" */
	char blockdev[32]; /* "pmem0" ("" without one) */
	char name[128];	   /* "" when unnamed */
	uint64_t size;
};

/* Fills up to |nr| regions and |nn| namespaces; returns 0 and sets *ret_nr,
 * *ret_nn to how many exist (possibly more than fit), or -EINVAL for output
 * that is not ndctl's (not JSON, a field of the wrong type, a name that does
 * not fit or holds characters a device name cannot have). */
int pcsi_nd_parse_list(const char *json, struct pcsi_nd_region *regions, size_t nr, size_t *ret_nr,
		       struct pcsi_nd_ns *nss, size_t nn, size_t *ret_nn);

#endif
