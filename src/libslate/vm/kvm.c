/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The KVM probe: QEMU must really run a guest under -accel kvm (kvm.h says why). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/fs.h"
#include "util/log.h"
#include "util/time.h"
#include "vm/kvm.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int kvm_cached = -1;
static char kvm_why[256] = "not probed yet";
static const char *disk_io = "io_uring";

static const char *const qemu_paths[] = {
        "/usr/bin/qemu-system-x86_64",
        "/usr/libexec/qemu-kvm",
        "/usr/local/bin/qemu-system-x86_64",
};

/* mov al,0x10; out 0xf4,al; hlt; jmp $-1 — QEMU exits with (0x10 << 1) | 1 = 33. */
static const unsigned char boot_code[] = {0xb0, 0x10, 0xe6, 0xf4, 0xf4, 0xeb, 0xfd};
#define PROBE_EXIT_STATUS 33
/*
 * The host CPU model, required (enforce) to have what every x86-64 CPU with VT-x or AMD-V has:
 * SSE3, CMPXCHG16B, long mode, NX, SYSCALL. A nested KVM seen on CI hosts runs the boot sector
 * but offers a CPUID without SSE3, and a Linux guest then hangs right after the BIOS; enforce
 * makes QEMU exit 1 there instead.
 */
#define PROBE_CPU "host,pni=on,cx16=on,lm=on,nx=on,syscall=on,enforce=on"

static int write_boot_sector(int fd)
{
	unsigned char sector[512] = {0};

	memcpy(sector, boot_code, sizeof(boot_code));
	sector[510] = 0x55;
	sector[511] = 0xaa;
	return fs_write_all(fd, sector, sizeof(sector));
}

/* Runs QEMU on the boot sector; returns its wait status, or -errno. */
static int run_probe(const char *qemu, int img_fd, int *ret_status)
{
	int64_t start = time_mono_ms();
	int status = 0;
	pid_t pid, w;

	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);
		/* dup2() onto itself keeps close-on-exec: the memfd may already be fd 3 (it is in
		 * `slated --probe-kvm`, whose only other fds are 0-2), and QEMU then finds no
		 * /dev/fd/3, exits 1, and a working KVM was reported unusable. */
		if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0 ||
		    (img_fd == 3 ? fcntl(3, F_SETFD, 0) : dup2(img_fd, 3)) < 0)
			_exit(127);
		(void)setpgid(0, 0);
		execl(qemu, qemu, "-accel", "kvm", "-cpu", PROBE_CPU, "-machine", "pc",
		      "-nodefaults", "-display", "none", "-no-reboot", "-m", "16", "-device",
		      "isa-debug-exit,iobase=0xf4,iosize=0x04", "-drive",
		      "file=/dev/fd/3,format=raw,if=floppy,readonly=on", "-boot", "a",
		      (char *)NULL);
		_exit(127);
	}
	for (;;) {
		w = waitpid(pid, &status, WNOHANG);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR)
			return -errno;
		if (time_mono_ms() - start >= VM_KVM_PROBE_TIMEOUT_S * 1000) {
			/* A crawling KVM is no better than none. */
			(void)kill(pid, SIGKILL);
			(void)waitpid(pid, &status, 0);
			return -ETIMEDOUT;
		}
		(void)usleep(10 * 1000);
	}
	*ret_status = status;
	return 0;
}

/* qemu:///system or qemu:///session, also over an explicit unix socket (qemu+unix:///system?socket=
 * names another path to the same host's libvirtd). */
static bool uri_is_local_qemu(const char *uri)
{
	static const char *const local[] = {"qemu:///system", "qemu:///session",
	                                    "qemu+unix:///system", "qemu+unix:///session"};

	if (!uri)
		return true;
	for (size_t i = 0; i < ELEMENTSOF(local); i++) {
		size_t n = strlen(local[i]);
		if (strncmp(uri, local[i], n) == 0 && (uri[n] == '\0' || uri[n] == '?'))
			return true;
	}
	return false;
}

