#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/json_util.h"
#include "common/wire.h"

struct pair {
    int a, b;
};

static int setup_pair(void **state)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    struct pair *p = malloc(sizeof *p);
    if (p == NULL)
        return -1;
    p->a = sv[0];
    p->b = sv[1];
    *state = p;
    return 0;
}

static int teardown_pair(void **state)
{
    struct pair *p = *state;
    fb_closep(&p->a);
    fb_closep(&p->b);
    free(p);
    return 0;
}

static void write_raw(int fd, uint32_t len, uint16_t type, const void *payload, size_t payload_len)
{
    struct fb_frame_header h = {.len = len, .type = type};
    assert_int_equal(write(fd, &h, sizeof h), (ssize_t)sizeof h);
    if (payload_len > 0)
        assert_int_equal(write(fd, payload, payload_len), (ssize_t)payload_len);
}

/* Nothing may be left unread on fd. */
static void assert_drained(int fd)
{
    char c;
    errno = 0;
    assert_int_equal(recv(fd, &c, 1, MSG_DONTWAIT), -1);
    assert_int_equal(errno, EAGAIN);
}

static void test_header_layout(void **state)
{
    (void)state;
    /* both ends read the same struct, but the doc promises 12 bytes */
    assert_int_equal(sizeof(struct fb_frame_header), 12);
}

static void test_json_round_trip(void **state)
{
    struct pair *p = *state;
    cleanup_json json_t *req = json_pack("{s:s, s:I, s:[s,s], s:s}", "op", "exec", "n", (json_int_t)1 << 40,
                                         "argv", "/bin/sh", "-c", "u", "caf\xc3\xa9 \"q\" \\ \n");
    assert_int_equal(fb_wire_send_json(p->a, FB_MSG_REQUEST, req), 0);
    /* the object stays the caller's */
    assert_int_equal(req->refcount, 1);

    struct fb_frame f;
    assert_int_equal(fb_wire_recv(p->b, &f), 0);
    cleanup_free char *data = f.data;
    assert_int_equal(f.type, FB_MSG_REQUEST);
    assert_int_equal(f.len, strlen(f.data));
    assert_int_equal(f.data[f.len], '\0');
    cleanup_json json_t *got = fb_wire_frame_json(&f);
    assert_non_null(got);
    assert_true(json_equal(req, got));
    assert_drained(p->b);
}

static void test_data_round_trip(void **state)
{
    struct pair *p = *state;
    unsigned char bytes[256];
    for (size_t i = 0; i < sizeof bytes; i++)
        bytes[i] = (unsigned char)i;
    assert_int_equal(fb_wire_send(p->a, FB_MSG_STDOUT, bytes, sizeof bytes), 0);
    assert_int_equal(fb_wire_send(p->a, FB_MSG_STDERR, "err", 3), 0);
    assert_int_equal(fb_wire_send(p->a, FB_MSG_END, NULL, 0), 0);

    struct fb_frame f;
    assert_int_equal(fb_wire_recv(p->b, &f), 0);
    assert_int_equal(f.type, FB_MSG_STDOUT);
    assert_int_equal(f.len, sizeof bytes);
    assert_memory_equal(f.data, bytes, sizeof bytes);
    /* raw bytes are not a control message */
    assert_null(fb_wire_frame_json(&f));
    free(f.data);

    assert_int_equal(fb_wire_recv(p->b, &f), 0);
    assert_int_equal(f.type, FB_MSG_STDERR);
    assert_int_equal(f.len, 3);
    assert_string_equal(f.data, "err");
    free(f.data);

    assert_int_equal(fb_wire_recv(p->b, &f), 0);
    assert_int_equal(f.type, FB_MSG_END);
    assert_int_equal(f.len, 0);
    assert_non_null(f.data);
    assert_string_equal(f.data, "");
    assert_null(fb_wire_frame_json(&f));
    free(f.data);
    assert_drained(p->b);
}

struct big_send {
    int fd;
    const char *buf;
    size_t len;
    int rc;
};

