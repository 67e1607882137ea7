/* The rtnetlink client is exercised for real, inside throwaway network
 * namespaces of a forked child, so the host's own links are never touched.
 * The child exits with the number of the first check that failed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "runtime/netlink.h"

static struct in_addr ip4(const char *s)
{
    struct in_addr a = {0};
    inet_pton(AF_INET, s, &a);
    return a;
}

static bool link_up(const char *name)
{
    cleanup_close int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
    return s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0 && (ifr.ifr_flags & IFF_UP);
}

/* A UDP datagram from the outer end reaches a socket bound in the inner
 * namespace: addresses, routes and the pair made across namespaces all worked. */
static bool udp_reaches(int inner_ns, const char *dst)
{
    int outer = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (outer < 0 || setns(inner_ns, CLONE_NEWNET) < 0)
        return false;
    cleanup_close int rx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(4242), .sin_addr = ip4(dst)};
    bool ok = rx >= 0 && bind(rx, (struct sockaddr *)&sa, sizeof sa) == 0;
    ok = setns(outer, CLONE_NEWNET) == 0 && ok;
    close(outer);
    cleanup_close int tx = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ok = ok && tx >= 0 && sendto(tx, "hi", 2, 0, (struct sockaddr *)&sa, sizeof sa) == 2;
    struct timeval tv = {.tv_sec = 2};
    setsockopt(rx, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[4];
    return ok && recv(rx, buf, sizeof buf, 0) == 2 && memcmp(buf, "hi", 2) == 0;
}

static int run_checks(void)
{
    if (unshare(CLONE_NEWNET) < 0)
        return 100;
    struct fb_nl nl;
    cleanup_error fb_error_t err = NULL;
    if (fb_nl_open(&nl, &err) < 0)
        return 1;
    if (fb_nl_link_set_up(&nl, "lo", true, &err) < 0)
        return 2;
    /* a pair with both ends here */
    if (fb_nl_veth_create(&nl, "fbt-local", "fbt-peer", -1, &err) < 0 || if_nametoindex("fbt-peer") == 0 ||
        fb_nl_link_delete(&nl, "fbt-local", &err) < 0 || if_nametoindex("fbt-peer") != 0)
        return 3;
    /* the inner namespace, kept open by fd while the child stays outside */
    int outer = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (outer < 0 || unshare(CLONE_NEWNET) < 0)
        return 5;
    int inner = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (inner < 0 || setns(outer, CLONE_NEWNET) < 0)
        return 6;
    /* a pair whose peer is made inside: it never appears out here */
    if (fb_nl_veth_create(&nl, "fbt-host", "eth0", inner, &err) < 0 || if_nametoindex("eth0") != 0 ||
        if_nametoindex("fbt-host") == 0)
        return 7;
    /* a second pair with the same name is refused */
    fb_error_t dup = NULL;
    if (fb_nl_veth_create(&nl, "fbt-host", "fbt-peer2", -1, &dup) == 0 || dup->errno_value != EEXIST)
        return 4;
    fb_error_release(&dup);
    if (fb_nl_addr_add4(&nl, "fbt-host", ip4("10.250.0.1"), 30, &err) < 0 ||
        fb_nl_link_set_up(&nl, "fbt-host", true, &err) < 0 || !link_up("fbt-host"))
        return 8;
    /* the inside is configured from inside, with a socket opened there */
    struct fb_nl in;
    if (setns(inner, CLONE_NEWNET) < 0 || fb_nl_open(&in, &err) < 0)
        return 9;
    if (fb_nl_link_set_up(&in, "lo", true, &err) < 0 ||
        fb_nl_addr_add4(&in, "eth0", ip4("10.250.0.2"), 30, &err) < 0 ||
        fb_nl_link_set_up(&in, "eth0", true, &err) < 0 ||
        fb_nl_route_add4(&in, "eth0", ip4("0.0.0.0"), 0, ip4("10.250.0.1"), &err) < 0)
        return 10;
    fb_nl_close(&in);
    if (setns(outer, CLONE_NEWNET) < 0)
        return 11;
    if (!udp_reaches(inner, "10.250.0.2"))
        return 12;
    /* deleting one end removes both; deleting again is not an error */
    if (fb_nl_link_delete(&nl, "fbt-host", &err) < 0 || if_nametoindex("fbt-host") != 0 ||
        fb_nl_link_delete(&nl, "fbt-host", &err) < 0)
        return 13;
    /* bad input is refused before the kernel sees it */
    fb_error_t bad = NULL;
    if (fb_nl_veth_create(&nl, "a-name-much-too-long-for-a-link", "x", -1, &bad) == 0)
        return 14;
    fb_error_release(&bad);
    if (fb_nl_addr_add4(&nl, "no-such-link", ip4("10.0.0.1"), 8, &bad) == 0)
        return 15;
    fb_error_release(&bad);
    fb_nl_close(&nl);
    return 0;
}

static void test_links_addresses_routes(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(run_checks());
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) == 100)
        skip(); /* no network namespaces here */
    if (WEXITSTATUS(st) != 0)
        fail_msg("netlink check %d failed", WEXITSTATUS(st));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_links_addresses_routes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
