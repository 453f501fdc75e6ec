/* lvm_report.h: parsing of lvm2 JSON reports (pure, unit-tested).
 *
 * The commands are run with --reportformat json --units b --nosuffix, so
 * sizes are strings of decimal digits. A report looks like
 *   {"report":[{"vg":[{"vg_name":"ndbus0region0fsdax","vg_size":"...",...}]}]}
 * Each parser fills up to |n| rows and returns how many rows the report has
 * (possibly more than |n|), or -EINVAL for a malformed report (not JSON, a
 * missing field, a size that is not a number, a name that does not fit). */
#ifndef PCSI_LVM_REPORT_H
#define PCSI_LVM_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pcsi_lvm_vg {
	char name[128];
	uint64_t size, free;
	uint64_t extent_size; /* 0 when the report has no vg_extent_size */
	/* vg_tags holds PCSI_LVM_ERASED_TAG (backend.h); false when the report
	 * has no vg_tags */
	bool erased;
};

struct pcsi_lvm_lv {
	char name[128];
	char vg[128];
	char path[256];
	uint64_t size;
};

struct pcsi_lvm_pv {
	char name[256]; /* device path */
	char vg[128];	/* "" when the PV is in no VG */
	/* where its first extent starts (bytes) and how many it has; 0 when
	 * the report has no pe_start / pv_pe_count */
	uint64_t pe_start, pe_count;
};

/* vgs -o vg_name,vg_size,vg_free[,vg_extent_size][,vg_tags] */
int pcsi_lvm_parse_vgs(const char *json, struct pcsi_lvm_vg *out, size_t n);
/* lvs -o lv_name,vg_name,lv_path,lv_size */
int pcsi_lvm_parse_lvs(const char *json, struct pcsi_lvm_lv *out, size_t n);
/* pvs -o pv_name,vg_name */
int pcsi_lvm_parse_pvs(const char *json, struct pcsi_lvm_pv *out, size_t n);

#endif