static void *big_sender(void *arg)
{
    struct big_send *s = arg;
    s->rc = fb_wire_send(s->fd, FB_MSG_DATA, s->buf, s->len);
    return NULL;
}

/* A full-size frame is larger than a socket buffer, so the sender must cope
 * with short writes while the reader drains concurrently. */
static void test_max_frame(void **state)
{
    struct pair *p = *state;
    cleanup_free char *buf = malloc(FB_WIRE_MAX_PAYLOAD);
    assert_non_null(buf);
    for (size_t i = 0; i < FB_WIRE_MAX_PAYLOAD; i++)
        buf[i] = (char)(i * 7 + 3);
    struct big_send s = {.fd = p->a, .buf = buf, .len = FB_WIRE_MAX_PAYLOAD, .rc = 1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, big_sender, &s), 0);
    struct fb_frame f;
    int r = fb_wire_recv(p->b, &f);
    pthread_join(t, NULL);
    assert_int_equal(r, 0);
    assert_int_equal(s.rc, 0);
    assert_int_equal(f.len, FB_WIRE_MAX_PAYLOAD);
    assert_memory_equal(f.data, buf, FB_WIRE_MAX_PAYLOAD);
    free(f.data);
}

static void test_send_oversized(void **state)
{
    struct pair *p = *state;
    cleanup_free char *buf = calloc(1, FB_WIRE_MAX_PAYLOAD + 1);
    assert_non_null(buf);
    assert_int_equal(fb_wire_send(p->a, FB_MSG_DATA, buf, FB_WIRE_MAX_PAYLOAD + 1), -EMSGSIZE);

    /* a JSON object whose serialisation does not fit */
    memset(buf, 'x', FB_WIRE_MAX_PAYLOAD);
    cleanup_json json_t *j = json_pack("{s:s}", "blob", buf);
    assert_non_null(j);
    assert_int_equal(fb_wire_send_json(p->a, FB_MSG_RESULT, j), -EMSGSIZE);
    /* refusing must not leave a half frame behind */
    assert_drained(p->b);
}

static void test_recv_oversized_header(void **state)
{
    struct pair *p = *state;
    write_raw(p->a, FB_WIRE_MAX_PAYLOAD + 1, FB_MSG_DATA, NULL, 0);
    struct fb_frame f = {.data = (char *)"stale"};
    assert_int_equal(fb_wire_recv(p->b, &f), -EPROTO);
    assert_null(f.data);

    write_raw(p->a, UINT32_MAX, FB_MSG_DATA, NULL, 0);
    assert_int_equal(fb_wire_recv(p->b, &f), -EPROTO);
    assert_null(f.data);
}

static void test_recv_type_zero(void **state)
{
    struct pair *p = *state;
    write_raw(p->a, 2, 0, "{}", 2);
    struct fb_frame f;
    assert_int_equal(fb_wire_recv(p->b, &f), -EPROTO);
    assert_null(f.data);
}

static void test_eof_before_header(void **state)
{
    struct pair *p = *state;
    fb_closep(&p->a);
    struct fb_frame f;
    assert_int_equal(fb_wire_recv(p->b, &f), -ECONNRESET);
    assert_null(f.data);
    /* and it stays that way */
    assert_int_equal(fb_wire_recv(p->b, &f), -ECONNRESET);
}

static void test_eof_after_whole_frame(void **state)
{
    struct pair *p = *state;
    assert_int_equal(fb_wire_send(p->a, FB_MSG_DATA, "x", 1), 0);
    fb_closep(&p->a);
    struct fb_frame f;
    assert_int_equal(fb_wire_recv(p->b, &f), 0);
    free(f.data);
    assert_int_equal(fb_wire_recv(p->b, &f), -ECONNRESET);
}

static void test_eof_mid_header(void **state)
{
    struct pair *p = *state;
    struct fb_frame_header h = {.len = 4, .type = FB_MSG_DATA};
    assert_int_equal(write(p->a, &h, 6), 6);
    fb_closep(&p->a);
    struct fb_frame f;
    assert_int_equal(fb_wire_recv(p->b, &f), -EPROTO);
    assert_null(f.data);
}

