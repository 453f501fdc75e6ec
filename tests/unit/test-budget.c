/* test-budget.c: unit tests for rpc/budget.h (connection budgets: limits,
 * which connection makes room, byte reservations). */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/budget.h"

static struct sockaddr_storage addrs[8];

/* An IPv4 address 10.0.0.|n| (n < 4), or the same as IPv4-mapped IPv6
 * (4 <= n < 8: 10.0.0.|n-4|), or 2001:db8::|n| for n >= 8. */
static const struct sockaddr *addr(int n)
{
	struct sockaddr_storage *ss = &addrs[n % 8];
	char text[64];

	memset(ss, 0, sizeof(*ss));
	if (n < 4) {
		struct sockaddr_in *in = (struct sockaddr_in *)ss;
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)(1000 + n));
		snprintf(text, sizeof(text), "10.0.0.%d", n);
		ck_assert_int_eq(inet_pton(AF_INET, text, &in->sin_addr), 1);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)(2000 + n));
		if (n < 8)
			snprintf(text, sizeof(text), "::ffff:10.0.0.%d", n - 4);
		else
			snprintf(text, sizeof(text), "2001:db8::%d", n);
		ck_assert_int_eq(inet_pton(AF_INET6, text, &in6->sin6_addr), 1);
	}
	return (const struct sockaddr *)ss;
}

static struct pcsi_budget b;
static struct pcsi_budget_entry e[16];

static void setup_limits(uint32_t max, uint32_t per_peer, uint64_t conn_bytes, uint64_t peer_bytes)
{
	struct pcsi_budget_limits lim = { max, per_peer, conn_bytes, peer_bytes };

	pcsi_budget_init(&b, "test", &lim);
}

static enum pcsi_budget_verdict check(const struct sockaddr *a, struct pcsi_budget_entry **victim)
{
	const char *why;

	return pcsi_budget_check(&b, a, victim, &why);
}

START_TEST(admits_up_to_the_limit_then_refuses_busy)
{
	struct pcsi_budget_entry *v;
	int i;

	setup_limits(3, 0, 0, 0);
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(check(NULL, &v), PCSI_BUDGET_ADMIT);
		pcsi_budget_join(&b, &e[i], NULL, (uint64_t)i);
		pcsi_budget_set_state(&e[i], PCSI_BUDGET_BUSY, (uint64_t)i);
	}
	ck_assert_int_eq(check(NULL, &v), PCSI_BUDGET_REFUSE);
	ck_assert_ptr_null(v);
	pcsi_budget_leave(&b, &e[1]);
	pcsi_budget_leave(&b, &e[1]); /* harmless */
	ck_assert_int_eq(check(NULL, &v), PCSI_BUDGET_ADMIT);
	ck_assert_uint_eq(b.n, 2);
	pcsi_budget_fini(&b);
	ck_assert_uint_eq(b.n, 0);
}
END_TEST

START_TEST(handshakes_go_before_idle_ones_oldest_first)
{
	struct pcsi_budget_entry *v;

	setup_limits(4, 0, 0, 0);
	pcsi_budget_join(&b, &e[0], NULL, 10); /* idle since 50 */
	pcsi_budget_set_state(&e[0], PCSI_BUDGET_IDLE, 50);
	pcsi_budget_join(&b, &e[1], NULL, 20); /* handshake */
	pcsi_budget_join(&b, &e[2], NULL, 30); /* idle since 40 */
	pcsi_budget_set_state(&e[2], PCSI_BUDGET_IDLE, 40);
	pcsi_budget_join(&b, &e[3], NULL, 5); /* handshake, joined "earlier" */
	ck_assert_int_eq(check(NULL, &v), PCSI_BUDGET_EVICT);
	ck_assert_ptr_eq(v, &e[3]);
	pcsi_budget_leave(&b, v);
	pcsi_budget_join(&b, &e[4], NULL, 60);
	pcsi_budget_set_state(&e[4], PCSI_BUDGET_BUSY, 60);
	ck_assert_int_eq(check(NULL, &v), PCSI_BUDGET_EVICT);
	ck_assert_ptr_eq(v, &e[1]);
	pcsi_budget_leave(&b, v);
	pcsi_budget_join(&b, &e[5], NULL, 70);
	pcsi_budget_set_state(&e[5], PCSI_BUDGET_BUSY, 70);
	/* Idle ones now: the one idle longest (e[2], since 40). */
	ck_assert_int_eq(check(NULL, &v), PCSI_BUDGET_EVICT);
	ck_assert_ptr_eq(v, &e[2]);
	/* Busy and idle again: idle since then. */
	pcsi_budget_set_state(&e[2], PCSI_BUDGET_BUSY, 80);
	pcsi_budget_set_state(&e[2], PCSI_BUDGET_IDLE, 90);
	ck_assert_int_eq(check(NULL, &v), PCSI_BUDGET_EVICT);
	ck_assert_ptr_eq(v, &e[0]);
	pcsi_budget_fini(&b);
}
END_TEST

