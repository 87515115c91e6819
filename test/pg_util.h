/* SPDX-License-Identifier: MIT */
/*
 * A throwaway PostgreSQL for the tests and benchmarks of the PostgreSQL backend: a real server,
 * started from the installed binaries, never a mock.
 *
 *   pg_cluster_start   initdb into a fresh temporary directory (as the `postgres` user when run as
 *                      root: PostgreSQL refuses to run as root), start it on 127.0.0.1 on a free
 *                      port with a socket directory of its own, and wait until pg_isready says it
 *                      accepts connections. Returns PG_SKIP when the binaries are not installed.
 *   pg_cluster_db      create a database with chime's schema in it (chime__pg_schema_create, as
 *                      `chime-store --postgres ... init` does) and give its connection string
 *   pg_cluster_restart pg_ctl restart (fast): every session is cut, the server comes back
 *   pg_cluster_stop    stop it and remove the directory
 *
 * Everything is removed also when the test fails or crashes: a reaper process, forked at start,
 * waits for the end of a pipe that only the test holds; when the test ends in any way, the pipe
 * closes, and the reaper stops the server and removes the directory if they are still there.
 * Processes a test forks must call pg_cluster_forked() so that they do not hold the pipe open.
 *
 * Environment: CHIME_PG_BINDIR (where initdb and pg_ctl are; default: `pg_config --bindir`, then
 * the newest /usr/lib/postgresql/N/bin). CHIME_PG_FSYNC=on keeps fsync (benchmarks); tests turn it
 * off, since they test chime's behaviour, not the disk's.
 */
#ifndef CHIME_TEST_PG_UTIL_H
#define CHIME_TEST_PG_UTIL_H

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "store/pg/pg.h"

#define PG_SKIP 1

struct pg_cluster {
    char dir[256];      /* the temporary directory: data/ in it, and the socket */
    char bindir[256];
    char conninfo[512]; /* the database postgres */
    int port;
    int as_postgres;    /* we are root: commands run as the postgres user */
    uid_t uid;
    gid_t gid;
    pid_t reaper;
    int reaper_fd;      /* our end of the reaper's pipe */
};

static inline int pg_util_exists(const char *dir, const char *prog)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, prog);
    return access(path, X_OK) == 0;
}

/* Where the server's binaries are, into out; 0 if not installed. */
static inline int pg_util_bindir(char *out, size_t n)
{
    const char *env = getenv("CHIME_PG_BINDIR");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return pg_util_exists(out, "initdb") && pg_util_exists(out, "pg_ctl");
    }
    FILE *p = popen("pg_config --bindir 2>/dev/null", "r");
    if (p) {
        char line[256] = "";
        if (fgets(line, sizeof line, p))
            line[strcspn(line, "\n")] = 0;
        pclose(p);
        if (*line && pg_util_exists(line, "initdb") && pg_util_exists(line, "pg_ctl")) {
            snprintf(out, n, "%s", line);
            return 1;
        }
    }
    int best = 0;
    DIR *d = opendir("/usr/lib/postgresql");
    for (struct dirent *e; d && (e = readdir(d));) {
        char dir[256];
        int v = atoi(e->d_name);
        if (strlen(e->d_name) > 200)
            continue;
        snprintf(dir, sizeof dir, "/usr/lib/postgresql/%s/bin", e->d_name);
        if (v > best && pg_util_exists(dir, "initdb") && pg_util_exists(dir, "pg_ctl")) {
            best = v;
            snprintf(out, n, "%s", dir);
        }
    }
    if (d)
        closedir(d);
    return best > 0;
}

/* Run a server program (as postgres if we are root), its output to log (or /dev/null). Returns its
 * exit status, or -1. */
