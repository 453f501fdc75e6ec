/* rss.h: for unit tests that measure memory: the process's resident set
 * and whether AddressSanitizer's allocator stands in for glibc's. */
#ifndef PCSI_TEST_RSS_H
#define PCSI_TEST_RSS_H

#include <check.h>
#include <stdio.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* A KiB figure of /proc/self/status: |field| is "VmRSS:", "RssFile:" ... */
static inline long status_kib(const char *field)
{
	FILE *f = fopen("/proc/self/status", "r");
	size_t n = strlen(field);
	char line[256];
	long kib = -1;

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, n) && sscanf(line + n, "%ld", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

/* VmRSS of this process, KiB. */
static inline long rss_kib(void)
{
	return status_kib("VmRSS:");
}

#endif
