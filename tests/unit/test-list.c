/* test-list.c: unit tests for daemon/core/list.h (the intrusive list). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/list.h"

struct item {
	int v;
	struct pcsi_list link;
};

/* Writes the values of |head| into |out| (at most |n|); returns how many. */
static size_t values(struct pcsi_list *head, int *out, size_t n)
{
	struct pcsi_list *p;
	size_t k = 0;

	pcsi_list_foreach (p, head) {
		if (k < n)
			out[k] = pcsi_list_entry(p, struct item, link)->v;
		k++;
	}
	return k;
}

/* Checks the prev links agree with the next links. */
static void check_links(struct pcsi_list *head)
{
	struct pcsi_list *p = head;

	do {
		ck_assert_ptr_eq(p->next->prev, p);
		ck_assert_ptr_eq(p->prev->next, p);
		p = p->next;
	} while (p != head);
}

START_TEST(init_is_empty)
{
	struct pcsi_list head, st = PCSI_LIST_INIT(st);
	int v[1];

	pcsi_list_init(&head);
	ck_assert(pcsi_list_empty(&head));
	ck_assert_ptr_eq(head.next, &head);
	ck_assert_ptr_eq(head.prev, &head);
	ck_assert(pcsi_list_empty(&st));
	ck_assert_ptr_eq(st.next, &st);
	ck_assert_uint_eq(values(&head, v, 1), 0);
}
END_TEST

START_TEST(add_tail_and_head_order)
{
	struct pcsi_list head;
	struct item it[5];
	int v[5];
	size_t i;

	pcsi_list_init(&head);
	for (i = 0; i < 5; i++)
		it[i].v = (int)i;
	pcsi_list_add_tail(&head, &it[1].link);
	pcsi_list_add_tail(&head, &it[2].link);
	pcsi_list_add_head(&head, &it[0].link);
	pcsi_list_add_tail(&head, &it[3].link);
	ck_assert(!pcsi_list_empty(&head));
	check_links(&head);
	ck_assert_uint_eq(values(&head, v, 5), 4);
	ck_assert_int_eq(v[0], 0);
	ck_assert_int_eq(v[1], 1);
	ck_assert_int_eq(v[2], 2);
	ck_assert_int_eq(v[3], 3);
	pcsi_list_add_head(&head, &it[4].link);
	check_links(&head);
	ck_assert_uint_eq(values(&head, v, 5), 5);
	ck_assert_int_eq(v[0], 4);
	ck_assert_int_eq(v[4], 3);
	ck_assert_ptr_eq(head.prev, &it[3].link);
}
END_TEST

START_TEST(remove_twice_is_harmless)
{
	struct pcsi_list head;
	struct item it[3] = { { .v = 0 }, { .v = 1 }, { .v = 2 } };
	int v[3];
	size_t i;

	pcsi_list_init(&head);
	for (i = 0; i < 3; i++)
		pcsi_list_add_tail(&head, &it[i].link);
	pcsi_list_remove(&it[1].link);
	ck_assert(pcsi_list_empty(&it[1].link));
	pcsi_list_remove(&it[1].link);
	check_links(&head);
	ck_assert_uint_eq(values(&head, v, 3), 2);
	ck_assert_int_eq(v[0], 0);
	ck_assert_int_eq(v[1], 2);
	/* The removed element can be added again. */
	pcsi_list_add_tail(&head, &it[1].link);
	check_links(&head);
	ck_assert_uint_eq(values(&head, v, 3), 3);
	ck_assert_int_eq(v[2], 1);
	/* Emptying the list. */
	for (i = 0; i < 3; i++) {
		pcsi_list_remove(&it[i].link);
		pcsi_list_remove(&it[i].link);
	}
	ck_assert(pcsi_list_empty(&head));
	check_links(&head);
}
END_TEST

START_TEST(foreach_safe_removes_while_iterating)
{
	struct pcsi_list head, *p, *t;
	struct item it[6];
	int v[6], seen = 0;
	size_t i;

	pcsi_list_init(&head);
	for (i = 0; i < 6; i++) {
		it[i].v = (int)i;
		pcsi_list_add_tail(&head, &it[i].link);
	}
	/* Remove the odd ones, visiting each element once. */
	pcsi_list_foreach_safe (p, t, &head) {
		struct item *e = pcsi_list_entry(p, struct item, link);
		ck_assert_int_eq(e->v, seen);
		seen++;
		if (e->v % 2)
			pcsi_list_remove(p);
	}
	ck_assert_int_eq(seen, 6);
	check_links(&head);
	ck_assert_uint_eq(values(&head, v, 6), 3);
	ck_assert_int_eq(v[0], 0);
	ck_assert_int_eq(v[1], 2);
	ck_assert_int_eq(v[2], 4);
	/* Remove everything. */
	pcsi_list_foreach_safe (p, t, &head)
		pcsi_list_remove(p);
	ck_assert(pcsi_list_empty(&head));
}
END_TEST

static Suite *list_suite(void)
{
	Suite *s = suite_create("list");
	TCase *tc = tcase_create("list");

	tcase_add_test(tc, init_is_empty);
	tcase_add_test(tc, add_tail_and_head_order);
	tcase_add_test(tc, remove_twice_is_harmless);
	tcase_add_test(tc, foreach_safe_removes_while_iterating);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(list_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