static inline int pg_util_run(const struct pg_cluster *c, const char *log, const char *prog, ...)
{
    const char *argv[32];
    int n = 0;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", c->bindir, prog);
    if (c->as_postgres) {
        argv[n++] = "runuser";
        argv[n++] = "-u";
        argv[n++] = "postgres";
        argv[n++] = "--";
    }
    argv[n++] = path;
    va_list ap;
    va_start(ap, prog);
    for (const char *a; n < 31 && (a = va_arg(ap, const char *));)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log ? log : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0)
            dup2(null, 0);
        /* nothing else of ours: a server started here outlives this call, and must not hold the
         * test's pipes (a node would never see its end of file) or a benchmark's flock */
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
        /* the postgres user may not enter the test's directory (a checkout under /root) */
        if (chdir(*c->dir ? c->dir : "/") != 0 && chdir("/") != 0)
            _exit(126);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static inline void pg_util_remove_dir(const char *dir)
{
    pid_t pid = fork();
    if (pid == 0) {
        execlp("rm", "rm", "-rf", dir, (char *)NULL);
        _exit(127);
    }
    if (pid > 0)
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
}

static inline int pg_util_free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = 0,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    int port = -1;
    if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(s, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (s >= 0)
        close(s);
    return port;
}

static inline int pg_cluster_ready(const struct pg_cluster *c)
{
    char port[16];
    snprintf(port, sizeof port, "%d", c->port);
    return pg_util_run(c, NULL, "pg_isready", "-q", "-h", "127.0.0.1", "-p", port, (char *)NULL) == 0;
}

/* Wait (polling pg_isready every 20 ms) until the server accepts connections or pg_ctl gave up. */
static inline int pg_cluster_wait_ready(const struct pg_cluster *c, int seconds)
{
    for (int i = 0; i < seconds * 50; i++) {
        if (pg_cluster_ready(c))
            return 0;
        struct timespec ts = { 0, 20000000 };
        nanosleep(&ts, NULL);
    }
    return -1;
}

static inline int pg_util_start_server(struct pg_cluster *c)
{
    char data[300], log[300], ctl_log[300], opts[600];
    snprintf(data, sizeof data, "%s/data", c->dir);
    snprintf(log, sizeof log, "%s/server.log", c->dir); /* the server's, opened by the server */
    snprintf(ctl_log, sizeof ctl_log, "%s/pg_ctl.log", c->dir); /* pg_ctl's own output, ours */
    const char *fsync = getenv("CHIME_PG_FSYNC");
    snprintf(opts, sizeof opts,
             "-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=300"
             " -c shared_buffers=256MB -c max_wal_size=4GB -c fsync=%s"
             " -c synchronous_commit=on -c log_min_messages=warning",
             c->port, c->dir, fsync && !strcmp(fsync, "on") ? "on" : "off");
    if (pg_util_run(c, ctl_log, "pg_ctl", "-D", data, "-l", log, "-o", opts, "-w", "-t", "120", "start",
                    (char *)NULL) != 0)
        return -1;
    return pg_cluster_wait_ready(c, 120);
}

static inline void pg_util_stop_server(const struct pg_cluster *c, const char *mode)
{
    char data[300];
    snprintf(data, sizeof data, "%s/data", c->dir);
    if (access(data, F_OK) == 0)
        pg_util_run(c, NULL, "pg_ctl", "-D", data, "-m", mode, "-w", "stop", (char *)NULL);
}

/* Fork the reaper (see above). */
static inline void pg_util_reaper(struct pg_cluster *c)
{
    int fds[2];
    /* close-on-exec: the server and every program we start must not hold the pipe open */
    if (pipe2(fds, O_CLOEXEC) != 0)
        return;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[1]);
        setsid(); /* out of the test's process group: a signal to it does not end us first */
        char b;
        while (read(fds[0], &b, 1) != 0 && errno == EINTR)
            ;
        pg_util_stop_server(c, "immediate");
        pg_util_remove_dir(c->dir);
        _exit(0);
    }
    close(fds[0]);
    c->reaper = pid;
    c->reaper_fd = pid > 0 ? fds[1] : -1;
    if (pid < 0)
        close(fds[1]);
}

