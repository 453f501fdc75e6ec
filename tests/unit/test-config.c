/* test-config.c: unit tests for daemon/config.h (flag parsing and validation). */
#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config.h"
#include "daemon/version.h"

/* ---- harness -------------------------------------------------------------------- */

static struct pcsi_config cfg;
static char *out_text, *err_text;

/* Runs pcsi_config_parse() on "pmem-csi-driver" + the NULL-terminated flags,
 * capturing what it writes to |out| and |err|. */
static int parse(const char *first, ...)
{
	char *argv[32];
	size_t out_len = 0, err_len = 0;
	FILE *out, *err;
	va_list ap;
	int argc = 0, rc;
	const char *a;

	free(out_text);
	free(err_text);
	out_text = err_text = NULL;
	argv[argc++] = (char *)"pmem-csi-driver";
	va_start(ap, first);
	for (a = first; a; a = va_arg(ap, const char *)) {
		ck_assert_int_lt(argc, 31);
		argv[argc++] = (char *)a;
	}
	va_end(ap);
	argv[argc] = NULL;

	out = open_memstream(&out_text, &out_len);
	err = open_memstream(&err_text, &err_len);
	ck_assert_ptr_nonnull(out);
	ck_assert_ptr_nonnull(err);
	memset(&cfg, 0x5a, sizeof(cfg));
	rc = pcsi_config_parse(&cfg, argc, argv, out, err);
	fclose(out);
	fclose(err);
	return rc;
}

static int count_lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		if (*s == '\n')
			n++;
	return n;
}

/* The parse failed with -EINVAL, said so in exactly one line on |err| and
 * wrote nothing to |out|. */
#define ASSERT_REFUSED(...)                                                                     \
	do {                                                                                    \
		int rc_ = parse(__VA_ARGS__, NULL);                                             \
		ck_assert_int_eq(rc_, -EINVAL);                                                 \
		ck_assert_msg(count_lines(err_text) == 1, "err: \"%s\"", err_text);             \
		ck_assert_msg(err_text[strlen(err_text) - 1] == '\n', "err: \"%s\"", err_text); \
		ck_assert_str_eq(out_text, "");                                                 \
	} while (0)

#define ASSERT_OK(...)                                                        \
	do {                                                                  \
		int rc_ = parse(__VA_ARGS__, NULL);                           \
		ck_assert_msg(rc_ == 0, "rc %d, err: \"%s\"", rc_, err_text); \
		ck_assert_str_eq(err_text, "");                               \
		ck_assert_str_eq(out_text, "");                               \
	} while (0)

static void teardown(void)
{
	free(out_text);
	free(err_text);
	out_text = err_text = NULL;
}

/* ---- defaults and spellings ---------------------------------------------------------- */

START_TEST(test_defaults)
{
	ck_assert_int_eq(parse(NULL), 0);
	ck_assert_str_eq(err_text, "");
	ck_assert_str_eq(out_text, "");
	ck_assert_int_eq(cfg.mode, PCSI_MODE_CONTROLLER);
	ck_assert_str_eq(cfg.endpoint, "unix:///tmp/pmem-csi.sock");
	ck_assert_str_eq(cfg.driver_name, "pmem-csi.intel.com");
	ck_assert_str_eq(cfg.node_id, "nodeid");
	ck_assert_str_eq(cfg.device_manager, "lvm");
	ck_assert_int_eq(cfg.pmem_percentage, 100);
	ck_assert_uint_eq(cfg.max_recv_msg, 4194304);
	ck_assert_int_eq(cfg.verbosity, 2);
	ck_assert_int_eq(cfg.log_format, PCSI_LOG_TEXT);
	ck_assert_uint_eq(cfg.max_streams, 128);
	ck_assert_uint_eq(cfg.max_conns, 1024);
	ck_assert_uint_eq(cfg.shutdown_grace_s, 10);
	ck_assert(!cfg.insecure);
	ck_assert_ptr_null(cfg.registry_endpoint);
	ck_assert_ptr_null(cfg.controller_endpoint);
	ck_assert_ptr_null(cfg.ca_file);
	ck_assert_ptr_null(cfg.cert_file);
	ck_assert_ptr_null(cfg.key_file);
	ck_assert_ptr_null(cfg.client_cert_file);
	ck_assert_ptr_null(cfg.client_key_file);
	ck_assert_ptr_null(cfg.metrics_listen);
}
END_TEST

