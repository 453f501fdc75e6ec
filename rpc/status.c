/* status.c: status names and mappings. See status.h. */
#include "rpc/status.h"

#include <errno.h>

#include "daemon/core/util.h"

static const char *const names[] = {
	"OK",
	"CANCELLED",
	"UNKNOWN",
	"INVALID_ARGUMENT",
	"DEADLINE_EXCEEDED",
	"NOT_FOUND",
	"ALREADY_EXISTS",
	"PERMISSION_DENIED",
	"RESOURCE_EXHAUSTED",
	"FAILED_PRECONDITION",
	"ABORTED",
	"OUT_OF_RANGE",
	"UNIMPLEMENTED",
	"INTERNAL",
	"UNAVAILABLE",
	"DATA_LOSS",
	"UNAUTHENTICATED",
};

const char *pcsi_status_name(int code)
{
	if (code < 0 || code > PCSI_STATUS_MAX)
		return "UNKNOWN";
	return names[code];
}

enum pcsi_status pcsi_status_from_errno(int err)
{
	if (err < 0)
		err = -err;
	switch (err) {
	case 0:
		return PCSI_OK;
	case EINVAL:
	case ENAMETOOLONG:
		return PCSI_INVALID_ARGUMENT;
	case ENOENT:
	case ENODEV:
		return PCSI_NOT_FOUND;
	case EEXIST:
		return PCSI_ALREADY_EXISTS;
	case ENOSPC:
	case EMSGSIZE:
		return PCSI_RESOURCE_EXHAUSTED;
	case EALREADY:
		return PCSI_ABORTED;
	case EBUSY:
	case EHWPOISON: /* a volume with media errors (backends/badblocks.h) */
		return PCSI_FAILED_PRECONDITION;
	case ERANGE:
		return PCSI_OUT_OF_RANGE;
	case ETIMEDOUT:
		return PCSI_DEADLINE_EXCEEDED;
	case ECANCELED:
		return PCSI_CANCELLED;
	case EOPNOTSUPP:
		return PCSI_UNIMPLEMENTED;
	case EACCES:
	case EPERM:
		return PCSI_PERMISSION_DENIED;
	case ECONNREFUSED:
	case ECONNRESET:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case EAGAIN:
	case EPIPE:
	case ENOTCONN:
		return PCSI_UNAVAILABLE;
	default:
		return PCSI_INTERNAL;
	}
}

enum pcsi_status pcsi_status_from_http(int http_status)
{
	switch (http_status) {
	case 400:
		return PCSI_INTERNAL;
	case 401:
		return PCSI_UNAUTHENTICATED;
	case 403:
		return PCSI_PERMISSION_DENIED;
	case 404:
		return PCSI_UNIMPLEMENTED;
	case 429:
	case 502:
	case 503:
	case 504:
		return PCSI_UNAVAILABLE;
	default:
		return PCSI_UNKNOWN;
	}
}
