/* agent.h - the isopod guest agent: /init, PID 1 of every isopod microVM.
 *
 * It mounts the root disk read-only (read-write when the kernel's line
 * says isopod.root_rw=1: a cold run's boot) and switches to it, finds the
 * virtio-serial port named isopod.agent and serves doc/PROTOCOL.md on it:
 * one host at a time, one operation at a time, all of it in one poll() loop
 * over the port, a signalfd, a timerfd and the running command's pipes.
 *
 * PID 1 must never die: the kernel would panic and the host would see a
 * hang instead of an error.  So nothing here exits or aborts: every failure
 * is reported to the host (ERROR or EXIT frame, T_ERROR of HELLO_ACK) and
 * on the console, and the loop goes on.
 *
 * Flow control.  Toward the host, frames go through one output buffer; the
 * command's pipes (and FILE_GET) are not read while it holds more than
 * OUT_HIGH bytes, so a slow host slows the command down instead of growing
 * the buffer.  Toward the command, the host never has more than AGENT_WINDOW
 * bytes in flight on a stream (FRAME_INITIAL_CREDIT unasked, the rest
 * granted by one CREDIT when the operation starts): each byte we hand to the
 * command's stdin (or the file) is given back as F_CREDIT, so the stdin ring
 * below can never overflow and the port is always read (PING, EOF, the next
 * frame are never stuck behind stdin data).
 *
 * The files:
 *   main.c     the poll loop, signals, main()
 *   port.c     the virtio port: open, read, frame dispatch, resync, write
 *   out.c      the output buffer toward the host; diagnostics and time
 *   request.c  decoding and validating what the host sends (no side
 *              effects: t/unit/agent_test.c and fuzz/agent_fuzz.c drive it)
 *   hello.c    HELLO: hostname, clock, RNG seed, network
 *   pid1.c     boot, the root disk, SHUTDOWN
 *   exec.c     EXEC: spawn, the child's setup, pipes, EXIT
 *   file.c     FILE_PUT and FILE_GET
 * All state is one struct agent, passed explicitly.
 */
#ifndef ISOPOD_AGENT_H
#define ISOPOD_AGENT_H

#include "frame.h"
#include "treeio.h"

#include <limits.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define AGENT "isopod-agent: "
#define ROOT_DEV "/dev/vda"
#define PORT_NAME "isopod.agent"
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* Stop reading command output / FILE_GET above this much queued output. */
#define OUT_HIGH (256u * 1024u)
/* Stop reading the port above this: only a host that sends requests (PING)
 * without ever reading could get here; never reached by the data paths. */
#define OUT_STOP_INPUT (4u * 1024u * 1024u)
/* Frames beyond this are dropped (logged) rather than kill PID 1. */
#define OUT_MAX (16u * 1024u * 1024u)
/* The output buffer's first bytes, in .bss: a cold run never grows past
 * them, so it never calls malloc (out.c out_reserve). */
#define OUT_FIRST (64u * 1024u)
#define RBUF_SZ (2u * (FRAME_HDR + FRAME_MAX_PAYLOAD))
/* virtio_console turns each write() into one buffer of at most 32 KiB, and
 * QEMU drops the unsent rest of a buffer when its client hangs up.  Writing
 * whole frames only, each write at most this long, keeps every buffer
 * frame-aligned: a host that connects right after another one vanished
 * sees whole stale frames, never the tail of one. */
#define PORT_WRITE_MAX (32u * 1024u)
/* So a DATA frame, header included, fits in one write. */
#define OUT_DATA_CHUNK (PORT_WRITE_MAX - FRAME_HDR)
/* Bytes read from the port per loop turn, so pipes and timers get a turn. */
#define READ_BUDGET (512u * 1024u)
/* The window a stream's host may have in flight: FRAME_INITIAL_CREDIT
 * unasked, the rest granted as the operation starts (a host of any version
 * takes a CREDIT at any time).  The initial 256 KiB alone left the host
 * waiting for credit ~400 times per 64 MiB, the guest idle meanwhile: QEMU
 * moves 4 KiB per main-loop turn, and a credit takes a round trip through
 * it (doc/SPEED.md, "Goal 4, where a transfer's time goes").  It is also
 * the stdin ring's size, so it bounds what a host can make us hold. */
