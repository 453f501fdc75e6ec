/* test-metrics.c: unit tests for daemon/metrics.h (the text format 0.0.4). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/metrics/metrics.h"
#include "rpc/status.h"

static struct pcsi_metrics *m;

static void setup(void)
{
	m = pcsi_metrics_new();
}

static void teardown(void)
{
	pcsi_metrics_free(m);
	m = NULL;
}

/* Renders |m| and compares with |want|. */
static void expect_render(const char *want)
{
	size_t len;
	char *got = pcsi_metrics_render(m, &len);

	ck_assert_str_eq(got, want);
	ck_assert_uint_eq(len, strlen(want));
	free(got);
}

START_TEST(test_counter_and_gauge_without_labels)
{
	struct pcsi_metric *c = pcsi_metric_new(m, PCSI_METRIC_COUNTER, "requests_total",
						"Requests served.", NULL, NULL, 0);
	struct pcsi_metric *g = pcsi_metric_new(m, PCSI_METRIC_GAUGE, "temperature_celsius",
						"Current temperature.", NULL, NULL, 0);

	pcsi_metric_add(c, NULL, 1);
	pcsi_metric_add(c, NULL, 2);
	pcsi_metric_set(g, NULL, -3.5);
	expect_render("# HELP requests_total Requests served.\n"
		      "# TYPE requests_total counter\n"
		      "requests_total 3\n"
		      "# HELP temperature_celsius Current temperature.\n"
		      "# TYPE temperature_celsius gauge\n"
		      "temperature_celsius -3.5\n");
}
END_TEST

START_TEST(test_label_values_are_escaped)
{
	static const char *const labels[] = { "path", "plain", NULL };
	struct pcsi_metric *g = pcsi_metric_new(
		m, PCSI_METRIC_GAUGE, "x", "Help with \\ and\nnewline \"q\".", labels, NULL, 0);

	pcsi_metric_set(g, (const char *[]){ "a\\b\"c\nd", "ok" }, 1);
	pcsi_metric_set(g, (const char *[]){ "", NULL }, 2);
	/* HELP escapes backslash and newline only; label values also the quote. */
	expect_render("# HELP x Help with \\\\ and\\nnewline \"q\".\n"
		      "# TYPE x gauge\n"
		      "x{path=\"a\\\\b\\\"c\\nd\",plain=\"ok\"} 1\n"
		      "x{path=\"\",plain=\"\"} 2\n");
}
END_TEST

START_TEST(test_histogram_buckets_ascending_with_inf_sum_count)
{
	static const char *const labels[] = { "method", NULL };
	/* Given out of order and with a duplicate: rendered sorted, once each. */
	static const double buckets[] = { 5, 0.5, 1, 0.1, 1 };
	struct pcsi_metric *h =
		pcsi_metric_new(m, PCSI_METRIC_HISTOGRAM, "op_seconds", "Ops.", labels, buckets, 5);
	const char *const probe[] = { "Probe" };

	pcsi_metric_observe(h, probe, 0.05);
	pcsi_metric_observe(h, probe, 0.3);
	pcsi_metric_observe(h, probe, 0.5); /* on a bound: counted in that bucket */
	pcsi_metric_observe(h, probe, 2);
	pcsi_metric_observe(h, probe, 100); /* only in +Inf */
	pcsi_metric_observe(h, probe, NAN); /* ignored */
	pcsi_metric_observe(h, (const char *[]){ "Other" }, 1);
	expect_render("# HELP op_seconds Ops.\n"
		      "# TYPE op_seconds histogram\n"
		      "op_seconds_bucket{method=\"Probe\",le=\"0.1\"} 1\n"
		      "op_seconds_bucket{method=\"Probe\",le=\"0.5\"} 3\n"
		      "op_seconds_bucket{method=\"Probe\",le=\"1\"} 3\n"
		      "op_seconds_bucket{method=\"Probe\",le=\"5\"} 4\n"
		      "op_seconds_bucket{method=\"Probe\",le=\"+Inf\"} 5\n"
		      "op_seconds_sum{method=\"Probe\"} 102.85\n"
		      "op_seconds_count{method=\"Probe\"} 5\n"
		      "op_seconds_bucket{method=\"Other\",le=\"0.1\"} 0\n"
		      "op_seconds_bucket{method=\"Other\",le=\"0.5\"} 0\n"
		      "op_seconds_bucket{method=\"Other\",le=\"1\"} 1\n"
		      "op_seconds_bucket{method=\"Other\",le=\"5\"} 1\n"
		      "op_seconds_bucket{method=\"Other\",le=\"+Inf\"} 1\n"
		      "op_seconds_sum{method=\"Other\"} 1\n"
		      "op_seconds_count{method=\"Other\"} 1\n");
}
END_TEST

