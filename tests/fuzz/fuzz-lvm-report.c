/* fuzz-lvm-report.c: the lvm2 JSON report parsers (backends/lvm_report.c).
 *
 * Input: a report as lvs, vgs or pvs would print it. It goes through all
 * three parsers, each twice: with room for 4 rows and with none.
 *
 * Checked: a result is -EINVAL or a row count, the same whatever the room,
 * and the rows filled hold NUL-terminated strings inside their fields. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backends/lvm_report.h"
#include "tests/fuzz/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ROOM 4

#define TERMINATED(field) (strnlen((field), sizeof(field)) < sizeof(field))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *json = fuzz_strndup(data, size);
	struct pcsi_lvm_vg vgs[ROOM];
	struct pcsi_lvm_lv lvs[ROOM];
	struct pcsi_lvm_pv pvs[ROOM];
	int rc, i;

	rc = pcsi_lvm_parse_vgs(json, vgs, ROOM);
	FUZZ_CHECK(rc == pcsi_lvm_parse_vgs(json, NULL, 0), "vgs: the result depends on the room");
	FUZZ_CHECK(rc >= 0 || rc == -EINVAL, "vgs: an unexpected error");
	for (i = 0; i < rc && i < ROOM; i++)
		FUZZ_CHECK(TERMINATED(vgs[i].name), "vgs: a name without its NUL");

	rc = pcsi_lvm_parse_lvs(json, lvs, ROOM);
	FUZZ_CHECK(rc == pcsi_lvm_parse_lvs(json, NULL, 0), "lvs: the result depends on the room");
	FUZZ_CHECK(rc >= 0 || rc == -EINVAL, "lvs: an unexpected error");
	for (i = 0; i < rc && i < ROOM; i++)
		FUZZ_CHECK(TERMINATED(lvs[i].name) && TERMINATED(lvs[i].vg) &&
				   TERMINATED(lvs[i].path),
			   "lvs: a string without its NUL");

	rc = pcsi_lvm_parse_pvs(json, pvs, ROOM);
	FUZZ_CHECK(rc == pcsi_lvm_parse_pvs(json, NULL, 0), "pvs: the result depends on the room");
	FUZZ_CHECK(rc >= 0 || rc == -EINVAL, "pvs: an unexpected error");
	for (i = 0; i < rc && i < ROOM; i++)
		FUZZ_CHECK(TERMINATED(pvs[i].name) && TERMINATED(pvs[i].vg),
			   "pvs: a string without its NUL");
	free(json);
	return 0;
}