static int probe(const char *uri)
{
	_cleanup_close_ int fd = -1;
	const char *qemu = NULL;
	int status = 0, r;

	if (access("/dev/kvm", R_OK | W_OK) < 0) {
		(void)snprintf(kvm_why, sizeof(kvm_why), "/dev/kvm: %s", strerror(errno));
		return 0;
	}
	if (!uri_is_local_qemu(uri)) {
		(void)snprintf(kvm_why, sizeof(kvm_why), "not probed for %s; /dev/kvm is usable",
		               uri);
		return 1;
	}
	for (size_t i = 0; i < ELEMENTSOF(qemu_paths); i++)
		if (access(qemu_paths[i], X_OK) == 0) {
			qemu = qemu_paths[i];
			break;
		}
	if (!qemu) {
		(void)snprintf(kvm_why, sizeof(kvm_why), "no qemu-system-x86_64 to probe with");
		return 0;
	}
	fd = memfd_create("slate-kvm-probe", MFD_CLOEXEC);
	if (fd < 0 || write_boot_sector(fd) < 0) {
		(void)snprintf(kvm_why, sizeof(kvm_why), "cannot make the probe image: %s",
		               strerror(errno));
		return 0;
	}
	r = run_probe(qemu, fd, &status);
	if (r == -ETIMEDOUT) {
		(void)snprintf(kvm_why, sizeof(kvm_why),
		               "%s -accel kvm did not run a boot sector within %d s", qemu,
		               VM_KVM_PROBE_TIMEOUT_S);
		return 0;
	}
	if (r < 0) {
		(void)snprintf(kvm_why, sizeof(kvm_why), "cannot run %s: %s", qemu, strerror(-r));
		return 0;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == PROBE_EXIT_STATUS) {
		(void)snprintf(kvm_why, sizeof(kvm_why), "%s -accel kvm -cpu host ran a guest",
		               qemu);
		return 1;
	}
	if (WIFSIGNALED(status))
		(void)snprintf(kvm_why, sizeof(kvm_why),
		               "%s -accel kvm -cpu host died of signal %d (%s)", qemu,
		               WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		(void)snprintf(kvm_why, sizeof(kvm_why),
		               "%s -accel kvm -cpu host (with SSE3, CX16, LM, NX, SYSCALL "
		               "enforced) exited with status %d instead of running "
		               "the probe guest",
		               qemu, WEXITSTATUS(status));
	return 0;
}

int vm_kvm_usable(const char *uri)
{
	int r;

	pthread_mutex_lock(&lock);
	if (kvm_cached < 0) {
		kvm_cached = probe(uri);
		if (kvm_cached)
			log_info("accelerator: KVM (%s)", kvm_why);
		else
			log_notice("accelerator: TCG emulation, guests run much slower: KVM is not "
			           "usable (%s)",
			           kvm_why);
	}
	r = kvm_cached;
	pthread_mutex_unlock(&lock);
	return r;
}

const char *vm_kvm_reason(void)
{
	return kvm_why;
}

const char *vm_accel_name(bool kvm)
{
	return kvm ? "kvm" : "tcg";
}

const char *vm_disk_io(void)
{
	const char *io;

	pthread_mutex_lock(&lock);
	io = disk_io;
	pthread_mutex_unlock(&lock);
	return io;
}

void vm_disk_io_failed(const char *io)
{
	pthread_mutex_lock(&lock);
	if (streq(io, "io_uring") && streq(disk_io, "io_uring")) {
		disk_io = "native";
		log_notice("disk I/O: QEMU cannot use io_uring here; using io='native'");
	}
	pthread_mutex_unlock(&lock);
}

bool vm_vsock_usable(void)
{
	return access("/dev/vhost-vsock", R_OK | W_OK) == 0;
}
