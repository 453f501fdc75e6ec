/* inflight.c: see inflight.h. */
#include "daemon/csi/inflight.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/util.h"

struct key {
	struct pcsi_list link;
	char name[];
};

static struct key *find(const struct pcsi_inflight *t, const char *name)
{
	struct pcsi_list *p;

	pcsi_list_foreach (p, &t->keys) {
		struct key *k = pcsi_list_entry(p, struct key, link);
		if (!strcmp(k->name, name))
			return k;
	}
	return NULL;
}

void pcsi_inflight_init(struct pcsi_inflight *t)
{
	pcsi_list_init(&t->keys);
	t->n = 0;
}

int pcsi_inflight_take(struct pcsi_inflight *t, const char *name)
{
	size_t len = strlen(name);
	struct key *k;

	if (find(t, name))
		return -EALREADY;
	k = pcsi_xmalloc(sizeof(*k) + len + 1);
	memcpy(k->name, name, len + 1);
	pcsi_list_add_tail(&t->keys, &k->link);
	t->n++;
	return 0;
}

void pcsi_inflight_drop(struct pcsi_inflight *t, const char *name)
{
	struct key *k = find(t, name);

	if (!k)
		return;
	pcsi_list_remove(&k->link);
	free(k);
	t->n--;
}

bool pcsi_inflight_has(const struct pcsi_inflight *t, const char *name)
{
	return find(t, name) != NULL;
}

void pcsi_inflight_done(struct pcsi_inflight *t)
{
	while (!pcsi_list_empty(&t->keys)) {
		struct key *k = pcsi_list_entry(t->keys.next, struct key, link);
		pcsi_list_remove(&k->link);
		free(k);
	}
	t->n = 0;
}
