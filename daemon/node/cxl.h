/* cxl.h: CXL persistent memory: the regions the node's backend uses.
 *
 * A CXL type-3 memory device's persistent capacity reaches libnvdimm (and so
 * both backends) only through a CXL region, and Linux assembles none by
 * itself, not even after a reboot for one that existed before. With
 * -cxlRegions=auto the node, before it opens its backend:
 *   1. lists the devices, regions and root decoders (`cxl list -M -R -D -T -i`);
 *   2. for every device with persistent capacity that no committed region
 *      maps: if <statePath>/cxl-regions.json records it (by serial number),
 *      assembles its region again with the recorded root decoder and size,
 *      which gives the same address range and device offsets, so that the
 *      namespace labels and the data come back; a region of it that a kill
 *      left uncommitted is destroyed first (one that a kill stopped before
 *      it named the device holds only address space until the next boot:
 *      nothing says whose it is, so it stays);
 *   3. a device not recorded is taken only if its label storage area
 *      (`cxl read-labels`) holds no namespace, or only namespaces of this
 *      driver (the lvm backend's "pmem-csi", volume and snapshot ids): it is
 *      recorded first (so that a kill in the middle is finished on the next
 *      start), then assembled, one 1-way region of its whole persistent
 *      capacity. Any other device, and every region this node did not
 *      record, is left alone and logged once.
 * Every step is a child process (`cxl`) or a thread-pool job; the loop never
 * waits. `cxl` rather than libcxl: libcxl 76.1 has no call that assembles a
 * region (the steps live in the tool), and the tool's JSON is all the
 * listing needs. What a step fails at is logged; the backend opens anyway
 * (with what is there) and the whole pass runs again before each of its
 * retries. -cxlRegions=off (the default, as Intel's driver prepared raw
 * hardware only where a node label asked) never touches CXL devices; regions
 * made by others are used like NVDIMM regions either way. */
#ifndef PCSI_NODE_CXL_H
#define PCSI_NODE_CXL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/core/proc.h"

#define PCSI_CXL_MAX 32 /* devices, regions, decoders in one listing */

struct pcsi_cxl_memdev {
	char name[32]; /* "mem0" */
	uint64_t serial;
	uint64_t pmem_size;
};

struct pcsi_cxl_region {
	char name[32];	 /* "region0" */
	char memdev[32]; /* of its first mapping; "" when it has none */
	bool committed;	 /* decode_state "commit" */
	bool pmem;	 /* a persistent-memory region (no "type": true) */
};

struct pcsi_cxl_decoder {
	char name[32]; /* "decoder0.0" */
	bool pmem_capable;
	uint64_t max_extent; /* max_available_extent */
};

struct pcsi_cxl_topo {
	struct pcsi_cxl_memdev mem[PCSI_CXL_MAX];
	struct pcsi_cxl_region reg[PCSI_CXL_MAX];
	struct pcsi_cxl_decoder dec[PCSI_CXL_MAX]; /* root decoders */
	size_t nmem, nreg, ndec;
};

/* Parses `cxl list -M -R -D -T -i` output: the tool nests and wraps objects
 * differently with its options and with what exists, so every object of
 * the tree is classified by its keys. 0, or -EINVAL. */
int pcsi_cxl_parse_list(const char *json, struct pcsi_cxl_topo *t);

/* What a label storage area holds, from its raw bytes: 0 (no valid index:
 * never used, or wiped), the number (> 0) of namespace labels in use when
 * every one of them is this driver's, or -EEXIST (a label of another
 * namespace), -EINVAL (an index it cannot read: treated as foreign). */
int pcsi_cxl_lsa_check(const uint8_t *lsa, size_t len);

/* One recorded region: the device (serial) and how it was assembled. */
struct pcsi_cxl_record {
	uint64_t serial;
	char decoder[32];
	uint64_t size;
};

enum pcsi_cxl_mode { PCSI_CXL_OFF, PCSI_CXL_AUTO };

struct pcsi_cxl {
	uv_loop_t *loop;
	char *path; /* <statePath>/cxl-regions.json */
	struct pcsi_cxl_record rec[PCSI_CXL_MAX];
	size_t nrec;
	bool rec_loaded;
	struct pcsi_cxl_topo topo;
	bool skip[PCSI_CXL_MAX]; /* devices done with (or given up on) in this pass */
	int cur;		 /* the device a step works on; -1 none */
	int step;
	struct pcsi_proc proc;
	uv_work_t work;
	int work_rc;
	void (*done)(void *data);
	void *data;
	bool running, closing;
	bool verify; /* the listing running follows a create */
	char last_error[256];
};

/* Sets |c| up; |state_dir| is -statePath. */
void pcsi_cxl_init(struct pcsi_cxl *c, uv_loop_t *loop, const char *state_dir);

/* Runs one pass (above); |done| runs on a later loop turn when it ends,
 * whatever it achieved. At most one pass at a time. */
void pcsi_cxl_assemble(struct pcsi_cxl *c, void (*done)(void *data), void *data);

/* Frees what |c| holds; a running child is left to finish (a region half
 * made is worse than a late exit), its result ignored. */
void pcsi_cxl_done(struct pcsi_cxl *c);

#endif
