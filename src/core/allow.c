#include "allow.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A host name: labels of letters, digits, '-' and '_' (1..63 each, no
 * leading or trailing '-'), at least two labels, 253 bytes at most. */
static bool valid_name(const char *s)
{
    size_t len = strlen(s), label = 0, labels = 1;
    if (len == 0 || len > 253)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '.') {
            if (label == 0 || s[i - 1] == '-')
                return false;
            label = 0;
            labels++;
            continue;
        }
        if (!(isalnum((unsigned char)c) || c == '-' || c == '_'))
            return false;
        if (c == '-' && label == 0)
            return false;
        if (++label > 63)
            return false;
    }
    return label > 0 && s[len - 1] != '-' && labels >= 2;
}

int fb_allow_parse(const char *text, struct fb_allow *out, fb_error_t *err)
{
    memset(out, 0, sizeof *out);
    size_t len = strlen(text);
    if (len == 0 || len >= FB_ALLOW_TEXT_MAX)
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "network.allow: entries must be 1..%d bytes",
                            FB_ALLOW_TEXT_MAX - 1);
    char buf[FB_ALLOW_TEXT_MAX];
    for (size_t i = 0; i <= len; i++)
        buf[i] = (char)tolower((unsigned char)text[i]);
    char *colon = strrchr(buf, ':');
    if (colon != NULL) {
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (colon[1] == '\0' || *end != '\0' || port < 1 || port > 65535 || colon[1] == '+' ||
            colon[1] == '-')
            return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "network.allow: bad port in \"%s\"", text);
        out->port = (uint16_t)port;
        *colon = '\0';
    }
    char *slash = strchr(buf, '/');
    struct in_addr ip;
    if (slash != NULL || inet_pton(AF_INET, buf, &ip) == 1) {
        unsigned prefix = 32;
        if (slash != NULL) {
            char *end;
            long p = strtol(slash + 1, &end, 10);
            if (slash[1] == '\0' || *end != '\0' || p < 0 || p > 32 || slash[1] == '+' || slash[1] == '-')
                return fb_error_set(err, FB_ERR_BAD_REQUEST, 0, "network.allow: bad prefix in \"%s\"", text);
            prefix = (unsigned)p;
            *slash = '\0';
            if (inet_pton(AF_INET, buf, &ip) != 1)
                return fb_error_set(
                    err, FB_ERR_BAD_REQUEST, 0,
                    "network.allow: \"%s\" is not an IPv4 address or CIDR (IPv6 is not supported)", text);
        }
        uint32_t mask = prefix == 0 ? 0 : 0xffffffffU << (32 - prefix);
        out->kind = FB_ALLOW_CIDR;
        out->net = ntohl(ip.s_addr) & mask;
        out->prefix = prefix;
        return 0;
    }
    const char *name = buf;
    out->kind = FB_ALLOW_NAME;
    if (strncmp(buf, "*.", 2) == 0) {
        out->kind = FB_ALLOW_WILDCARD;
        name = buf + 2;
    }
    if (!valid_name(name))
        return fb_error_set(err, FB_ERR_BAD_REQUEST, 0,
                            "network.allow: \"%s\" is not a host name, \"*.\" wildcard, IPv4 address or CIDR",
                            text);
    snprintf(out->name, sizeof out->name, "%s", name);
    return 0;
}

void fb_allow_format(const struct fb_allow *a, char *out, size_t len)
{
    char port[8] = "";
    if (a->port != 0)
        snprintf(port, sizeof port, ":%u", a->port);
    if (a->kind == FB_ALLOW_CIDR) {
        struct in_addr ip = {htonl(a->net)};
        char s[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &ip, s, sizeof s);
        if (a->prefix == 32)
            snprintf(out, len, "%s%s", s, port);
        else
            snprintf(out, len, "%s/%u%s", s, a->prefix, port);
        return;
    }
    snprintf(out, len, "%s%s%s", a->kind == FB_ALLOW_WILDCARD ? "*." : "", a->name, port);
}

bool fb_allow_matches(const struct fb_allow *a, const char *name)
{
    if (a->kind == FB_ALLOW_NAME)
        return strcmp(a->name, name) == 0;
    if (a->kind != FB_ALLOW_WILDCARD)
        return false;
    size_t n = strlen(name), s = strlen(a->name);
    return n > s + 1 && name[n - s - 1] == '.' && strcmp(name + n - s, a->name) == 0;
}

static const struct {
    uint32_t net;
    unsigned prefix;
} blocked[] = {
    {0x00000000U, 8},  {0x0a000000U, 8},  {0x64400000U, 10}, {0x7f000000U, 8}, {0xa9fe0000U, 16},
    {0xac100000U, 12}, {0xc0000000U, 24}, {0xc0a80000U, 16}, {0xe0000000U, 3},
};

bool fb_allow_blocked(const struct fb_allow *a)
{
    for (size_t i = 0; i < sizeof blocked / sizeof blocked[0]; i++) {
        /* two prefixes overlap when they agree on the shorter one's bits */
        unsigned p = a->prefix < blocked[i].prefix ? a->prefix : blocked[i].prefix;
        uint32_t mask = p == 0 ? 0 : 0xffffffffU << (32 - p);
        if ((a->net & mask) == (blocked[i].net & mask))
            return true;
    }
    return false;
}

const char *fb_allow_blocked_elements(void)
{
    return "0.0.0.0/8, 10.0.0.0/8, 100.64.0.0/10, 127.0.0.0/8, 169.254.0.0/16, 172.16.0.0/12, 192.0.0.0/24, "
           "192.168.0.0/16, 224.0.0.0/3";
}