static void test_eof_mid_frame(void **state)
{
    struct pair *p = *state;
    write_raw(p->a, 100, FB_MSG_DATA, "0123456789", 10);
    fb_closep(&p->a);
    struct fb_frame f;
    /* the partial payload buffer must be freed (checked under ASan) */
    assert_int_equal(fb_wire_recv(p->b, &f), -EPROTO);
    assert_null(f.data);
}

static void test_eof_right_after_header(void **state)
{
    struct pair *p = *state;
    write_raw(p->a, 1, FB_MSG_DATA, NULL, 0);
    fb_closep(&p->a);
    struct fb_frame f;
    assert_int_equal(fb_wire_recv(p->b, &f), -EPROTO);
}

/* A peer that went away must be an error to report, not a SIGPIPE. */
static void test_send_to_closed_peer(void **state)
{
    struct pair *p = *state;
    fb_closep(&p->b);
    assert_int_equal(fb_wire_send(p->a, FB_MSG_STDIN, "data", 4), -EPIPE);
    cleanup_json json_t *j = json_pack("{s:b}", "ok", 1);
    assert_int_equal(fb_wire_send_json(p->a, FB_MSG_RESULT, j), -EPIPE);
}

static void test_pipe_and_bad_fd(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    cleanup_close int rd = fds[0];
    cleanup_close int wr = fds[1];
    assert_int_equal(fb_wire_send(wr, FB_MSG_DATA, "hi", 2), 0);
    struct fb_frame f;
    assert_int_equal(fb_wire_recv(rd, &f), 0);
    assert_string_equal(f.data, "hi");
    free(f.data);

    assert_int_equal(fb_wire_send(-1, FB_MSG_DATA, "hi", 2), -EBADF);
    assert_int_equal(fb_wire_recv(-1, &f), -EBADF);
    assert_null(f.data);
}

static void test_frame_json(void **state)
{
    (void)state;
    static const char *const not_objects[] = {"[1,2]", "\"s\"", "42",         "null",
                                              "{",     "",      "{\"a\":1}x", "{\"a\":1,\"a\":2}"};
    for (size_t i = 0; i < sizeof not_objects / sizeof not_objects[0]; i++) {
        struct fb_frame f = {
            .type = FB_MSG_RESULT, .len = (uint32_t)strlen(not_objects[i]), .data = (char *)not_objects[i]};
        json_t *j = fb_wire_frame_json(&f);
        if (j != NULL)
            fail_msg("payload %s taken for an object", not_objects[i]);
    }
    struct fb_frame none = {.type = FB_MSG_RESULT, .len = 0, .data = NULL};
    assert_null(fb_wire_frame_json(&none));

    /* the length bounds the parse, not the terminator */
    struct fb_frame cut = {.type = FB_MSG_RESULT, .len = 8, .data = (char *)"{\"ok\":1}garbage"};
    cleanup_json json_t *j = fb_wire_frame_json(&cut);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "ok")), 1);
}

#define PAIR_TEST(fn) cmocka_unit_test_setup_teardown(fn, setup_pair, teardown_pair)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_layout),  PAIR_TEST(test_json_round_trip),
        PAIR_TEST(test_data_round_trip),       PAIR_TEST(test_max_frame),
        PAIR_TEST(test_send_oversized),        PAIR_TEST(test_recv_oversized_header),
        PAIR_TEST(test_recv_type_zero),        PAIR_TEST(test_eof_before_header),
        PAIR_TEST(test_eof_after_whole_frame), PAIR_TEST(test_eof_mid_header),
        PAIR_TEST(test_eof_mid_frame),         PAIR_TEST(test_eof_right_after_header),
        PAIR_TEST(test_send_to_closed_peer),   cmocka_unit_test(test_pipe_and_bad_fd),
        cmocka_unit_test(test_frame_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