#define AGENT_WINDOW (1024u * 1024u)
_Static_assert(AGENT_WINDOW >= FRAME_INITIAL_CREDIT, "the window starts at the initial credit");
_Static_assert(AGENT_WINDOW >= BULK_SLOT, "a bulk slot is read whole into the stdin ring");
#define BULK_SECTOR 512u /* O_DIRECT's unit on a virtio-blk device */
/* Bigger pipes: fewer wake-ups per MiB under TCG, where syscalls are dear. */
#define PIPE_SZ (1024 * 1024)
/* After the main process exits: wait this long for its pipes to hit EOF
 * (the clock only runs while the host keeps up), never longer than MAX. */
#define DRAIN_MS 2000
#define DRAIN_MAX_MS 30000
/* The same after a timeout: the budget is spent, what the pipes hold is read
 * at once, and a process that left the group is not waited for: EXIT must
 * reach the host within its grace (1.5 s after the deadline, isopod-exec),
 * or the host stops the VM. */
#define DRAIN_TIMEOUT_MS 250
#define DRAIN_TIMEOUT_MAX_MS 1000
#define WAIT_DEV_MS 10000
/* A read of 0 right after data is a hang-up only once it has lasted this
 * long (see port_read). */
#define HANGUP_CONFIRM_MS 250
/* With no host, the port is looked at again after this long, or at once
 * on the SIGIO the driver sends when a host connects (port_try_open's
 * O_ASYNC); without O_ASYNC, after NOHOST_POLL_MS. */
#define NOHOST_WAIT_MS 1000
#define NOHOST_POLL_MS 10

/* Every string of one EXEC lives in its exec_req: the payload is at most
 * FRAME_MAX_PAYLOAD and each item costs at least 5 bytes of TLV header,
 * so the copies (plus NULs) and the pointer arrays always fit. */
#define MAX_ITEMS (FRAME_MAX_PAYLOAD / 5 + 1)
/* The default environment: PATH HOME LANG TERM. */
#define ENV_DEFAULTS 4

/* ------------------------------------------------------------------ */
/* requests, as decoded by request.c                                   */

struct hello_req {
	uint32_t version;
	int have_version;
	uint64_t cookie;
	char hostname[65];
	int have_time;
	uint64_t time_ns;
	const uint8_t *seed;
	uint32_t seedlen;
	int grow;
	int root_rw;
	char net_addr[64], net_gw[64], net_dns[64];
	uint32_t net_mtu;
	uint8_t net_mac[6];
	int have_mac;
};

struct exec_req {
	char **argv, **envp; /* NULL-terminated, into the arrays below */
	const char *cwd;
	uint64_t timeout_ms;
	int with_stdin;
	char arena[FRAME_MAX_PAYLOAD + 16];
	char *argv_buf[MAX_ITEMS + 1];
	char *envp_buf[MAX_ITEMS + 8];
};

/* ------------------------------------------------------------------ */
/* state                                                               */

struct port_state {
	int fd;          /* the virtio-serial port, -1 until found */
	char dev[300];
	int64_t retry_at;/* no host (or no port yet): look again at this time */
	int active;      /* a host sent bytes since the last reset */
	int poisoned;    /* malformed input: ignore all until hang-up or HELLO */
	int helloed;     /* a HELLO with our version was answered */
	int64_t eof_since; /* a read said "no host" after data: since when */
	int async;       /* the port sends us SIGIO when a host connects */
	size_t rlen, roff;
	uint8_t rbuf[RBUF_SZ];
};

struct out_buf {
	uint8_t *p;
	size_t off, len, cap;
	size_t split; /* rest of a write the driver took only in part */
};

struct root_state {
	int ok;          /* the root disk is mounted at / */
	int rw;
	int grow;        /* HELLO asked to grow the fs to the disk on remount rw */
	int rw_soon;     /* HELLO asked for rw once its HELLO_ACK is written */
	char err[512];   /* why it is not ok */
	char dns[64];    /* T_NET_DNS, written to /etc/resolv.conf once rw */
};

enum op { OP_NONE, OP_EXEC, OP_PUT, OP_GET };

enum { STAGE_OK, STAGE_SETUP, STAGE_CWD, STAGE_EXEC };