/* Return: 0; PG_SKIP (no binaries; a message on stdout says so); -1. */
static inline int pg_cluster_start(struct pg_cluster *c)
{
    memset(c, 0, sizeof *c);
    c->reaper_fd = -1;
    if (!pg_util_bindir(c->bindir, sizeof c->bindir)) {
        printf("# PostgreSQL server binaries (initdb, pg_ctl) not found: install postgresql, or set "
               "CHIME_PG_BINDIR\n");
        return PG_SKIP;
    }
    c->as_postgres = geteuid() == 0;
    if (c->as_postgres) {
        struct passwd *pw = getpwnam("postgres");
        if (!pw) {
            printf("# running as root, and there is no postgres user to run the server as\n");
            return -1;
        }
        c->uid = pw->pw_uid;
        c->gid = pw->pw_gid;
    }
    const char *base = getenv("TMPDIR");
    snprintf(c->dir, sizeof c->dir, "%s/chime-pg-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(c->dir))
        return -1;
    if (c->as_postgres && chown(c->dir, c->uid, c->gid) != 0)
        return -1;
    pg_util_reaper(c);
    char data[300], log[300];
    snprintf(data, sizeof data, "%s/data", c->dir);
    snprintf(log, sizeof log, "%s/initdb.log", c->dir);
    if (pg_util_run(c, log, "initdb", "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8",
                    "--locale=C", "--no-sync", (char *)NULL) != 0) {
        printf("# initdb failed (see %s)\n", log);
        return -1;
    }
    for (int tries = 0; tries < 5; tries++) { /* the free port may be taken meanwhile */
        c->port = pg_util_free_port();
        if (c->port > 0 && pg_util_start_server(c) == 0) {
            snprintf(c->conninfo, sizeof c->conninfo,
                     "host=127.0.0.1 port=%d user=postgres dbname=postgres", c->port);
            return 0;
        }
    }
    printf("# the server did not start (see %s/server.log)\n", c->dir);
    return -1;
}

static inline int pg_cluster_restart(struct pg_cluster *c)
{
    pg_util_stop_server(c, "fast");
    return pg_util_start_server(c);
}

/* Stop the server and remove everything; the reaper then ends. */
static inline void pg_cluster_stop(struct pg_cluster *c)
{
    if (!*c->dir)
        return;
    pg_util_stop_server(c, "fast");
    pg_util_remove_dir(c->dir);
    if (c->reaper_fd >= 0)
        close(c->reaper_fd);
    if (c->reaper > 0)
        while (waitpid(c->reaper, NULL, 0) < 0 && errno == EINTR)
            ;
    c->reaper_fd = -1;
    c->reaper = 0;
    *c->dir = 0;
}

/* In a process the test forked: let go of the reaper's pipe. */
static inline void pg_cluster_forked(struct pg_cluster *c)
{
    if (c->reaper_fd >= 0)
        close(c->reaper_fd);
    c->reaper_fd = -1;
    c->reaper = 0;
}

/* The partition width most tests create their databases with. A node makes the partitions of its
 * next 64 widths at most (lib/store/pg/house.c, AHEAD_MAX), or of its horizon and two widths more
 * if that is fewer: with the default horizon (an hour), 64 partitions of 60 s, against 10 of 600 s.
 * Partitions of 60 s made 57 a database in test_pg_store, about 8 of the 13 s of statement time
 * its server spent (pg_stat_statements), in every one of CI's four stages. The tests of partitions
 * (test_pg_partitions, test_pg_retire) set their own widths, test_pg_cluster keeps 60 s so that
 * its load crosses a partition's end now and then, and tests that need a put beyond the partitions
 * made ahead put it days ahead. */
#define PG_WIDTH_S 600

/* Create database `name` with chime's schema (shards; partitions of partition_s seconds), and its
 * connection string into out. Return: 0 or -1. */
static inline int pg_cluster_db(const struct pg_cluster *c, const char *name, unsigned shards,
                                unsigned partition_s, char *out, size_t n)
{
    PGconn *conn = PQconnectdb(c->conninfo);
    char sql[200];
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
    PGresult *r = PQstatus(conn) == CONNECTION_OK ? PQexec(conn, sql) : NULL;
    int ok = r && PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    PQfinish(conn);
    if (!ok)
        return -1;
    snprintf(out, n, "host=127.0.0.1 port=%d user=postgres dbname=%s", c->port, name);
    struct pg_conn pc = { .conninfo = out, .role = "test" };
    pc.c = PQconnectdb(out);
    struct pg_schema sc;
    int rc = PQstatus(pc.c) == CONNECTION_OK
                 ? chime__pg_schema_create(&pc, shards, (uint64_t)partition_s * 1000000000u, &sc)
                 : -1;
    PQfinish(pc.c);
    return rc == 0 ? 0 : -1;
}

#endif /* CHIME_TEST_PG_UTIL_H */
