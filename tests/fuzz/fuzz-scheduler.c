/* fuzz-scheduler.c: the scheduler extender's and pod webhook's decisions
 * (daemon/webhooks/scheduler.c) on hostile JSON, the way the API server or
 * kube-scheduler would send it, over a picture of the cluster that is
 * hostile too.
 *
 * Input: one byte choosing the endpoint (filter, prioritize, mutate), then
 * JSON {"classes":[...], "pvcs":[...], "caps":[...], "req": ...}; the three
 * lists are fed to the informers as objects of the API server, "req" (or,
 * when the rest is not such an object, the whole text) is the request body.
 *
 * Checked: every answer is valid JSON with status 200 or 400. */
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/config.h"
#include "daemon/webhooks/scheduler.h"
#include "tests/fuzz/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void feed(struct pcsi_scheduler *s, json_object *root, const char *key, const char *what)
{
	json_object *list;

	if (!json_object_object_get_ex(root, key, &list) ||
	    !json_object_is_type(list, json_type_array))
		return;
	for (size_t i = 0; i < json_object_array_length(list) && i < 64; i++)
		pcsi_scheduler_feed(s, what, json_object_array_get_idx(list, i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct pcsi_config cfg = { .driver_name = "pmem-csi.intel.com" };
	struct pcsi_scheduler s;
	json_object *root, *req;
	const char *body;
	char *text, *answer;
	int status = 0, which;

	if (size < 1)
		return 0;
	which = data[0] % 3;
	text = fuzz_strndup(data + 1, size - 1);
	pcsi_scheduler_init_fed(&s, &cfg);
	root = json_tokener_parse(text);
	body = text;
	if (root && json_object_is_type(root, json_type_object)) {
		feed(&s, root, "classes", "classes");
		feed(&s, root, "pvcs", "pvcs");
		feed(&s, root, "caps", "capacities");
		if (json_object_object_get_ex(root, "req", &req))
			body = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
	}
	answer = which == 0   ? pcsi_scheduler_filter(&s, body, &status)
		 : which == 1 ? pcsi_scheduler_prioritize(&s, body, &status)
			      : pcsi_scheduler_mutate(&s, body, &status);
	FUZZ_CHECK(answer && (status == 200 || status == 400), "an answer without a status");
	{
		json_object *a = json_tokener_parse(answer);
		FUZZ_CHECK(a != NULL, "an answer that is not JSON");
		json_object_put(a);
	}
	free(answer);
	json_object_put(root);
	pcsi_scheduler_stop(&s);
	free(text);
	return 0;
}