START_TEST(the_greediest_address_gives_way_first)
{
	struct pcsi_budget_entry *v;
	int i;

	setup_limits(5, 0, 0, 0);
	/* 10.0.0.1 has the oldest handshake; 10.0.0.2 has three newer ones. */
	pcsi_budget_join(&b, &e[0], addr(1), 1);
	for (i = 1; i < 4; i++)
		pcsi_budget_join(&b, &e[i], addr(2), (uint64_t)(10 + i));
	pcsi_budget_join(&b, &e[4], NULL, 0); /* no address counts as one */
	ck_assert_uint_eq(pcsi_budget_peer_conns(&e[1]), 3);
	ck_assert_uint_eq(pcsi_budget_peer_conns(&e[0]), 1);
	ck_assert_int_eq(check(addr(3), &v), PCSI_BUDGET_EVICT);
	ck_assert_ptr_eq(v, &e[1]);
	pcsi_budget_fini(&b);
}
END_TEST

START_TEST(per_peer_limit_only_touches_that_address)
{
	struct pcsi_budget_entry *v;

	setup_limits(100, 2, 0, 0);
	pcsi_budget_join(&b, &e[0], addr(1), 1);
	pcsi_budget_join(&b, &e[1], addr(2), 2);
	pcsi_budget_join(&b, &e[2], addr(2), 3);
	ck_assert_int_eq(check(addr(1), &v), PCSI_BUDGET_ADMIT);
	/* 10.0.0.2 is full: its own oldest handshake makes room, never 10.0.0.1's. */
	ck_assert_int_eq(check(addr(2), &v), PCSI_BUDGET_EVICT);
	ck_assert_ptr_eq(v, &e[1]);
	/* ::ffff:10.0.0.2 is the same peer. */
	ck_assert_int_eq(check(addr(6), &v), PCSI_BUDGET_EVICT);
	ck_assert_ptr_eq(v, &e[1]);
	pcsi_budget_set_state(&e[1], PCSI_BUDGET_BUSY, 5);
	pcsi_budget_set_state(&e[2], PCSI_BUDGET_BUSY, 5);
	ck_assert_int_eq(check(addr(2), &v), PCSI_BUDGET_REFUSE);
	/* Other addresses still get in; IPv6 ones are their own. */
	ck_assert_int_eq(check(addr(9), &v), PCSI_BUDGET_ADMIT);
	pcsi_budget_join(&b, &e[3], addr(9), 6);
	pcsi_budget_join(&b, &e[4], addr(10), 7);
	ck_assert_uint_eq(pcsi_budget_peer_conns(&e[3]), 1);
	pcsi_budget_fini(&b);
}
END_TEST

