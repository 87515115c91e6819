/* SPDX-License-Identifier: MIT */
/*
 * An event loop that holds idle-connection timeouts in a chime wheel, the way a server would.
 *
 * Each "connection" is one end of a socketpair with an idle timeout: when it has been silent for
 * IDLE_MS it is closed; every byte that arrives pushes its timeout back (chime_wheel_reschedule). A
 * periodic timer plays the clients: for a while it writes to some connections and leaves the others
 * silent. Two reminders wait far away all along, one 30 days out and one at the end of time, as a
 * server's would. The loop sleeps in poll() for as long as chime_wheel_next() says, clamped to what
 * poll() can take (poll_timeout.h: 24.8 days; an unclamped far timer would become an infinite
 * sleep), then advances the wheel to its clock: milliseconds since the server started.
 *
 * It runs as a test: it exits 0 only if every connection was closed and none before IDLE_MS of
 * silence (a timeout is never early), the reminders are still pending and unfired, and the loop's
 * next sleep, with only the reminders left, is the longest poll() allows. How many messages each
 * connection heard depends on scheduling, so it is printed, not checked.
 */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <chime.h>

#include "poll_timeout.h"

#define CONNS 6
#define IDLE_MS 50
#define CHATTY 3          /* connections 0..CHATTY-1 receive messages, the rest stay silent */
#define MESSAGES 8        /* the clients write this many rounds, every MESSAGE_EVERY_MS */
#define MESSAGE_EVERY_MS 20
#define DAY_MS (24 * 60 * 60 * 1000ull)

struct conn {
    int fd, peer;           /* fd is the server's end, peer the client's */
    chime_id timeout;
    uint64_t last_activity; /* ms */
    uint64_t closed_at;     /* ms, 0 while open */
    int messages;
};

static struct conn conns[CONNS];
static chime_wheel *wheel;
static int open_conns = CONNS, rounds, reminders_fired;
static chime_id clients;

static uint64_t epoch_ms; /* CLOCK_MONOTONIC when the server started: the wheel's tick 0 */

/* The wheel's clock: milliseconds since the server started. Counting from a fixed start rather than
 * from boot makes where a timer waits (and so the example's check) the same on every machine. */
static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 - epoch_ms;
}

static void idle_timeout(void *arg)
{
    struct conn *c = arg;
    c->closed_at = chime_wheel_now(wheel);
    close(c->fd);
    close(c->peer);
    c->fd = c->peer = -1;
    open_conns--;
}

static void clients_write(void *arg)
{
    (void)arg;
    for (int i = 0; i < CHATTY; i++)
        if (conns[i].peer >= 0 && write(conns[i].peer, "x", 1) != 1)
            perror("write");
    if (++rounds == MESSAGES)
        chime_wheel_cancel(wheel, clients); /* a periodic timer may cancel itself */
}

static void remind(void *arg)
{
    (void)arg;
    reminders_fired++;
}

int main(void)
{
    epoch_ms = now_ms();
    uint64_t start = now_ms();
    struct chime_wheel_config cfg = { .start = start }; /* default layout: 1 tick = 1 ms */
    if (chime_wheel_new(&wheel, &cfg) != 0)
        return 1;
    for (int i = 0; i < CONNS; i++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
            return 1;
        conns[i] = (struct conn){ .fd = sv[0], .peer = sv[1], .last_activity = start };
        if (chime_wheel_schedule(wheel, start + IDLE_MS, idle_timeout, &conns[i], &conns[i].timeout))
            return 1;
    }
    if (chime_wheel_schedule_every(wheel, start + MESSAGE_EVERY_MS, MESSAGE_EVERY_MS, clients_write,
                                   NULL, &clients))
        return 1;
    if (chime_wheel_schedule(wheel, start + 30 * DAY_MS, remind, NULL, NULL) ||
        chime_wheel_schedule(wheel, UINT64_MAX, remind, NULL, NULL))
        return 1;

    while (open_conns > 0) {
        uint64_t next, now = now_ms();
        int timeout = -1; /* nothing pending: sleep until a socket speaks */
        if (chime_wheel_next(wheel, &next) == 0)
            timeout = poll_timeout_ms(next, now); /* never (int)(next - now): see poll_timeout.h */

        struct pollfd pfd[CONNS];
        int n = 0;
        for (int i = 0; i < CONNS; i++)
            if (conns[i].fd >= 0)
                pfd[n++] = (struct pollfd){ .fd = conns[i].fd, .events = POLLIN };
        if (poll(pfd, (nfds_t)n, timeout) < 0) {
            perror("poll");
            return 1;
        }
        now = now_ms();
        for (int k = 0; k < n; k++) {
            if (!(pfd[k].revents & POLLIN))
                continue;
            for (int i = 0; i < CONNS; i++) {
                char buf[64];
                if (conns[i].fd != pfd[k].fd || read(conns[i].fd, buf, sizeof buf) <= 0)
                    continue;
                conns[i].messages++;
                conns[i].last_activity = now;
                chime_wheel_reschedule(wheel, conns[i].timeout, now + IDLE_MS);
            }
        }
        chime_wheel_advance(wheel, now);
    }

    int failures = 0;
    for (int i = 0; i < CONNS; i++) {
        const struct conn *c = &conns[i];
        printf("connection %d: %d messages, closed %llu ms after its last one\n", i, c->messages,
               (unsigned long long)(c->closed_at - c->last_activity));
        if (c->closed_at < c->last_activity + IDLE_MS) {
            printf("  FAIL: closed before %d ms of silence\n", IDLE_MS);
            failures++;
        }
    }
    /* Only the reminders are left. The 30-day one waits in the day level, so the next event is the
     * start of day 30, 29.99 days away: the next sleep is the longest poll() takes, not forever. */
    uint64_t next, now = now_ms();
    int timeout = chime_wheel_next(wheel, &next) == 0 ? poll_timeout_ms(next, now) : -1;
    printf("%zu reminders pending, %d fired; the next poll() would sleep %d ms\n",
           chime_wheel_pending(wheel), reminders_fired, timeout);
    if (chime_wheel_pending(wheel) != 2 || reminders_fired != 0 || timeout != INT_MAX) {
        printf("  FAIL: want 2 reminders pending, none fired, and a %d ms sleep\n", INT_MAX);
        failures++;
    }
    printf("%d failures\n", failures);
    chime_wheel_free(wheel, NULL);
    return failures != 0;
}