START_TEST(test_single_dash_flag)
{
	ASSERT_OK("-mode=node");
	ck_assert_int_eq(cfg.mode, PCSI_MODE_NODE);
}
END_TEST

START_TEST(test_double_dash_flag)
{
	ASSERT_OK("--mode=node");
	ck_assert_int_eq(cfg.mode, PCSI_MODE_NODE);
}
END_TEST

START_TEST(test_value_in_next_argument)
{
	ASSERT_OK("-mode", "node", "--nodeid", "worker-1");
	ck_assert_int_eq(cfg.mode, PCSI_MODE_NODE);
	ck_assert_str_eq(cfg.node_id, "worker-1");
}
END_TEST

START_TEST(test_v_equals)
{
	ASSERT_OK("-v=5");
	ck_assert_int_eq(cfg.verbosity, 5);
	ASSERT_OK("--v=0");
	ck_assert_int_eq(cfg.verbosity, 0);
	ASSERT_OK("-v=10");
	ck_assert_int_eq(cfg.verbosity, 10);
}
END_TEST

START_TEST(test_v_separate)
{
	ASSERT_OK("-v", "5");
	ck_assert_int_eq(cfg.verbosity, 5);
}
END_TEST

START_TEST(test_every_flag)
{
	ASSERT_OK("-mode=node", "-endpoint=unix:///run/csi.sock",
		  "-registryEndpoint=tcp://pmem-registry:10000", "-controllerEndpoint=tcp://:10001",
		  "-nodeid=n1", "-drivername=pmem.example.com", "-deviceManager=direct",
		  "-pmemPercentage=50", "-caFile=/c/ca.crt", "-certFile=/c/n.crt",
		  "-keyFile=/c/n.key", "-metricsListen=:9090", "-v=4", "-logFormat=json",
		  "-maxRecvMsgSize=1024", "-maxConcurrentStreams=7", "-maxConnections=9",
		  "-shutdownGrace=0");
	ck_assert_int_eq(cfg.mode, PCSI_MODE_NODE);
	ck_assert_str_eq(cfg.endpoint, "unix:///run/csi.sock");
	ck_assert_str_eq(cfg.registry_endpoint, "tcp://pmem-registry:10000");
	ck_assert_str_eq(cfg.controller_endpoint, "tcp://:10001");
	ck_assert_str_eq(cfg.node_id, "n1");
	ck_assert_str_eq(cfg.driver_name, "pmem.example.com");
	ck_assert_str_eq(cfg.device_manager, "direct");
	ck_assert_int_eq(cfg.pmem_percentage, 50);
	ck_assert_str_eq(cfg.ca_file, "/c/ca.crt");
	ck_assert_str_eq(cfg.metrics_listen, ":9090");
	ck_assert_int_eq(cfg.verbosity, 4);
	ck_assert_int_eq(cfg.log_format, PCSI_LOG_JSON);
	ck_assert_uint_eq(cfg.max_recv_msg, 1024);
	ck_assert_uint_eq(cfg.max_streams, 7);
	ck_assert_uint_eq(cfg.max_conns, 9);
	ck_assert_uint_eq(cfg.shutdown_grace_s, 0);
}
END_TEST

/* ---- refusals -------------------------------------------------------------------------- */

START_TEST(test_unknown_flag_refused)
{
	ASSERT_REFUSED("-bogus");
	ck_assert_msg(strstr(err_text, "-bogus") != NULL, "%s", err_text);
	ASSERT_REFUSED("--bogus=1");
	ck_assert_msg(strstr(err_text, "--bogus") != NULL, "%s", err_text);
	ASSERT_REFUSED("-mode=node", "-x");
}
END_TEST

