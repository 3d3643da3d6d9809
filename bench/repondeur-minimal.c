/* Leanest FastCGI responder for bench/run: the least a responder can do under mod_fcgid, as a
 * second floor next to bench/repondeur-nul.c (which parses PARAMS, reads record by record and
 * writes each record with its own write).
 *
 * Accepts on fd 0 (the socket mod_fcgid hands over), reads whatever arrives into one buffer and
 * walks the records in it until the empty STDIN record (mod_fcgid usually sends BEGIN_REQUEST,
 * PARAMS and the empty STDIN in one write: one read), then answers with ONE write of a response
 * built once at start-up: an FCGI_STDOUT record holding "Status: 200 OK", Content-Type,
 * "Content-Length: 10240" and the 10 KiB body, the empty FCGI_STDOUT record, FCGI_END_REQUEST;
 * then closes. No parameter is looked at, nothing is copied, no other system call: accept, read,
 * write, close.
 *
 * One exception, to grow mod_fcgid's pool before a measurement like the other responders: a
 * request that carries a body (a non-empty STDIN record; bench/run sends a 1-byte POST, which
 * the shipped block's `LimitRequestBody 1` lets through) is answered after 1.5 s. A GET has no
 * body: this costs one comparison on a record header that is read anyway.
 *
 * Built with -DAPPELS_DE_LA_SPEC='"<state folder>"' (bench/run: repondeur-minimal-spec), a GET
 * also makes the system calls the specification asks of every download (bench/appels-spec.h),
 * reading petit.bin into the body of the response built at start-up, whose headers are then the
 * program's own (SPEC_HEAD): the least any program that keeps the contract can do, as a floor
 * beside the minimal responder.
 *
 * It serves GET (and this POST) only: the AUTHORIZER role (FcgidAccessChecker, on upload.php in
 * the shipped block) sends no STDIN record and is not answered. Built by bench/run with
 * `cc -O2`. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef APPELS_DE_LA_SPEC
#include "appels-spec.h"
#define HEAD SPEC_HEAD
#else
#define HEAD "Status: 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 10240\r\n\r\n"
#endif
#define BODY 10240
#define STDOUT_LEN (sizeof HEAD - 1 + BODY)

/* STDOUT header + content, empty STDOUT, END_REQUEST header + body. */
static unsigned char response[8 + STDOUT_LEN + 8 + 16];
/* The largest record: 8 + 65535 + 255 bytes. */
static unsigned char in[65800];
static int response_id = 1;

static void header(unsigned char *h, int type, size_t len) {
    h[0] = 1;
    h[1] = (unsigned char)type;
    h[2] = 0;
    h[3] = 1; /* request id, patched if mod_fcgid ever uses another one */
    h[4] = (unsigned char)(len >> 8);
    h[5] = (unsigned char)len;
    h[6] = h[7] = 0;
}

static void set_id(int id) {
    static const size_t at[] = {0, 8 + STDOUT_LEN, 8 + STDOUT_LEN + 8};
    for (int i = 0; i < 3; i++) {
        response[at[i] + 2] = (unsigned char)(id >> 8);
        response[at[i] + 3] = (unsigned char)id;
    }
    response_id = id;
}

static void serve(int c) {
    size_t have = 0, pos = 0;
    int id = 1, body = 0;
    for (;;) {
        while (have - pos >= 8) {
            const unsigned char *h = in + pos;
            size_t n = 8 + (((size_t)h[4] << 8) | h[5]) + h[6];
            if (have - pos < n) break;
            if (h[1] == 1) id = (h[2] << 8) | h[3]; /* BEGIN_REQUEST */
            if (h[1] == 5) {                        /* STDIN */
                if (n == 8u + h[6]) goto answer;    /* empty: the request is complete */
                body = 1;
            }
            pos += n;
        }
        if (pos) { /* keep only a record cut by the end of the last read */
            memmove(in, in + pos, have - pos);
            have -= pos;
            pos = 0;
        }
        ssize_t r = read(c, in + have, sizeof in - have);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return;
        have += (size_t)r;
    }
answer:
    if (body) usleep(1500000);
#ifdef APPELS_DE_LA_SPEC
    else if (spec_download(response + 8 + sizeof HEAD - 1, BODY) != BODY) return; /* no answer: a 5xx */
#endif
    if (id != response_id) set_id(id);
    for (size_t done = 0; done < sizeof response;) {
        ssize_t w = write(c, response + done, sizeof response - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        done += (size_t)w;
    }
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    unsigned char *p = response;
    header(p, 6, STDOUT_LEN);
    memcpy(p + 8, HEAD, sizeof HEAD - 1);
    memset(p + 8 + sizeof HEAD - 1, 'x', BODY);
    p += 8 + STDOUT_LEN;
    header(p, 6, 0);
    header(p + 8, 3, 8); /* END_REQUEST: app status 0, REQUEST_COMPLETE, the rest zero */
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
