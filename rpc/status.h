/* status.h: gRPC status codes and the one errno-to-status table.
 *
 * Everything below the service layer reports -errno; services turn it into a
 * status with pcsi_status_from_errno() (or pick a status explicitly where the
 * CSI spec's per-RPC error tables demand one). */
#ifndef PCSI_STATUS_H
#define PCSI_STATUS_H

enum pcsi_status {
	PCSI_OK = 0,
	PCSI_CANCELLED = 1,
	PCSI_UNKNOWN = 2,
	PCSI_INVALID_ARGUMENT = 3,
	PCSI_DEADLINE_EXCEEDED = 4,
	PCSI_NOT_FOUND = 5,
	PCSI_ALREADY_EXISTS = 6,
	PCSI_PERMISSION_DENIED = 7,
	PCSI_RESOURCE_EXHAUSTED = 8,
	PCSI_FAILED_PRECONDITION = 9,
	PCSI_ABORTED = 10,
	PCSI_OUT_OF_RANGE = 11,
	PCSI_UNIMPLEMENTED = 12,
	PCSI_INTERNAL = 13,
	PCSI_UNAVAILABLE = 14,
	PCSI_DATA_LOSS = 15,
	PCSI_UNAUTHENTICATED = 16,
};

#define PCSI_STATUS_MAX PCSI_UNAUTHENTICATED

/* "OK", "CANCELLED", ...; "UNKNOWN" for codes outside 0..16. */
const char *pcsi_status_name(int code);

/* Maps -errno (or errno) to a status; 0 maps to OK. */
enum pcsi_status pcsi_status_from_errno(int err);

/* Maps an HTTP :status of a non-gRPC reply to a status (gRPC HTTP/2 mapping). */
enum pcsi_status pcsi_status_from_http(int http_status);

#endif