START_TEST(test_missing_value_refused)
{
	ASSERT_REFUSED("-mode");
	ck_assert_msg(strstr(err_text, "-mode") != NULL, "%s", err_text);
	ASSERT_REFUSED("--endpoint");
	ASSERT_REFUSED("-v");
}
END_TEST

START_TEST(test_bad_mode_refused)
{
	ASSERT_REFUSED("-mode=server");
	ck_assert_msg(strstr(err_text, "server") != NULL, "%s", err_text);
	ASSERT_REFUSED("-mode=");
	ASSERT_REFUSED("-mode=Node");
}
END_TEST

START_TEST(test_bad_v_refused)
{
	ASSERT_REFUSED("-v=abc");
	ASSERT_REFUSED("-v=2147483648"); /* klog's level is an int32 */
	ASSERT_REFUSED("-v=");
	ASSERT_REFUSED("-v=5x");
	ASSERT_OK("-v=11");
	ck_assert_int_eq(cfg.verbosity, 11);
	ASSERT_OK("-v=-1");
	ck_assert_int_eq(cfg.verbosity, -1);
}
END_TEST

START_TEST(test_pmem_percentage_range)
{
	ASSERT_REFUSED("-pmemPercentage=-1");
	ASSERT_REFUSED("-pmemPercentage=101");
	ASSERT_OK("-pmemPercentage=0"); /* Intel's uint: no new namespace */
	ck_assert_int_eq(cfg.pmem_percentage, 0);
	ASSERT_REFUSED("-pmemPercentage=ten");
	ASSERT_OK("-pmemPercentage=1");
	ck_assert_int_eq(cfg.pmem_percentage, 1);
	ASSERT_OK("-pmemPercentage=100");
	ck_assert_int_eq(cfg.pmem_percentage, 100);
}
END_TEST

START_TEST(test_lvm_shells)
{
	ASSERT_OK("-mode=node");
	ck_assert_uint_eq(cfg.lvm_shells, 2);
	ASSERT_OK("-lvmShells=0"); /* a process per lvm command */
	ck_assert_uint_eq(cfg.lvm_shells, 0);
	ASSERT_OK("-lvmShells=4");
	ck_assert_uint_eq(cfg.lvm_shells, 4);
	ASSERT_REFUSED("-lvmShells=-1");
	ASSERT_REFUSED("-lvmShells=17");
	ASSERT_REFUSED("-lvmShells=two");
}
END_TEST

START_TEST(test_cxl_regions)
{
	ASSERT_OK("-mode=node");
	ck_assert(!cfg.cxl_auto); /* never touches CXL devices unless asked */
	ASSERT_OK("-mode=node", "-cxlRegions=auto");
	ck_assert(cfg.cxl_auto);
	ASSERT_OK("-mode=node", "-cxlRegions=off");
	ck_assert(!cfg.cxl_auto);
	ASSERT_REFUSED("-cxlRegions=yes");
	ck_assert_msg(strstr(err_text, "cxlRegions") != NULL, "%s", err_text);
	ASSERT_REFUSED("-cxlRegions=");
}
END_TEST

START_TEST(test_device_manager_values)
{
	ASSERT_REFUSED("-deviceManager=bogus");
	ck_assert_msg(strstr(err_text, "bogus") != NULL, "%s", err_text);
	ASSERT_OK("-deviceManager=direct");
	ASSERT_OK("-deviceManager=ndctl");
	ASSERT_OK("-deviceManager=lvm");
}
END_TEST

START_TEST(test_tcp_endpoint_needs_tls_or_insecure)
{
	ASSERT_REFUSED("-endpoint=tcp://:10000");
	ASSERT_REFUSED("-registryEndpoint=tcp://:10000");
	ASSERT_REFUSED("-mode=node", "-controllerEndpoint=tcp://:10001");
}
END_TEST

