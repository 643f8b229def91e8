/* SPDX-License-Identifier: GPL-2.0-or-later */
/* libvirt's QEMU save image: its header read and rewritten (vm/savefile.h). */
#include <endian.h>
#include <errno.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/error.h"
#include "util/fs.h"
#include "util/macro.h"
#include "vm/savefile.h"

static uint32_t get_u32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return le32toh(v);
}

static void put_u32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, sizeof(v));
}

void vm_save_image_done(struct vm_save_image *img)
{
	free(img->xml);
	free(img->cookie);
	img->xml = img->cookie = NULL;
}

int vm_save_parse(const uint8_t *p, size_t len, uint64_t file_size, struct vm_save_image *ret)
{
	struct vm_save_image img = {0};
	const uint8_t *data, *nul;

	if (len < VM_SAVE_HEADER_LEN || memcmp(p, VM_SAVE_MAGIC, strlen(VM_SAVE_MAGIC)) != 0)
		return SLATE_ERR_INVALID_FORMAT;
	img.version = get_u32(p + 16);
	img.data_len = get_u32(p + 20);
	img.was_running = get_u32(p + 24);
	img.compressed = get_u32(p + 28);
	img.cookie_off = get_u32(p + 32);
	if (img.version != 2 || img.compressed != 0)
		return -EOPNOTSUPP;
	if (img.data_len == 0 || img.data_len > VM_SAVE_DATA_MAX ||
	    VM_SAVE_HEADER_LEN + (uint64_t)img.data_len > file_size)
		return SLATE_ERR_INVALID_FORMAT;
	if (len < VM_SAVE_HEADER_LEN + (size_t)img.data_len)
		return -EAGAIN;
	data = p + VM_SAVE_HEADER_LEN;
	/* The XML ends at the first NUL; a cookie, when there is one, after it. */
	nul = memchr(data, '\0', img.data_len);
	if (!nul || nul == data)
		return SLATE_ERR_INVALID_FORMAT;
	if (img.cookie_off != 0) {
		const uint8_t *c;
		if (img.cookie_off <= (uint32_t)(nul - data) || img.cookie_off >= img.data_len)
			return SLATE_ERR_INVALID_FORMAT;
		c = memchr(data + img.cookie_off, '\0', img.data_len - img.cookie_off);
		if (!c)
			return SLATE_ERR_INVALID_FORMAT;
		img.cookie = strndup((const char *)data + img.cookie_off,
		                     (size_t)(c - data) - img.cookie_off);
		if (!img.cookie)
			return -ENOMEM;
	}
	img.xml = strndup((const char *)data, (size_t)(nul - data));
	if (!img.xml) {
		free(img.cookie);
		return -ENOMEM;
	}
	img.stream_off = VM_SAVE_HEADER_LEN + (uint64_t)img.data_len;
	img.size = file_size;
	*ret = img;
	return 0;
}

int vm_save_read(int fd, struct vm_save_image *ret)
{
	_cleanup_free_ uint8_t *p = NULL;
	uint8_t head[VM_SAVE_HEADER_LEN];
	struct stat st;
	size_t want;
	ssize_t n;
	int r;

	if (fstat(fd, &st) < 0)
		return -errno;
	n = pread(fd, head, sizeof(head), 0);
	if (n < 0)
		return -errno;
	r = vm_save_parse(head, (size_t)n, (uint64_t)st.st_size, ret);
	if (r != -EAGAIN)
		return r;
	want = VM_SAVE_HEADER_LEN + get_u32(head + 20);
	p = malloc(want);
	if (!p)
		return -ENOMEM;
	n = pread(fd, p, want, 0);
	if (n < 0)
		return -errno;
	r = vm_save_parse(p, (size_t)n, (uint64_t)st.st_size, ret);
	return r == -EAGAIN ? SLATE_ERR_INVALID_FORMAT : r;
}

static size_t chunk(uint64_t left)
{
	return left > (1u << 30) ? (size_t)1 << 30 : (size_t)left;
}