struct exec_state {
	pid_t pid;          /* main process; also its process group and session */
	int reaped, wstatus;
	int in_fd, out_fd, err_fd, st_fd; /* our ends of stdin/out/err/status */
	int with_stdin;     /* the host streams STREAM_STDIN */
	int stdin_eof;      /* the host sent EOF on stdin */
	int timed_out;
	int st_stage, st_errno; /* spawn failure reported by the child */
	int64_t drain_until, drain_cap;
	size_t rhead, rlen; /* stdin ring */
	int ring_bulk;      /* the ring holds a bulk slot's bytes: no CREDIT for them */
	/* Bulk slots named for stdin and not yet read: each is read into
	 * the ring once it is empty, then returned (BULK_DONE). */
	uint32_t bq[BULK_SLOTS_MAX], bq_n[BULK_SLOTS_MAX], bq_head, bq_len;
	char argv0[256], cwd[PATH_MAX];
};

struct put_state {
	int fd;          /* the file; with tree, the top directory */
	int failed;      /* error reported: drop stream-4 data until EOF */
	int tree;        /* a directory: stream-4 is a tree stream into feed */
	uint64_t bytes;
	char path[PATH_MAX];
	struct ts_feed feed;
};

/* A copy-out's reads (doc/SPEED.md "Goal 4, a cold copy-out"): what the
 * page cache holds is read buffered; the rest with O_DIRECT, a chunk at a
 * time, into the idle stdin ring, so QEMU's DMA fills it where a buffered
 * read of the disk went through the page cache at several times the cost
 * under TCG.  The ring's bytes belong to one file, named by key. */
struct cold_read {
	uint64_t key;       /* whose bytes: 0 none; a FILE_GET's file 1, a tree's its nth */
	uint64_t rpos, rlen;/* the ring holds the file's [rpos, rpos + rlen) */
	uint64_t cached_end;/* [.., cached_end) read buffered: in the page cache, or O_DIRECT failed */
	int nodirect;       /* O_DIRECT refused (tmpfs, ...): buffered only */
	int stuck;          /* O_DIRECT could not be cleared: no buffered reads */
	uint8_t *map;       /* the file mapped (never touched) for mincore, or NULL */
	size_t maplen;
	int nomap;          /* it could not be */
};

struct get_state {
	int fd;
	int tree;        /* a directory: walk sends it as a tree stream */
	uint64_t bytes;
	uint64_t size;   /* st_size at open: never more is sent */
	uint64_t max;    /* the most the host takes */
	uint32_t mode;
	char path[PATH_MAX];
	struct ts_walk walk;
	struct cold_read cold;
};

/* The bulk lane's device (doc/PROTOCOL.md "Bulk lane"): read with
 * O_DIRECT, so the guest's page cache never holds a slot's old bytes. */
struct bulk_state {
	int fd;             /* -1: no lane */
	uint32_t n;         /* slots */
	uint64_t bytes;     /* the device's size, announced in HELLO_ACK */
};

struct agent {
	struct port_state port;
	struct bulk_state bulk;
	struct out_buf out;
	struct root_state root;
	enum op op;
	struct exec_state ex;
	struct put_state put;
	struct get_state get;
	uint64_t credit_due[STREAM_MAX + 1];
	int sigfd, tfd;
	struct exec_req req; /* the EXEC being decoded */
	/* Exactly the credit window: the host can never have more in flight.
	 * Aligned for O_DIRECT: a bulk slot is read straight into it (stdin:
	 * when it is empty; FILE_PUT: it is unused then). */
	_Alignas(4096) uint8_t stdin_ring[AGENT_WINDOW];
	uint8_t out_first[OUT_FIRST]; /* out.p until more is needed */
};

/* ------------------------------------------------------------------ */
/* out.c: diagnostics, time, output toward the host                    */