START_TEST(test_tcp_endpoint_with_insecure)
{
	ASSERT_OK("-endpoint=tcp://:10000", "-insecure");
	ck_assert(cfg.insecure);
	ASSERT_OK("--insecure", "-registryEndpoint=tcp://:10000");
	ck_assert(cfg.insecure);
	ASSERT_OK("-insecure=true", "-registryEndpoint=tcp://:10000");
	ck_assert(cfg.insecure);
}
END_TEST

START_TEST(test_insecure_false)
{
	ASSERT_OK("-insecure=false");
	ck_assert(!cfg.insecure);
	ASSERT_REFUSED("-insecure=false", "-endpoint=tcp://:10000");
	ASSERT_REFUSED("-insecure", "-insecure=false", "-endpoint=tcp://:10000");
	ASSERT_REFUSED("-insecure=maybe");
}
END_TEST

START_TEST(test_tcp_endpoint_with_tls)
{
	ASSERT_OK("-registryEndpoint=tcp://:10000", "-caFile=ca.crt", "-certFile=r.crt",
		  "-keyFile=r.key");
	ck_assert(!cfg.insecure);
	ck_assert_str_eq(cfg.ca_file, "ca.crt");
	ck_assert_str_eq(cfg.cert_file, "r.crt");
	ck_assert_str_eq(cfg.key_file, "r.key");
}
END_TEST

START_TEST(test_partial_tls_refused)
{
	ASSERT_REFUSED("-caFile=ca.crt");
	ASSERT_REFUSED("-caFile=ca.crt", "-certFile=r.crt");
	ASSERT_REFUSED("-certFile=r.crt", "-keyFile=r.key");
	ASSERT_REFUSED("-keyFile=r.key", "-insecure");
}
END_TEST

START_TEST(test_client_cert_defaults_to_cert)
{
	ASSERT_OK("-caFile=ca.crt", "-certFile=r.crt", "-keyFile=r.key");
	ck_assert_str_eq(cfg.client_cert_file, "r.crt");
	ck_assert_str_eq(cfg.client_key_file, "r.key");
	ASSERT_OK("-caFile=ca.crt", "-certFile=r.crt", "-keyFile=r.key", "-clientCertFile=c.crt",
		  "-clientKeyFile=c.key");
	ck_assert_str_eq(cfg.client_cert_file, "c.crt");
	ck_assert_str_eq(cfg.client_key_file, "c.key");
}
END_TEST

START_TEST(test_registry_endpoint_must_be_tcp)
{
	ASSERT_REFUSED("-registryEndpoint=unix:///tmp/r.sock");
	ASSERT_REFUSED("-controllerEndpoint=/tmp/c.sock");
	ASSERT_REFUSED("-endpoint=http://x:1");
}
END_TEST

START_TEST(test_resizer_endpoint)
{
	ASSERT_OK("-mode=node", "-resizerEndpoint=unix:///csi/resizer.sock");
	ck_assert_str_eq(cfg.resizer_endpoint, "unix:///csi/resizer.sock");
	ASSERT_REFUSED("-mode=node", "-resizerEndpoint=tcp://:10002", "-insecure");
	ASSERT_REFUSED("-mode=node", "-resizerEndpoint=/csi/resizer.sock");
	ASSERT_REFUSED("-mode=controller", "-resizerEndpoint=unix:///csi/resizer.sock");
}
END_TEST

START_TEST(test_control_characters_refused)
{
	ASSERT_REFUSED("-nodeid=a\nb");
	ASSERT_REFUSED("-drivername=a\x1b[0m");
}
END_TEST

START_TEST(test_positional_argument_refused)
{
	ASSERT_REFUSED("extra");
	ck_assert_msg(strstr(err_text, "extra") != NULL, "%s", err_text);
	ASSERT_REFUSED("-mode=node", "extra");
	ASSERT_REFUSED("extra", "-mode=node");
}
END_TEST

