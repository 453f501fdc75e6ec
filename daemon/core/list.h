/* list.h: an intrusive, circular, doubly linked list.
 *
 * Embed a struct pcsi_list in each element and keep one as the head; an empty
 * list is a head that points at itself. Removing an element needs no search
 * and no knowledge of the head. Nothing is allocated here. */
#ifndef PCSI_LIST_H
#define PCSI_LIST_H

#include <stdbool.h>
#include <stddef.h>

#include "daemon/core/util.h"

struct pcsi_list {
	struct pcsi_list *prev, *next;
};

#define PCSI_LIST_INIT(name)     \
	{                        \
		&(name), &(name) \
	}

static inline void pcsi_list_init(struct pcsi_list *head)
{
	head->prev = head->next = head;
}

static inline bool pcsi_list_empty(const struct pcsi_list *head)
{
	return head->next == head;
}

/* Appends |e| (not in any list) at the end of |head|. */
static inline void pcsi_list_add_tail(struct pcsi_list *head, struct pcsi_list *e)
{
	e->prev = head->prev;
	e->next = head;
	head->prev->next = e;
	head->prev = e;
}

/* Inserts |e| at the front of |head|. */
static inline void pcsi_list_add_head(struct pcsi_list *head, struct pcsi_list *e)
{
	e->next = head->next;
	e->prev = head;
	head->next->prev = e;
	head->next = e;
}

/* Takes |e| out of its list; |e| then is an empty list of its own, so a
 * second removal is harmless. */
static inline void pcsi_list_remove(struct pcsi_list *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	e->prev = e->next = e;
}

/* Moves every element of |from| to |to| (an empty list), in order; |from|
 * is empty afterwards. */
static inline void pcsi_list_move_all(struct pcsi_list *to, struct pcsi_list *from)
{
	pcsi_list_init(to);
	if (pcsi_list_empty(from))
		return;
	to->next = from->next;
	to->prev = from->prev;
	to->next->prev = to;
	to->prev->next = to;
	pcsi_list_init(from);
}

#define pcsi_list_entry(ptr, type, member) pcsi_container_of(ptr, type, member)

/* Iterates |pos| (a struct pcsi_list *) over |head|; the _safe form allows
 * removing |pos| inside the loop. */
#define pcsi_list_foreach(pos, head) \
	for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)
#define pcsi_list_foreach_safe(pos, tmp, head)                           \
	for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); \
	     (pos) = (tmp), (tmp) = (pos)->next)

#endif