START_TEST(reservations_per_connection_and_per_address)
{
	setup_limits(10, 0, 100, 150);
	pcsi_budget_join(&b, &e[0], addr(1), 1);
	pcsi_budget_join(&b, &e[1], addr(1), 2);
	pcsi_budget_join(&b, &e[2], addr(2), 3);
	pcsi_budget_join(&b, &e[3], NULL, 4);
	ck_assert_int_eq(pcsi_budget_reserve(&b, &e[0], 60), 0);
	ck_assert_int_eq(pcsi_budget_reserve(&b, &e[0], 41), -ENOBUFS); /* connection: 101 */
	ck_assert_int_eq(pcsi_budget_reserve(&b, &e[0], 40), 0);
	ck_assert_int_eq(pcsi_budget_reserve(&b, &e[1], 51), -ENOBUFS); /* address: 151 */
	ck_assert_int_eq(pcsi_budget_reserve(&b, &e[1], 50), 0);
	ck_assert_uint_eq(pcsi_budget_peer_bytes(&e[1]), 150);
	/* Another address, and one without, have their own. */
	ck_assert_int_eq(pcsi_budget_reserve(&b, &e[2], 100), 0);
	ck_assert_int_eq(pcsi_budget_reserve(&b, &e[3], 100), 0);
	ck_assert_int_eq(pcsi_budget_reserve(&b, &e[3], 1), -ENOBUFS);
	/* Released, and what a leaving connection holds goes with it. */
	pcsi_budget_release(&e[0], 30);
	ck_assert_uint_eq(pcsi_budget_peer_bytes(&e[0]), 120);
	pcsi_budget_release(&e[0], 1000); /* no more than it holds */
	ck_assert_uint_eq(pcsi_budget_peer_bytes(&e[1]), 50);
	pcsi_budget_leave(&b, &e[1]);
	ck_assert_uint_eq(pcsi_budget_peer_bytes(&e[0]), 0);
	ck_assert_int_eq(pcsi_budget_reserve(&b, &e[0], 100), 0);
	/* After leaving, a connection keeps only its own limit. */
	pcsi_budget_leave(&b, &e[0]);
	ck_assert_int_eq(pcsi_budget_reserve(&b, &e[0], 100), 0);
	ck_assert_int_eq(pcsi_budget_reserve(&b, &e[0], 1), -ENOBUFS);
	pcsi_budget_release(&e[0], 100);
	pcsi_budget_fini(&b);
}
END_TEST

START_TEST(no_limits_mean_no_limits)
{
	setup_limits(2, 0, 0, 0);
	pcsi_budget_join(&b, &e[0], addr(1), 1);
	ck_assert_int_eq(pcsi_budget_reserve(&b, &e[0], UINT64_MAX / 2), 0);
	pcsi_budget_fini(&b);
}
END_TEST

/* Many addresses: every one is found again (the hash chains). */
START_TEST(many_addresses)
{
	static struct pcsi_budget_entry many[600];
	struct sockaddr_in in = { .sin_family = AF_INET };
	struct pcsi_budget_entry *v;
	int i;

	setup_limits(1000, 2, 0, 0);
	for (i = 0; i < 600; i++) {
		in.sin_addr.s_addr = htonl(0x0a000000u + (uint32_t)(i / 2));
		pcsi_budget_join(&b, &many[i], (struct sockaddr *)&in, (uint64_t)i);
	}
	for (i = 0; i < 300; i++) {
		in.sin_addr.s_addr = htonl(0x0a000000u + (uint32_t)i);
		ck_assert_int_eq(check((struct sockaddr *)&in, &v), PCSI_BUDGET_EVICT);
		ck_assert_ptr_eq(v, &many[2 * i]);
	}
	for (i = 0; i < 600; i += 2)
		pcsi_budget_leave(&b, &many[i]);
	ck_assert_uint_eq(b.n, 300);
	pcsi_budget_fini(&b);
}
END_TEST

static int shed_calls;
static char shed_last[64];

static void on_shed(const char *listener, const char *reason)
{
	shed_calls++;
	snprintf(shed_last, sizeof(shed_last), "%s/%s", listener, reason);
}

START_TEST(shed_tells_the_hook)
{
	setup_limits(1, 0, 0, 0);
	pcsi_budget_set_shed_hook(on_shed);
	pcsi_budget_shed(&b, "evicted", "10.0.0.1:5", "listener full");
	pcsi_budget_shed(&b, "evicted", "10.0.0.1:6", "listener full");
	pcsi_budget_set_shed_hook(NULL);
	pcsi_budget_shed(&b, "refused", "10.0.0.1:7", "listener full");
	ck_assert_int_eq(shed_calls, 2);
	ck_assert_str_eq(shed_last, "test/evicted");
	pcsi_budget_fini(&b);
}
END_TEST

static Suite *budget_suite(void)
{
	Suite *s = suite_create("budget");
	TCase *tc = tcase_create("budget");

	tcase_add_test(tc, admits_up_to_the_limit_then_refuses_busy);
	tcase_add_test(tc, handshakes_go_before_idle_ones_oldest_first);
	tcase_add_test(tc, the_greediest_address_gives_way_first);
	tcase_add_test(tc, per_peer_limit_only_touches_that_address);
	tcase_add_test(tc, reservations_per_connection_and_per_address);
	tcase_add_test(tc, no_limits_mean_no_limits);
	tcase_add_test(tc, many_addresses);
	tcase_add_test(tc, shed_tells_the_hook);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(budget_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