START_TEST(test_numeric_limits)
{
	ASSERT_REFUSED("-maxRecvMsgSize=1023");
	ASSERT_OK("-maxRecvMsgSize=1073741824");
	ASSERT_REFUSED("-maxRecvMsgSize=1073741825");
	ASSERT_REFUSED("-maxConcurrentStreams=0");
	ASSERT_REFUSED("-maxConnections=0");
	ASSERT_REFUSED("-shutdownGrace=3601");
	ASSERT_REFUSED("-logFormat=xml");
}
END_TEST

/* ---- help and version -------------------------------------------------------------------- */

START_TEST(test_help)
{
	static const char *const spellings[] = { "--help", "-help", "-h" };
	size_t i;

	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(parse(spellings[i], NULL), 1);
		ck_assert_msg(strstr(out_text, "Usage") != NULL, "%s: %s", spellings[i], out_text);
		ck_assert_msg(strstr(out_text, "-mode") != NULL, "%s", spellings[i]);
		ck_assert_str_eq(err_text, "");
	}
}
END_TEST

START_TEST(test_version)
{
	ck_assert_int_eq(parse("--version", NULL), 1);
	ck_assert_str_eq(out_text, "pmem-csi-driver " PCSI_VERSION "\n");
	ck_assert_str_eq(err_text, "");
	ck_assert_int_eq(parse("-version", NULL), 1);
	ck_assert_str_eq(out_text, "pmem-csi-driver " PCSI_VERSION "\n");
}
END_TEST

START_TEST(test_mode_and_peer_names)
{
	struct pcsi_config c = { .mode = PCSI_MODE_CONTROLLER };

	ck_assert_str_eq(pcsi_mode_name(PCSI_MODE_CONTROLLER), "controller");
	ck_assert_str_eq(pcsi_mode_name(PCSI_MODE_NODE), "node");
	ck_assert_str_eq(pcsi_config_peer_name(&c), "pmem-node-controller");
	c.mode = PCSI_MODE_NODE;
	ck_assert_str_eq(pcsi_config_peer_name(&c), "pmem-registry");
}
END_TEST

START_TEST(test_parse_twice_in_one_process)
{
	/* main() parses once, but nothing in the contract forbids a second parse
	 * (and the nofork test mode does exactly that). */
	ASSERT_REFUSED("extra", "-mode=node");
	ASSERT_OK("-mode=node");
	ck_assert_int_eq(cfg.mode, PCSI_MODE_NODE);
	ASSERT_OK(NULL);
	ck_assert_int_eq(cfg.mode, PCSI_MODE_CONTROLLER);
}
END_TEST

/* ---- Intel PMEM-CSI v1.1.0's flags ------------------------------------------------------ */

START_TEST(test_intel_node_command_line)
{
	/* deploy/kubernetes-1.25/lvm/pmem-csi.yaml, the node DaemonSet */
	ASSERT_OK("-deviceManager=lvm", "-v=3", "-logging-format=text", "-mode=node",
		  "-endpoint=unix:///csi/csi.sock", "-nodeid=worker-1",
		  "-statePath=/var/lib/pmem-csi.intel.com", "-drivername=pmem-csi.intel.com",
		  "-pmemPercentage=100", "-metricsListen=:10010");
	ck_assert_int_eq(cfg.mode, PCSI_MODE_NODE);
	ck_assert_int_eq(cfg.verbosity, 3);
	ck_assert_int_eq(cfg.log_format, PCSI_LOG_TEXT);
	ck_assert_uint_eq(cfg.n_ignored, 0);
}
END_TEST

