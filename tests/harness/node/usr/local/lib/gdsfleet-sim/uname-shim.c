/*
 * TEST STAND-IN (gdsfleet test harness): "the kernel the simulated node booted".
 *
 * Simulated nodes are containers that share the host's kernel, so uname(2) always names the
 * host kernel. gdsfleet-sim-init decides at each simulated boot which kernel GRUB would have
 * booted; when that is not the host kernel it writes the release to BOOTED_KERNEL. This library,
 * preloaded into every process of the node image (/etc/ld.so.preload, written by
 * tests/harness/build_node_image.sh), makes uname() report that release, so that `uname -r`,
 * Python's os.uname()/platform.uname(), Ansible's facts and the stand-in modprobe and dkms all
 * agree on the booted kernel. Without the file (every test that does not boot another kernel)
 * uname() is untouched.
 *
 * The file is bounded and validated: at most 64 bytes, a kernel release's characters only
 * ([A-Za-z0-9._+~-], starting with a letter or digit), one optional trailing newline; anything
 * else leaves the real values in place. Only libc's uname() wrapper is replaced (a program
 * that makes the system call itself still sees the host kernel).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#ifndef BOOTED_KERNEL /* a test build may point it elsewhere (tests/unit/test_uname_shim.py) */
#define BOOTED_KERNEL "/run/gdsfleet-sim/booted-kernel"
#endif
#define MAX_RELEASE 64

static int release_char(char c, int first) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return 1;
    return !first && (c == '.' || c == '_' || c == '+' || c == '~' || c == '-');
}

int uname(struct utsname *buf) {
    if (syscall(SYS_uname, buf) != 0)
        return -1;
    int saved = errno;
    char text[MAX_RELEASE + 2];
    int fd = open(BOOTED_KERNEL, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        errno = saved;
        return 0;
    }
    ssize_t n = read(fd, text, sizeof text);
    close(fd);
    errno = saved;
    if (n > 0 && text[n - 1] == '\n')
        n--;
    if (n <= 0 || n > MAX_RELEASE || (size_t)n >= sizeof buf->release)
        return 0;
    for (ssize_t i = 0; i < n; i++)
        if (!release_char(text[i], i == 0))
            return 0;
    memcpy(buf->release, text, (size_t)n);
    buf->release[n] = '\0';
    return 0;
}
