/* test-kata.c: unit tests for daemon/node/kata.h: the image's layout (the
 * pfn superblock and its checksum, the MBR) against values computed
 * elsewhere, and the allocation search on a small tmpfs (the test runs as
 * root, as the suite does). Loop devices, mkfs and the mounts are the guest
 * test's (tests/vm/test_kata.py). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "daemon/node/kata.h"

#define MiB (1ull << 20)

static uint64_t le(const uint8_t *p, int bytes)
{
	uint64_t v = 0;

	while (bytes--)
		v = v << 8 | p[bytes];
	return v;
}

/* Vectors from a 10-line Python fletcher64 (struct.iter_unpack('<I'), 32-bit
 * low sum, 64-bit high sum of which the low 32 bits are kept), not from
 * this code. */
START_TEST(fletcher64_vectors)
{
	uint8_t buf[4096];
	size_t i;

	for (i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 7 + 3);
	ck_assert_uint_eq(pcsi_kata_fletcher64(buf, sizeof(buf)), 0x1b235e00fe020400ull);
	/* All ones: the low sum wraps around 32 bits every step. */
	memset(buf, 0xff, sizeof(buf));
	ck_assert_uint_eq(pcsi_kata_fletcher64(buf, sizeof(buf)), 0xfff7fe00fffffc00ull);
	memset(buf, 0, sizeof(buf));
	ck_assert_uint_eq(pcsi_kata_fletcher64(buf, sizeof(buf)), 0);
	/* One word: lo = hi = the word. */
	buf[0] = 0x78, buf[1] = 0x56, buf[2] = 0x34, buf[3] = 0x12;
	ck_assert_uint_eq(pcsi_kata_fletcher64(buf, 4), 0x1234567812345678ull);
}
END_TEST

START_TEST(pfn_superblock)
{
	uint8_t sb[PCSI_KATA_PFN_SIZE], copy[PCSI_KATA_PFN_SIZE];
	size_t i;

	memset(sb, 0xa5, sizeof(sb));
	pcsi_kata_pfn_sb(sb);
	ck_assert(!memcmp(sb, "NVDIMM_PFN_INFO\0", 16));
	for (i = 16; i < 48; i++) /* uuid, parent_uuid: zero, as the image's NVDIMM has none */
		ck_assert_uint_eq(sb[i], 0);
	ck_assert_uint_eq(le(sb + 48, 4), 0);	    /* flags */
	ck_assert_uint_eq(le(sb + 52, 2), 0);	    /* version_major */
	ck_assert_uint_eq(le(sb + 54, 2), 2);	    /* version_minor */
	ck_assert_uint_eq(le(sb + 56, 8), 2 * MiB); /* dataoff */
	ck_assert_uint_eq(le(sb + 64, 8), 0);	    /* npfns */
	ck_assert_uint_eq(le(sb + 72, 4), 1);	    /* mode: PFN_MODE_RAM */
	ck_assert_uint_eq(le(sb + 76, 4), 0);	    /* start_pad */
	ck_assert_uint_eq(le(sb + 80, 4), 0);	    /* end_trunc */
	ck_assert_uint_eq(le(sb + 84, 4), 2 * MiB); /* align */
	for (i = 88; i < 4088; i++)
		ck_assert_uint_eq(sb[i], 0);
	/* The whole block's checksum, from the Python fletcher64 over these
	 * fields with the checksum zero. */
	ck_assert_uint_eq(le(sb + 4088, 8), 0x685b032be3943830ull);
	/* And as the kernel verifies it (nd_pfn_validate): zero the field,
	 * checksum the block, compare. */
	memcpy(copy, sb, sizeof(copy));
	memset(copy + 4088, 0, 8);
	ck_assert_uint_eq(pcsi_kata_fletcher64(copy, sizeof(copy)), le(sb + 4088, 8));
}
END_TEST

/* Partition entries parted 3.5 wrote (`parted --script --align none FILE --
 * mklabel msdos mkpart primary ext4 2097152B SIZE-1B`, bytes 446..461), for
 * files of these sizes. */
START_TEST(mbr_matches_parted)
{
	static const struct {
		uint64_t size;
		const char *entry;
	} parted[] = {
		{ 8388608ull, "000001208303207f0010000000300000" },
		{ 33554432ull, "00000120830360ff0010000000f00000" },
		{ 94371840ull, "000001208303e0ff0010000000c00200" },
		{ 1073741824ull, "000001208303e0ff0010000000f01f00" },
		{ 107374182400ull, "000001208303e0ff0010000000f07f0c" },
		{ 1099511627776ull, "000001208303e0ff0010000000f0ff7f" },
	};
	uint8_t mbr[512];
	char hex[33];
	size_t i, k;

	for (i = 0; i < PCSI_ARRAY_SIZE(parted); i++) {
		memset(mbr, 0x5a, sizeof(mbr));
		ck_assert_int_eq(pcsi_kata_mbr(mbr, parted[i].size, 0x12345678), 0);
		for (k = 0; k < 16; k++)
			snprintf(hex + 2 * k, 3, "%02x", mbr[446 + k]);
		ck_assert_msg(!strcmp(hex, parted[i].entry), "size %llu: %s, parted %s",
			      (unsigned long long)parted[i].size, hex, parted[i].entry);
		ck_assert_uint_eq(le(mbr + 440, 4), 0x12345678); /* disk id */
		ck_assert_uint_eq(mbr[510], 0x55);
		ck_assert_uint_eq(mbr[511], 0xaa);
		for (k = 0; k < 440; k++) /* no boot code */
			ck_assert_uint_eq(mbr[k], 0);
		for (k = 462; k < 510; k++) /* entries 2..4 empty */
			ck_assert_uint_eq(mbr[k], 0);
		/* start + count == the file's sectors: the partition ends at
		 * the file's last byte. */
		ck_assert_uint_eq(le(mbr + 454, 4) + le(mbr + 458, 4), parted[i].size / 512);
	}
	/* 2 TiB, the most an msdos partition can end at. */
	ck_assert_int_eq(pcsi_kata_mbr(mbr, PCSI_KATA_MAX_IMAGE, 0), 0);
	ck_assert_uint_eq(le(mbr + 458, 4), 0xffffffffull - 4095);
	ck_assert_int_eq(pcsi_kata_mbr(mbr, PCSI_KATA_MAX_IMAGE + 2 * MiB, 0), -EINVAL);
	ck_assert_int_eq(pcsi_kata_mbr(mbr, 2 * MiB, 0), -EINVAL); /* no room for a filesystem */
	ck_assert_int_eq(pcsi_kata_mbr(mbr, 3 * MiB, 0), -EINVAL); /* not 2 MiB aligned */
}
END_TEST

