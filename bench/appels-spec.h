/* The system calls the specification (docs/SPECIFICATION.md) asks of every download, for the
 * bench's responders built with -DAPPELS_DE_LA_SPEC='"<state folder>"' (bench/repondeur-nul.c,
 * bench/repondeur-minimal.c): open the stored file (fstat for its size) and its sidecar (one
 * read), read the file (pread), set its mtime (futimens, to the time just read, as the program
 * does), append one line to a log kept open in O_APPEND mode and read its link count and size
 * (statx without the times, as the program's size and rotation check does). No parsing, no
 * check, no lock, no sweep. SPEC_HEAD: the headers the program answers a download of petit.bin
 * with (the ETag's digits are the program's for some upload; only their length matters);
 * bench/run stops if the program's own headers no longer match them (`entetes_compares`). */
#ifndef APPELS_SPEC_H
#define APPELS_SPEC_H
/* statx: the including file defines _GNU_SOURCE before its first #include. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

static int dir_files = -1, dir_meta = -1, log_fd = -1;

static void spec_open(void) {
    dir_files = open(APPELS_DE_LA_SPEC "/files", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    dir_meta = openat(dir_files, ".meta", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    log_fd = open(APPELS_DE_LA_SPEC "/log/repondeur-spec.log", O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
}

/* The download of petit.bin into out (room bytes at most); its length, or -1. */
static long spec_download(unsigned char *out, size_t room) {
    static char sidecar[4097];
    int fd = openat(dir_files, "petit.bin", O_RDONLY | O_NOATIME | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    int m = openat(dir_meta, "petit.bin.json", O_RDONLY | O_NOATIME | O_CLOEXEC);
    if (fstat(fd, &st) || m < 0 || read(m, sidecar, sizeof sidecar) <= 0 || (size_t)st.st_size > room) {
        if (m >= 0) close(m);
        close(fd);
        return -1;
    }
    close(m);
    long n = pread(fd, out, (size_t)st.st_size, 0);
    struct timespec times[2] = {{0, UTIME_OMIT}, {0, 0}};
    clock_gettime(CLOCK_REALTIME, &times[1]);
    futimens(fd, times);
    close(fd);
    char line[256];
    time_t t = time(0);
    struct tm tm;
    localtime_r(&t, &tm);
    size_t l = strftime(line, 64, "[%Y-%m-%d %H:%M:%S] [127.0.0.1] ", &tm);
    l += (size_t)snprintf(line + l, sizeof line - l, "GET /download.php — téléchargement \"petit.bin\" : OK\n");
    struct statx sx;
    if (write(log_fd, line, l) < 0 || statx(log_fd, "", AT_EMPTY_PATH, STATX_NLINK | STATX_SIZE, &sx)) return -1;
    return n;
}

#define SPEC_HEAD                                                                                  \
    "Status: 200 OK\r\nContent-Type: application/octet-stream\r\n"                                 \
    "Content-Disposition: attachment; filename=\"petit.bin\"; filename*=UTF-8''petit.bin\r\n"      \
    "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n" \
    "Accept-Ranges: bytes\r\nETag: \"98c178-2800-6b135612\"\r\nContent-Length: 10240\r\n\r\n"
#endif
