/* Null FastCGI responder for bench/run: the floor that Apache + mod_fcgid can reach on this
 * machine, measured in the same Apache, with the same Fcgid directives as the program.
 *
 * Accepts on fd 0 (the socket mod_fcgid hands over), one request per connection (mod_fcgid
 * never sets FCGI_KEEP_CONN), reads PARAMS and STDIN to the end (an upload's body is read
 * entirely, like the program does), then answers:
 *   - the AUTHORIZER role (the shipped block's FcgidAccessChecker on upload.php): 200, no body;
 *   - POST: a small JSON body (upload, MCP);
 *   - GET: 10 KiB as an attachment (a small download), after 1.5 s if QUERY_STRING contains
 *     "lent" (used to hold a process long enough to grow mod_fcgid's pool).
 * Built by bench/run with `cc -O2`.
 *
 * Built with -DAPPELS_DE_LA_SPEC='"<state folder>"' (bench/run: repondeur-spec), a GET also
 * makes the system calls the specification asks of every download, and nothing else
 * (bench/appels-spec.h): the floor that the specification's own work puts under any program,
 * measured in the same Apache. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char body[10240];

#ifdef APPELS_DE_LA_SPEC
#include "appels-spec.h"
#endif
static unsigned char buf[65536 + 256];

static int read_all(int fd, void *p, size_t n) {
    for (size_t done = 0; done < n;) {
        ssize_t r = read(fd, (char *)p + done, n - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        done += (size_t)r;
    }
    return 0;
}

static int write_all(int fd, const void *p, size_t n) {
    for (size_t done = 0; done < n;) {
        ssize_t r = write(fd, (const char *)p + done, n - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        done += (size_t)r;
    }
    return 0;
}

static int record(int fd, int type, int id, const void *data, size_t n) {
    unsigned char h[8] = {1, (unsigned char)type, (unsigned char)(id >> 8), (unsigned char)id,
                          (unsigned char)(n >> 8), (unsigned char)n, 0, 0};
    return write_all(fd, h, 8) || (n && write_all(fd, data, n));
}

static size_t param_len(const unsigned char **p) {
    size_t n = **p;
    if (n & 0x80) {
        n = ((size_t)((*p)[0] & 0x7f) << 24) | ((size_t)(*p)[1] << 16) | ((size_t)(*p)[2] << 8) | (*p)[3];
        *p += 4;
    } else {
        *p += 1;
    }
    return n;
}

/* Looks at one PARAMS record (mod_fcgid sends them all in one). */
static void params(const unsigned char *p, const unsigned char *end, int *post, int *slow) {
    while (p < end) {
        size_t kn = param_len(&p), vn = param_len(&p);
        if (p + kn + vn > end) return;
        if (kn == 14 && !memcmp(p, "REQUEST_METHOD", 14)) *post = vn == 4 && !memcmp(p + kn, "POST", 4);
        if (kn == 12 && !memcmp(p, "QUERY_STRING", 12)) *slow = memmem(p + kn, vn, "lent", 4) != 0;
        p += kn + vn;
    }
}

static void serve(int c) {
    unsigned char h[8];
    int id = 1, post = 0, slow = 0, authorizer = 0;
    for (;;) {
        if (read_all(c, h, 8)) return;
        id = (h[2] << 8) | h[3];
        size_t n = ((size_t)h[4] << 8) | h[5];
        if (read_all(c, buf, n + h[6])) return;
        if (h[1] == 1 && n >= 2) authorizer = buf[0] == 0 && buf[1] == 2; /* BEGIN_REQUEST: role */
        if (h[1] == 4) params(buf, buf + n, &post, &slow);
        if (h[1] == 4 && n == 0 && authorizer) break; /* an authorizer gets no STDIN */
        if (h[1] == 5 && n == 0) break; /* end of STDIN: the whole body has been read */
    }
    static const unsigned char end[8] = {0, 0, 0, 0, 0, 0, 0, 0}; /* status 0, REQUEST_COMPLETE */
    if (authorizer) {
        /* mod_fcgid's access check (FcgidAccessChecker on upload.php): 200, let it through. */
        static const char allowed[] = "Status: 200 OK\r\n\r\n";
        if (record(c, 6, id, allowed, sizeof allowed - 1) || record(c, 6, id, 0, 0)) return;
        record(c, 3, id, end, 8);
        return;
    }
    if (slow) usleep(1500000);
    static const char json[] = "{\"ok\":true}";
    static const char head_get[] = "Status: 200 OK\r\nContent-Type: application/octet-stream\r\n"
                                   "Content-Disposition: attachment; filename=\"petit.bin\"\r\n"
                                   "Content-Length: 10240\r\n\r\n";
    static const char head_post[] = "Status: 200 OK\r\nContent-Type: application/json\r\n"
                                    "Content-Length: 11\r\n\r\n";
    size_t len;
    if (post) {
        len = sizeof head_post - 1;
        memcpy(buf, head_post, len);
        memcpy(buf + len, json, sizeof json - 1);
        len += sizeof json - 1;
    } else {
        len = sizeof head_get - 1;
        memcpy(buf, head_get, len);
#ifdef APPELS_DE_LA_SPEC
        if (spec_download(buf + len, sizeof body) != (long)sizeof body) return; /* no answer: a 5xx */
#else
        memcpy(buf + len, body, sizeof body);
#endif
        len += sizeof body;
    }
    if (record(c, 6, id, buf, len) || record(c, 6, id, 0, 0)) return;
    record(c, 3, id, end, 8);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    memset(body, 'x', sizeof body);
#ifdef APPELS_DE_LA_SPEC
    spec_open();
#endif
    for (;;) {
        int c = accept(0, 0, 0);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return 1;
        }
        serve(c);
        close(c);
    }
}