/* Copies [off, end) of in to out at out_off. */
static int copy_range(int in, uint64_t off, uint64_t end, int out, uint64_t out_off)
{
	loff_t i = (loff_t)off, o = (loff_t)out_off;

	while ((uint64_t)i < end) {
		ssize_t n = copy_file_range(in, &i, out, &o, chunk(end - (uint64_t)i), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO; /* the file shrank under us */
	}
	return 0;
}

int vm_save_rewrite(int src_fd, const struct vm_save_image *src, const char *xml, bool align,
                    int out_fd, bool *ret_cloned)
{
	_cleanup_free_ uint8_t *head = NULL;
	size_t xml_len = strlen(xml), cookie_len = src->cookie ? strlen(src->cookie) : 0;
	size_t used = xml_len + 1 + (src->cookie ? cookie_len + 1 : 0);
	uint64_t data_len, stream_off;
	bool cloned = false;
	int r;

	if (xml_len == 0 || used > VM_SAVE_DATA_MAX)
		return -E2BIG;
	if (align) {
		stream_off = VM_SAVE_HEADER_LEN + used + VM_SAVE_ROOM;
		stream_off = (stream_off + VM_SAVE_ALIGN - 1) / VM_SAVE_ALIGN * VM_SAVE_ALIGN;
	} else {
		stream_off = src->stream_off;
	}
	data_len = stream_off - VM_SAVE_HEADER_LEN;
	/* Never more data than vm_save_parse() takes back: an XML near VM_SAVE_DATA_MAX leaves
	 * no room for the alignment. */
	if (used > data_len || data_len > VM_SAVE_DATA_MAX)
		return -E2BIG;
	head = calloc(1, (size_t)stream_off);
	if (!head)
		return -ENOMEM;
	memcpy(head, VM_SAVE_MAGIC, strlen(VM_SAVE_MAGIC));
	put_u32(head + 16, src->version);
	put_u32(head + 20, (uint32_t)data_len);
	put_u32(head + 24, src->was_running);
	put_u32(head + 28, src->compressed);
	put_u32(head + 32, src->cookie ? (uint32_t)(xml_len + 1) : 0);
	memcpy(head + VM_SAVE_HEADER_LEN, xml, xml_len);
	if (src->cookie)
		memcpy(head + VM_SAVE_HEADER_LEN + xml_len + 1, src->cookie, cookie_len);
	/* write() goes where the fd's offset is: a reused fd would leave a hole before the
	 * header. */
	if (ftruncate(out_fd, 0) < 0 || lseek(out_fd, 0, SEEK_SET) < 0)
		return -errno;
	r = fs_write_all(out_fd, head, (size_t)stream_off);
	if (r < 0)
		return r;
	if (stream_off == src->stream_off && stream_off % VM_SAVE_ALIGN == 0) {
		/* The stream's extents shared, not copied: a restore costs no write of its own. */
		struct file_clone_range fcr = {.src_fd = src_fd,
		                               .src_offset = src->stream_off,
		                               .src_length = 0, /* to the end */
		                               .dest_offset = stream_off};
		cloned = ioctl(out_fd, FICLONERANGE, &fcr) == 0;
		/* A tail that is not a whole block cannot be cloned alone: copy it. */
		if (!cloned && errno == EINVAL && src->size % VM_SAVE_ALIGN != 0) {
			uint64_t whole = src->size / VM_SAVE_ALIGN * VM_SAVE_ALIGN;
			fcr.src_length = whole - src->stream_off;
			cloned = whole > src->stream_off &&
			         ioctl(out_fd, FICLONERANGE, &fcr) == 0 &&
			         copy_range(src_fd, whole, src->size, out_fd, whole) == 0;
		}
	}
	if (!cloned) {
		r = copy_range(src_fd, src->stream_off, src->size, out_fd, stream_off);
		if (r < 0)
			return r;
	}
	if (ret_cloned)
		*ret_cloned = cloned;
	return 0;
}