START_TEST(test_intel_webhooks_command_line)
{
	ASSERT_OK("-v=3", "-logging-format=json", "-mode=webhooks",
		  "-drivername=pmem-csi.intel.com", "-nodeSelector={\"storage\":\"pmem\"}",
		  "-metricsListen=:10010");
	ck_assert_int_eq(cfg.mode, PCSI_MODE_WEBHOOKS);
	ck_assert_int_eq(cfg.log_format, PCSI_LOG_JSON);
	ck_assert(cfg.has_node_selector);
	ck_assert_uint_eq(cfg.n_node_selector, 1);
	ck_assert_str_eq(cfg.node_selector[0].key, "storage");
	ck_assert_str_eq(cfg.node_selector[0].value, "pmem");
	ck_assert_str_eq(pcsi_mode_name(cfg.mode), "webhooks");
}
END_TEST

START_TEST(test_intel_convert_command_line)
{
	ASSERT_OK("-v=3", "-logging-format=text", "-mode=force-convert-raw-namespaces",
		  "-nodeSelector={\"storage\":\"pmem\",\"zone\":\"a\"}", "-nodeid=worker-2");
	ck_assert_int_eq(cfg.mode, PCSI_MODE_CONVERT);
	ck_assert_uint_eq(cfg.n_node_selector, 2);
	ck_assert_str_eq(pcsi_mode_name(cfg.mode), "force-convert-raw-namespaces");
}
END_TEST

START_TEST(test_node_selector_values)
{
	ASSERT_OK("-mode=webhooks", "-nodeSelector=null");
	ck_assert(!cfg.has_node_selector);
	ASSERT_OK("-mode=webhooks", "-nodeSelector={}");
	ck_assert(cfg.has_node_selector);
	ck_assert_uint_eq(cfg.n_node_selector, 0);
	ASSERT_REFUSED("-mode=webhooks", "-nodeSelector=storage=pmem");
	ASSERT_REFUSED("-mode=webhooks", "-nodeSelector={\"storage\":1}");
	ASSERT_REFUSED("-mode=webhooks", "-nodeSelector=[\"storage\"]");
	ASSERT_REFUSED("-mode=webhooks", "-nodeSelector={\"\":\"x\"}");
	/* a flag of another mode is accepted and named for the log */
	ASSERT_OK("-mode=node", "-nodeSelector={\"storage\":\"pmem\"}");
	ck_assert_uint_eq(cfg.n_ignored, 1);
	ck_assert_str_eq(cfg.ignored[0], "-nodeSelector");
}
END_TEST

START_TEST(test_klog_flags)
{
	ASSERT_OK("-logtostderr=false", "-alsologtostderr", "-stderrthreshold=WARNING",
		  "-log_file=/var/log/pmem.log", "-log_dir=/var/log", "-log_file_max_size=10",
		  "-skip_headers", "-add_dir_header=true", "-vmodule=service=5,lvm*=4",
		  "-log_backtrace_at=service.c:42", "-skip_log_headers", "-one_output=false");
	ck_assert(!cfg.log.to_stderr);
	ck_assert(cfg.log.also_stderr);
	ck_assert_int_eq(cfg.log.stderr_threshold, 1);
	ck_assert_str_eq(cfg.log.file, "/var/log/pmem.log");
	ck_assert_str_eq(cfg.log.dir, "/var/log");
	ck_assert_uint_eq(cfg.log.file_max_mb, 10);
	ck_assert(cfg.log.skip_headers);
	ck_assert(cfg.log.add_dir_header);
	ck_assert_str_eq(cfg.log.vmodule, "service=5,lvm*=4");
	ck_assert_str_eq(cfg.log.backtrace_at, "service.c:42");
	ck_assert_uint_eq(cfg.n_ignored, 2);
	ASSERT_OK("-stderrthreshold=2");
	ck_assert_int_eq(cfg.log.stderr_threshold, 2);
	ASSERT_REFUSED("-stderrthreshold=LOUD");
	ASSERT_REFUSED("-logtostderr=maybe");
	ASSERT_REFUSED("-log_file=relative.log");
	ASSERT_REFUSED("-log_backtrace_at=nowhere");
}
END_TEST