START_TEST(test_histogram_without_labels)
{
	static const double buckets[] = { 1 };
	struct pcsi_metric *h =
		pcsi_metric_new(m, PCSI_METRIC_HISTOGRAM, "h", "H.", NULL, buckets, 1);

	pcsi_metric_observe(h, NULL, 0.25);
	expect_render("# HELP h H.\n"
		      "# TYPE h histogram\n"
		      "h_bucket{le=\"1\"} 1\n"
		      "h_bucket{le=\"+Inf\"} 1\n"
		      "h_sum 0.25\n"
		      "h_count 1\n");
}
END_TEST

START_TEST(test_numbers)
{
	static const struct {
		double v;
		const char *want;
	} cases[] = {
		{ 0, "0" },
		{ 1, "1" },
		{ 0.1, "0.1" },
		{ 17179869184.0, "17179869184" },	    /* 16 GiB: no exponent */
		{ 9007199254740991.0, "9007199254740991" }, /* 2^53 - 1 */
		{ 1e20, "1e+20" },
		{ 1.0 / 3, "0.3333333333333333" }, /* shortest exact form */
		{ -2.5, "-2.5" },
		{ INFINITY, "+Inf" },
		{ -INFINITY, "-Inf" },
		{ NAN, "NaN" },
	};
	struct pcsi_metric *g = pcsi_metric_new(m, PCSI_METRIC_GAUGE, "g", "G.", NULL, NULL, 0);
	char want[128];
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		pcsi_metric_set(g, NULL, cases[i].v);
		snprintf(want, sizeof(want), "# HELP g G.\n# TYPE g gauge\ng %s\n", cases[i].want);
		expect_render(want);
	}
}
END_TEST

START_TEST(test_empty_family_is_left_out_and_clear)
{
	static const char *const labels[] = { "node", NULL };
	struct pcsi_metric *a = pcsi_metric_new(m, PCSI_METRIC_GAUGE, "a", "A.", labels, NULL, 0);

	pcsi_metric_new(m, PCSI_METRIC_COUNTER, "unused_total", "U.", NULL, NULL, 0);
	expect_render("");
	pcsi_metric_set(a, (const char *[]){ "n2" }, 2);
	pcsi_metric_set(a, (const char *[]){ "n1" }, 1);
	pcsi_metric_set(a, (const char *[]){ "n2" }, 3); /* same series: updated in place */
	ck_assert_uint_eq(pcsi_metric_series(a), 2);
	expect_render("# HELP a A.\n# TYPE a gauge\na{node=\"n2\"} 3\na{node=\"n1\"} 1\n");
	pcsi_metric_clear(a);
	ck_assert_uint_eq(pcsi_metric_series(a), 0);
	expect_render("");
	pcsi_metric_set(a, (const char *[]){ "n3" }, 4);
	expect_render("# HELP a A.\n# TYPE a gauge\na{node=\"n3\"} 4\n");
}
END_TEST

