/* SPDX-License-Identifier: GPL-2.0-or-later */
/* reseed [HEX]: with HEX (host entropy), RNDADDENTROPY it and RNDRESEEDCRNG; then print 32 bytes
 * of /dev/urandom in hex. What slate-guest would do after a restore. */
#include <fcntl.h>
#include <linux/random.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	unsigned char out[32];
	int fd = open("/dev/urandom", O_RDWR);
	if (argc > 1) {
		size_t n = strlen(argv[1]) / 2;
		struct rand_pool_info *p = malloc(sizeof(*p) + n);
		p->entropy_count = (int)n * 8;
		p->buf_size = (int)n;
		for (size_t i = 0; i < n; i++)
			sscanf(argv[1] + 2 * i, "%2hhx", (unsigned char *)p->buf + i);
		if (ioctl(fd, RNDADDENTROPY, p) < 0)
			perror("RNDADDENTROPY");
		if (ioctl(fd, RNDRESEEDCRNG) < 0)
			perror("RNDRESEEDCRNG");
	}
	if (read(fd, out, sizeof(out)) != sizeof(out))
		return 1;
	for (size_t i = 0; i < sizeof(out); i++)
		printf("%02x", out[i]);
	printf("\n");
	return 0;
}