START_TEST(test_kube_api_and_metrics_flags)
{
	ASSERT_OK("-kube-api-qps=20.5", "-kube-api-burst=40", "-metricsPath=/prom");
	ck_assert(cfg.kube_api_qps == 20.5);
	ck_assert_int_eq(cfg.kube_api_burst, 40);
	ck_assert_str_eq(cfg.metrics_path, "/prom");
	ASSERT_OK(NULL);
	ck_assert(cfg.kube_api_qps == 5);
	ck_assert_int_eq(cfg.kube_api_burst, 10);
	ck_assert_str_eq(cfg.metrics_path, "/metrics");
	ASSERT_OK("-kube-api-qps", "0");
	ck_assert(cfg.kube_api_qps == 5); /* client-go's default for 0 */
	ASSERT_REFUSED("-kube-api-qps=fast");
	ASSERT_REFUSED("-metricsPath=metrics");
}
END_TEST

START_TEST(test_scheduler_flags)
{
	ASSERT_OK("-mode=webhooks", "-insecureSchedulerListen=:8001");
	ck_assert_str_eq(cfg.insecure_scheduler_listen, ":8001");
	/* HTTPS needs the certificate flags */
	ASSERT_REFUSED("-mode=webhooks", "-schedulerListen=:8000");
	ASSERT_OK("-mode=webhooks", "-schedulerListen=:8000", "-caFile=/c/ca.pem",
		  "-certFile=/c/c.pem", "-keyFile=/c/k.pem");
	ck_assert_str_eq(cfg.scheduler_listen, ":8000");
	ASSERT_OK("-mode=node", "-schedulerListen=:8000");
	ck_assert_uint_eq(cfg.n_ignored, 1);
}
END_TEST

static Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc;

	tc = tcase_create("parse");
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_single_dash_flag);
	tcase_add_test(tc, test_double_dash_flag);
	tcase_add_test(tc, test_value_in_next_argument);
	tcase_add_test(tc, test_v_equals);
	tcase_add_test(tc, test_v_separate);
	tcase_add_test(tc, test_every_flag);
	tcase_add_test(tc, test_parse_twice_in_one_process);
	suite_add_tcase(s, tc);

	tc = tcase_create("refusals");
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, test_unknown_flag_refused);
	tcase_add_test(tc, test_missing_value_refused);
	tcase_add_test(tc, test_bad_mode_refused);
	tcase_add_test(tc, test_bad_v_refused);
	tcase_add_test(tc, test_pmem_percentage_range);
	tcase_add_test(tc, test_lvm_shells);
	tcase_add_test(tc, test_cxl_regions);
	tcase_add_test(tc, test_device_manager_values);
	tcase_add_test(tc, test_tcp_endpoint_needs_tls_or_insecure);
	tcase_add_test(tc, test_tcp_endpoint_with_insecure);
	tcase_add_test(tc, test_insecure_false);
	tcase_add_test(tc, test_tcp_endpoint_with_tls);
	tcase_add_test(tc, test_partial_tls_refused);
	tcase_add_test(tc, test_client_cert_defaults_to_cert);
	tcase_add_test(tc, test_registry_endpoint_must_be_tcp);
	tcase_add_test(tc, test_resizer_endpoint);
	tcase_add_test(tc, test_control_characters_refused);
	tcase_add_test(tc, test_positional_argument_refused);
	tcase_add_test(tc, test_numeric_limits);
	suite_add_tcase(s, tc);

	tc = tcase_create("intel");
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, test_intel_node_command_line);
	tcase_add_test(tc, test_intel_webhooks_command_line);
	tcase_add_test(tc, test_intel_convert_command_line);
	tcase_add_test(tc, test_node_selector_values);
	tcase_add_test(tc, test_klog_flags);
	tcase_add_test(tc, test_kube_api_and_metrics_flags);
	tcase_add_test(tc, test_scheduler_flags);
	suite_add_tcase(s, tc);

	tc = tcase_create("info");
	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_add_test(tc, test_help);
	tcase_add_test(tc, test_version);
	tcase_add_test(tc, test_mode_and_peer_names);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(config_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