START_TEST(test_invalid_utf8_and_long_values)
{
	static const char *const labels[] = { "v", NULL };
	struct pcsi_metric *g = pcsi_metric_new(m, PCSI_METRIC_GAUGE, "g", "G.", labels, NULL, 0);
	char longv[PCSI_METRICS_LABEL_MAX + 50], *out, *p;

	/* A lone continuation byte, a truncated sequence, an overlong '/', a
	 * surrogate; valid two- and three-byte characters stay. */
	pcsi_metric_set(g,
			(const char *[]){ "a\x80"
					  "b\xc3"
					  "c\xc0\xaf"
					  "d\xed\xa0\x80"
					  "e\xc3\xa9\xe2\x82\xac" },
			1);
	expect_render("# HELP g G.\n# TYPE g gauge\ng{v=\"a?b?c??d???e\xc3\xa9\xe2\x82\xac\"} 1\n");
	/* The same raw value finds the same (cleaned) series. */
	pcsi_metric_set(g,
			(const char *[]){ "a\x80"
					  "b\xc3"
					  "c\xc0\xaf"
					  "d\xed\xa0\x80"
					  "e\xc3\xa9\xe2\x82\xac" },
			2);
	ck_assert_uint_eq(pcsi_metric_series(g), 1);

	pcsi_metric_clear(g);
	memset(longv, 'x', sizeof(longv) - 1);
	longv[sizeof(longv) - 1] = '\0';
	/* A two-byte character across the limit is left out whole. */
	memcpy(longv + PCSI_METRICS_LABEL_MAX - 1, "\xc3\xa9", 2);
	pcsi_metric_set(g, (const char *[]){ longv }, 1);
	out = pcsi_metrics_render(m, NULL);
	p = strstr(out, "g{v=\"");
	ck_assert_ptr_nonnull(p);
	p += 5;
	ck_assert_int_eq((int)(strchr(p, '"') - p), PCSI_METRICS_LABEL_MAX - 1);
	free(out);
}
END_TEST

START_TEST(test_series_limit)
{
	static const char *const labels[] = { "id", NULL };
	struct pcsi_metric *c =
		pcsi_metric_new(m, PCSI_METRIC_COUNTER, "c_total", "C.", labels, NULL, 0);
	char id[32];
	int i;

	for (i = 0; i < PCSI_METRICS_MAX_SERIES + 5; i++) {
		snprintf(id, sizeof(id), "%d", i);
		pcsi_metric_add(c, (const char *[]){ id }, 1);
	}
	ck_assert_uint_eq(pcsi_metric_series(c), PCSI_METRICS_MAX_SERIES);
	ck_assert_uint_eq(pcsi_metric_dropped(c), 5);
	/* Existing series still count. */
	pcsi_metric_add(c, (const char *[]){ "0" }, 1);
	ck_assert_uint_eq(pcsi_metric_dropped(c), 5);
}
END_TEST

/* ---- the daemon's metrics ---- */

static char *daemon_render(bool simple)
{
	char *s = pcsi_metrics_render_daemon(simple, NULL);

	ck_assert_ptr_nonnull(s);
	return s;
}

static void ck_contains(const char *hay, const char *needle)
{
	if (!strstr(hay, needle))
		ck_abort_msg("missing \"%s\" in:\n%s", needle, hay);
}