static char dir[] = "/tmp/pcsi-test-kata-XXXXXX";

static void mount_tmpfs(const char *size)
{
	char opts[64];

	ck_assert_msg(geteuid() == 0, "the allocation test mounts a tmpfs: run as root");
	snprintf(opts, sizeof(opts), "size=%s", size);
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(mount("pcsi-kata-test", dir, "tmpfs", 0, opts), 0);
}

static void unmount_tmpfs(void)
{
	ck_assert_int_eq(umount2(dir, 0), 0);
	ck_assert_int_eq(rmdir(dir), 0);
	memcpy(dir + strlen(dir) - 6, "XXXXXX", 6);
}

/* As large as the filesystem allows, a multiple of 2 MiB, allocated to the
 * last block; then the filesystem is full: a second image finds no room. */
START_TEST(allocate_fills_the_filesystem)
{
	char path[64], path2[64];
	struct statfs before, after;
	struct stat st;
	uint64_t size = 0, size2 = 0;
	int fd, fd2;

	mount_tmpfs("37m"); /* 9472 pages: not a multiple of 2 MiB */
	snprintf(path, sizeof(path), "%s/img", dir);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstatfs(fd, &before), 0);
	ck_assert_int_eq(pcsi_kata_allocate(fd, &size), 0);
	ck_assert_uint_eq(size % (2 * MiB), 0);
	ck_assert_uint_le(size, (uint64_t)before.f_bfree * before.f_bsize);
	/* Intel's search finds the largest such size within 64 blocks. */
	ck_assert_uint_gt(size + 2 * MiB + 64 * (uint64_t)before.f_bsize,
			  (uint64_t)before.f_bfree * before.f_bsize);
	ck_assert_uint_eq(size, 36 * MiB);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_uint_eq((uint64_t)st.st_size, size);
	/* No holes: every block allocated (fallocated blocks read as zeros, so
	 * SEEK_HOLE may call them holes; st_blocks counts them). */
	ck_assert_uint_ge((uint64_t)st.st_blocks * 512, size);
	ck_assert_int_eq(fstatfs(fd, &after), 0);
	ck_assert_uint_lt((uint64_t)after.f_bfree * after.f_bsize, 2 * MiB);

	snprintf(path2, sizeof(path2), "%s/img2", dir);
	fd2 = open(path2, O_RDWR | O_CREAT | O_EXCL, 0644);
	ck_assert_int_ge(fd2, 0);
	ck_assert_int_eq(pcsi_kata_allocate(fd2, &size2), -ENOSPC);
	close(fd2);

	/* The header: MBR and pfn superblock, read back where a guest and
	 * parted look. */
	{
		uint8_t mbr[512], sb[4096], want[4096];

		ck_assert_int_eq(pcsi_kata_write_header(fd, size, 0xcafe0001), 0);
		ck_assert_int_eq(pread(fd, mbr, sizeof(mbr), 0), (ssize_t)sizeof(mbr));
		ck_assert_int_eq(pread(fd, sb, sizeof(sb), 4096), (ssize_t)sizeof(sb));
		pcsi_kata_pfn_sb(want);
		ck_assert(!memcmp(sb, want, sizeof(sb)));
		ck_assert_uint_eq(mbr[450], 0x83);
		ck_assert_uint_eq(le(mbr + 454, 4), 4096);
		ck_assert_uint_eq(le(mbr + 458, 4), size / 512 - 4096);
		ck_assert_uint_eq(le(mbr + 440, 4), 0xcafe0001);
		ck_assert_int_eq(fstat(fd, &st), 0);
		ck_assert_uint_eq((uint64_t)st.st_size, size); /* the header does not grow it */
	}
	close(fd);
	unlink(path);
	unlink(path2);
	unmount_tmpfs();
}
END_TEST

/* A filesystem with less than 2 MiB free has no room for an image. */
START_TEST(allocate_too_small)
{
	char path[64];
	uint64_t size = 0;
	int fd;

	mount_tmpfs("1m");
	snprintf(path, sizeof(path), "%s/img", dir);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pcsi_kata_allocate(fd, &size), -ENOSPC);
	close(fd);
	unlink(path);
	unmount_tmpfs();
}
END_TEST

static Suite *kata_suite(void)
{
	Suite *s = suite_create("kata");
	TCase *tl = tcase_create("layout");
	TCase *ta = tcase_create("allocation");

	tcase_add_test(tl, fletcher64_vectors);
	tcase_add_test(tl, pfn_superblock);
	tcase_add_test(tl, mbr_matches_parted);
	suite_add_tcase(s, tl);
	tcase_add_test(ta, allocate_fills_the_filesystem);
	tcase_add_test(ta, allocate_too_small);
	suite_add_tcase(s, ta);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(kata_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