void logm(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void out_free(struct agent *a);
int64_t clock_ms(clockid_t id);
int64_t mono_ms(void);
void sleep_ms(int ms);
int set_nonblock(int fd);
int clear_nonblock(int fd);
int set_direct(int fd, int on);
void close_fd(int *fd);
size_t out_pending(const struct agent *a);
void out_frame(struct agent *a, uint8_t type, uint32_t stream, const void *payload, size_t n);
void out_tlv(struct agent *a, uint8_t type, uint32_t stream, const struct tlv_w *w);
void send_error(struct agent *a, const char *kind, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void credit_flush(struct agent *a);
ssize_t out_read_data(struct agent *a, int fd, uint32_t stream, uint64_t max);
uint8_t *out_data_reserve(struct agent *a);
int out_frame_now(struct agent *a, const uint8_t *p, size_t n);
void out_data_commit(struct agent *a, uint32_t stream, size_t n);
size_t out_next_write(const struct agent *a);

/* ------------------------------------------------------------------ */
/* request.c: decoding the host's requests (pure: no I/O, no state)    */

void errcat(char *buf, size_t sz, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int parse_cidr(const char *s, in_addr_t *addr, in_addr_t *mask);
void hello_parse(const struct frame *fr, struct hello_req *h, char *err, size_t errsz);
int hello_plausible(const struct frame *fr);
/* These return 0, or -1 with why the request is refused (ERROR{bad_request}). */
int exec_parse(const struct frame *fr, struct exec_req *rq, char *why, size_t whysz);
int put_parse(const struct frame *fr, char path[PATH_MAX], uint32_t *mode, char *why,
	      size_t whysz);
int get_parse(const struct frame *fr, char path[PATH_MAX], uint64_t *max, char *why,
	      size_t whysz);
int tree_parse(const struct frame *fr, uint32_t *tree, char *why, size_t whysz);

/* ------------------------------------------------------------------ */
/* port.c, main.c: the connection and the loop                         */

void agent_init(struct agent *a);
void conn_reset(struct agent *a, const char *why);
ssize_t port_write(struct agent *a, const uint8_t *p, size_t n);
void port_flush(struct agent *a);
int port_try_open(struct agent *a);
int sys_read(const char *path, char *buf, size_t sz);
int sys_each(const char *dir, int (*fn)(struct agent *, const char *), struct agent *a);
void port_parse(struct agent *a);
void port_read(struct agent *a);
void on_frame(struct agent *a, const struct frame *fr);
void op_abort(struct agent *a);
void flush_wait(struct agent *a, int ms);
void hangup_wait(struct agent *a, int ms);
void signals_setup(struct agent *a);
void loop_once(struct agent *a);

/* ------------------------------------------------------------------ */
/* pid1.c, hello.c: the guest system                                   */

void boot(struct agent *a);
void lo_up(void);
void grow_root(struct agent *a);
void root_rw_soon(struct agent *a);
void write_resolv(struct agent *a);
int root_make_rw(struct agent *a, char *err, size_t errsz);
void on_hello(struct agent *a, const struct frame *fr);

/* bulk.c: the bulk lane */
void bulk_find(struct agent *a);
/* Slot's first len bytes into buf (aligned, a slot's size).  0, or -1 (logged). */
int bulk_read(struct agent *a, uint32_t slot, uint32_t len, uint8_t *buf);
/* pread until len bytes, end of file or an error: the bytes read, or -1. */
ssize_t pread_full(int fd, uint8_t *buf, size_t len, off_t off);
/* BULK_DONE{slot} on stream: the host may reuse the slot. */
void bulk_done(struct agent *a, uint32_t stream, uint32_t slot);
void on_bulk(struct agent *a, const struct frame *fr);
void on_shutdown(struct agent *a);

/* ------------------------------------------------------------------ */
/* exec.c, file.c: the operations                                      */

void on_exec(struct agent *a, const struct frame *fr);
void exec_abort(struct agent *a);
void exec_read_status(struct agent *a);
void pipe_pump(struct agent *a, int *fd, uint32_t stream);
void stdin_pump(struct agent *a);
void on_stdin_bulk(struct agent *a, uint32_t slot, uint32_t len);
void on_stdin_data(struct agent *a, const struct frame *fr);
void exec_on_timer(struct agent *a);
void reap(struct agent *a);
void exec_maybe_finish(struct agent *a, int64_t now);
void on_file_put(struct agent *a, const struct frame *fr);
void on_file_data(struct agent *a, const struct frame *fr);
void on_file_bulk(struct agent *a, uint32_t slot, uint32_t len);
void on_file_eof(struct agent *a);
void on_file_get(struct agent *a, const struct frame *fr);
void get_pump(struct agent *a);
void cold_release(struct agent *a);
void put_fail(struct agent *a);

#endif