START_TEST(test_daemon_metrics)
{
	/* All of it, none on NVDIMMs, all on CXL: only the CXL series. */
	struct pcsi_capacity cap[PCSI_N_MEDIA] = {
		[PCSI_MEDIUM_ANY] = { .total = 4ull << 30,
				      .managed = 3ull << 30,
				      .available = 2ull << 30,
				      .max_volume_size = 1ull << 30 },
		[PCSI_MEDIUM_CXL] = { .total = 4ull << 30,
				      .managed = 3ull << 30,
				      .available = 2ull << 30,
				      .max_volume_size = 1ull << 30 },
	};
	char *s;
	int i;

	/* Before setup: nothing happens, nothing to render. */
	pcsi_metrics_on_call_end("/csi.v1.Identity/Probe", PCSI_OK, 1000, NULL);
	ck_assert(!pcsi_metrics_enabled());
	ck_assert_ptr_null(pcsi_metrics_render_daemon(false, NULL));

	pcsi_metrics_setup("pmem-csi.intel.com", "1.2.3");
	ck_assert(pcsi_metrics_enabled());
	for (i = 0; i < 3; i++)
		pcsi_metrics_on_call_end("/csi.v1.Identity/Probe", PCSI_OK, 2000000, NULL);
	pcsi_metrics_on_call_end("/csi.v1.Identity/Nope", PCSI_UNIMPLEMENTED, 1000000, NULL);
	pcsi_metrics_on_call_end("/csi.v1.Controller/CreateVolume", PCSI_OK, 3000000000ull, NULL);
	pcsi_metrics_observe_node_call("node-1", "/csi.v1.Controller/CreateVolume",
				       PCSI_RESOURCE_EXHAUSTED, 0.2);
	pcsi_metrics_set_capacity("node-1", cap, 0.5);
	pcsi_metrics_nodes_reset();
	pcsi_metrics_node_registered("node-1", 12);
	pcsi_metrics_node_registered("node-2", 3.5);

	s = daemon_render(false);
	ck_contains(s, "# TYPE build_info gauge\nbuild_info{version=\"1.2.3\"} 1\n");
	ck_contains(s, "# TYPE csi_plugin_operations_seconds histogram\n");
	ck_contains(
		s,
		"csi_plugin_operations_seconds_bucket{driver_name=\"pmem-csi.intel.com\","
		"method_name=\"/csi.v1.Identity/Probe\",grpc_status_code=\"OK\",le=\"0.1\"} 3\n");
	ck_contains(s, "csi_plugin_operations_seconds_count{driver_name=\"pmem-csi.intel.com\","
		       "method_name=\"/csi.v1.Identity/Probe\",grpc_status_code=\"OK\"} 3\n");
	ck_contains(
		s, "csi_plugin_operations_seconds_count{driver_name=\"pmem-csi.intel.com\","
		   "method_name=\"/csi.v1.Identity/Nope\",grpc_status_code=\"UNIMPLEMENTED\"} 1\n");
	/* 3 s: not in the 2.5 s bucket, in the 5 s one. */
	ck_contains(s, "method_name=\"/csi.v1.Controller/CreateVolume\",grpc_status_code=\"OK\","
		       "le=\"2.5\"} 0\n");
	ck_contains(s, "method_name=\"/csi.v1.Controller/CreateVolume\",grpc_status_code=\"OK\","
		       "le=\"5\"} 1\n");
	ck_contains(
		s,
		"pmem_csi_controller_operations_seconds_count{driver_name=\"pmem-csi.intel.com\","
		"node=\"node-1\",method_name=\"/csi.v1.Controller/CreateVolume\","
		"grpc_status_code=\"RESOURCE_EXHAUSTED\"} 1\n");
	ck_contains(s, "pmem_amount_total{node=\"node-1\",driver_name=\"pmem-csi.intel.com\"} "
		       "4294967296\n");
	ck_contains(s, "pmem_amount_managed{node=\"node-1\",driver_name=\"pmem-csi.intel.com\"} "
		       "3221225472\n");
	ck_contains(s, "pmem_amount_available{node=\"node-1\",driver_name=\"pmem-csi.intel.com\"} "
		       "2147483648\n");
	ck_contains(
		s,
		"pmem_amount_max_volume_size{node=\"node-1\",driver_name=\"pmem-csi.intel.com\"} "
		"1073741824\n");
	ck_contains(s,
		    "pmem_amount_age_seconds{node=\"node-1\",driver_name=\"pmem-csi.intel.com\"} "
		    "0.5\n");
	ck_contains(
		s,
		"pmem_medium_amount_available{node=\"node-1\",driver_name=\"pmem-csi.intel.com\","
		"medium=\"cxl\"} 2147483648\n");
	ck_contains(s, "pmem_medium_amount_max_volume_size{node=\"node-1\","
		       "driver_name=\"pmem-csi.intel.com\",medium=\"cxl\"} 1073741824\n");
	ck_assert_ptr_null(strstr(s, "medium=\"nvdimm\""));
	ck_contains(s, "pmem_nodes 2\n");
	ck_contains(s, "pmem_node_registration_age_seconds{node=\"node-1\"} 12\n");
	ck_contains(s, "pmem_node_registration_age_seconds{node=\"node-2\"} 3.5\n");
	ck_contains(s, "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total ");
	ck_contains(s, "\nprocess_resident_memory_bytes ");
	ck_contains(s, "\nprocess_open_fds ");
	ck_contains(s, "\nprocess_max_fds ");
	ck_contains(s, "\nprocess_start_time_seconds ");
	free(s);

	/* A node that went away is gone after the next reset. */
	pcsi_metrics_nodes_reset();
	pcsi_metrics_node_registered("node-2", 4);
	s = daemon_render(false);
	ck_contains(s, "pmem_nodes 1\n");
	ck_assert_ptr_null(strstr(s, "node=\"node-1\"} 12"));
	free(s);

	s = daemon_render(true);
	ck_assert_str_eq(s,
			 "# HELP build_info A metric with a constant '1' value labeled by version "
			 "from which pmem-csi was built.\n"
			 "# TYPE build_info gauge\n"
			 "build_info{version=\"1.2.3\"} 1\n");
	free(s);

	pcsi_metrics_cleanup();
	ck_assert(!pcsi_metrics_enabled());
	pcsi_metrics_observe_node_call("n", "/x", PCSI_OK, 1); /* a no-op now */
}
END_TEST

START_TEST(test_process_metrics_are_plausible)
{
	char *s, *p;
	double v;

	pcsi_metrics_setup("d", "v");
	s = daemon_render(false);
	p = strstr(s, "\nprocess_open_fds ");
	ck_assert_ptr_nonnull(p);
	v = strtod(p + strlen("\nprocess_open_fds "), NULL);
	ck_assert(v >= 3 && v < 1000);
	p = strstr(s, "\nprocess_resident_memory_bytes ");
	ck_assert_ptr_nonnull(p);
	v = strtod(p + strlen("\nprocess_resident_memory_bytes "), NULL);
	ck_assert(v > 100000);
	p = strstr(s, "\nprocess_start_time_seconds ");
	ck_assert_ptr_nonnull(p);
	v = strtod(p + strlen("\nprocess_start_time_seconds "), NULL);
	ck_assert(v > 1.5e9 && v <= (double)time(NULL) + 1);
	free(s);
	pcsi_metrics_cleanup();
}
END_TEST

static Suite *metrics_suite(void)
{
	Suite *s = suite_create("metrics");
	TCase *tc = tcase_create("text-format");
	TCase *td = tcase_create("daemon");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_counter_and_gauge_without_labels);
	tcase_add_test(tc, test_label_values_are_escaped);
	tcase_add_test(tc, test_histogram_buckets_ascending_with_inf_sum_count);
	tcase_add_test(tc, test_histogram_without_labels);
	tcase_add_test(tc, test_numbers);
	tcase_add_test(tc, test_empty_family_is_left_out_and_clear);
	tcase_add_test(tc, test_invalid_utf8_and_long_values);
	tcase_add_test(tc, test_series_limit);
	suite_add_tcase(s, tc);
	tcase_add_test(td, test_daemon_metrics);
	tcase_add_test(td, test_process_metrics_are_plausible);
	suite_add_tcase(s, td);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(metrics_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
