/* frame.h - the host <-> guest agent wire protocol (see doc/PROTOCOL.md).
 *
 * This file and frame.c depend on libc alone: the static musl agent and the
 * glibc host tools link the very same implementation, so there is one parser
 * to fuzz (fuzz/frame_fuzz.c).
 *
 * A frame is  u32 len | u8 type | u32 stream | payload[len]   (little endian).
 * Structured payloads are TLV lists:  u8 tag | u32 len | value[len].
 */
#ifndef ISOPOD_FRAME_H
#define ISOPOD_FRAME_H

#include <stddef.h>
#include <stdint.h>

/* The one place the protocol version is written.  ISOPOD_PROTO_NUM is the
 * bare number so it can be spelled into ISOPOD_PROTO_STAMP: the agent
 * carries that string (agent/pid1.c), images/register reads it out of the
 * uncompressed initramfs into the kernel's record (agent_protocol), and
 * kernel_agent_ok (lib/image.c) refuses a record whose agent speaks another
 * version before anything boots.  The front end asks isopod-image version. */
#define ISOPOD_PROTO_NUM 1
#define ISOPOD_PROTO_VERSION ((unsigned)ISOPOD_PROTO_NUM)
#define ISOPOD_STR_(x) #x
#define ISOPOD_STR(x) ISOPOD_STR_(x)
#define ISOPOD_PROTO_STAMP "isopod-agent-protocol=" ISOPOD_STR(ISOPOD_PROTO_NUM) ";"

#define FRAME_HDR 9u
/* Hard cap on one payload, both directions.  A peer announcing more is
 * malformed: nobody ever allocates from a length the other side sent. */
#define FRAME_MAX_PAYLOAD (64u * 1024u)
/* DATA payloads are chunked to this; leaves room for nothing else. */
#define FRAME_DATA_CHUNK (32u * 1024u)

enum frame_type {
	F_HELLO = 1,     /* h->g  TLV: VERSION COOKIE [HOSTNAME] [TIME_NS] [SEED] [NET_*] */
	F_HELLO_ACK = 2, /* g->h  TLV: VERSION COOKIE ROOT UPTIME_MS [ERROR] */
	F_EXEC = 3,      /* h->g  TLV: ARG+ ENV* [CWD] [TIMEOUT_MS] [STDIN] */
	F_DATA = 4,      /* both  raw bytes of `stream` */
	F_EOF = 5,       /* both  `stream` is closed by the sender */
	F_CREDIT = 6,    /* g->h  TLV: BYTES  (guest consumed that much of `stream`) */
	F_EXIT = 7,      /* g->h  TLV: EXIT_CODE SIGNAL TIMED_OUT [ERROR_KIND] [MESSAGE] */
	F_ERROR = 8,     /* g->h  TLV: ERROR_KIND MESSAGE  (request refused / failed) */
	F_PING = 9,      /* h->g  empty */
	F_PONG = 10,     /* g->h  empty */
	F_FILE_PUT = 11, /* h->g  TLV: PATH [MODE]; then DATA/EOF on STREAM_FILE */
	F_FILE_GET = 12, /* h->g  TLV: PATH; guest replies DATA* EOF FILE_DONE, or ERROR */
	F_FILE_DONE = 13,/* g->h  TLV: BYTES [MODE] */
	F_SHUTDOWN = 14, /* h->g  TLV: [MODE "poweroff"] sync, unmount root, power off */
	F_SHUTDOWN_ACK = 15, /* g->h  TLV: [ERROR] sent after the root is unmounted */
	F_BULK = 16,     /* h->g  u32 slot | u32 len: `stream`'s next len bytes are in that
			    slot of the bulk lane (stdin, FILE_PUT); sent only to an agent
			    whose HELLO_ACK had BULK */
	F_BULK_DONE = 17,/* g->h  u32 slot: the agent has read the slot; the host may reuse it */
	F_TYPE_MAX = 17
};

enum frame_stream {
	STREAM_CTL = 0,
	STREAM_STDIN = 1,
	STREAM_STDOUT = 2,
	STREAM_STDERR = 3,
	STREAM_FILE = 4,
	STREAM_MAX = 4
};

enum tlv_tag {
	T_VERSION = 1,    /* u32 */
	T_COOKIE = 2,     /* u64 */
	T_HOSTNAME = 3,   /* bytes */
	T_TIME_NS = 4,    /* u64, CLOCK_REALTIME of the host */
	T_SEED = 5,       /* bytes, fed to the guest RNG */
	T_ROOT = 6,       /* bytes: "ro" | "rw" */
	T_UPTIME_MS = 7,  /* u64 */
	T_ERROR = 8,      /* bytes: fatal condition in the guest (e.g. mount failure) */
	T_ARG = 9,        /* bytes, repeated, argv in order */
	T_ENV = 10,       /* bytes "K=V", repeated */
	T_CWD = 11,       /* bytes */
	T_TIMEOUT_MS = 12,/* u64, 0 = none */
	T_STDIN = 13,     /* u32 1 = host streams STREAM_STDIN, 0 = /dev/null */
	T_EXIT_CODE = 14, /* u32 (signed) */
	T_SIGNAL = 15,    /* u32, 0 = none */
	T_TIMED_OUT = 16, /* u32 0/1 */
	T_ERROR_KIND = 17,/* bytes: not_found|not_executable|cwd_missing|bad_request|io|... */
	T_MESSAGE = 18,   /* bytes, human text */
	T_BYTES = 19,     /* u64 */
	T_PATH = 20,      /* bytes */
	T_MODE = 21,      /* u32 (file mode bits) */
	T_NET_ADDR = 22,  /* bytes "10.0.0.2/30" */
	T_NET_GW = 23,    /* bytes "10.0.0.1" */
	T_NET_DNS = 24,   /* bytes "10.0.0.1" */
	T_NET_MTU = 25,   /* u32 */
	T_NET_MAC = 26,   /* bytes, 6 */
	T_GROW = 27,      /* u32 1 = grow the root fs to the disk size on remount rw */
	T_TREE = 28,      /* u32 1 = FILE_PUT/FILE_GET of a directory as a tree stream */
	T_ROOT_RW = 29,   /* u32 1 = HELLO: make the root read-write once HELLO_ACK is sent */
	T_BULK = 30,      /* u64, HELLO_ACK: the bulk lane's size in bytes (the agent found it) */
	T_TAG_MAX = 30
};

/* Initial stdin / file-in credit the host may send before the first F_CREDIT. */
#define FRAME_INITIAL_CREDIT (256u * 1024u)

/* The bulk lane (doc/PROTOCOL.md "Bulk lane"): a second virtio-blk drive,
 * a raw file in the VM's directory, in slots of BULK_SLOT bytes.  The
 * serial port moves host-to-guest bytes 4 KiB per QEMU main-loop turn
 * (doc/SPEED.md "Goal 4"); a drive moves a slot per request.  The file is
 * BULK_FILE_BYTES; either side uses at most BULK_SLOTS_MAX slots whatever
 * the other announces, so a slot index always fits a 32-bit mask. */
#define BULK_SLOT (1024u * 1024u)
#define BULK_SLOTS_MAX 16u
#define BULK_FILE_BYTES (8ull * BULK_SLOT)
#define BULK_PAYLOAD 8u

/* Slots of a lane of `bytes` (a HELLO_ACK's BULK, a file's size): at most
 * BULK_SLOTS_MAX, 0 when not even one fits. */
uint32_t bulk_nslots(uint64_t bytes);

struct frame {
	uint8_t type;
	uint32_t stream;
	uint32_t len;
	const uint8_t *payload; /* points into the parsed buffer */
};

/* F_BULK's payload: slot, len (little endian). */
void bulk_encode(uint8_t out[BULK_PAYLOAD], uint32_t slot, uint32_t len);
/* Decode F_BULK; -1 unless the payload is exactly BULK_PAYLOAD bytes with
 * slot < nslots and 0 < len <= BULK_SLOT.  The agent's check of what the
 * host names: its reads stay inside the lane. */
int bulk_decode(const struct frame *fr, uint32_t nslots, uint32_t *slot, uint32_t *len);
/* Decode F_BULK_DONE; -1 unless the payload is exactly 4 bytes naming a
 * slot < nslots.  The host's check of what the guest names (the caller
 * also checks that the slot is one it lent). */
int bulk_done_decode(const struct frame *fr, uint32_t nslots, uint32_t *slot);

/* Parse one frame from buf[0..n).  Returns 1 and fills *fr and *used when a
 * whole frame is there; 0 when more bytes are needed (*used = 0); -1 when the
 * bytes can never become a valid frame (length over FRAME_MAX_PAYLOAD, unknown
 * type, stream out of range).  Never allocates. */
int frame_parse(const uint8_t *buf, size_t n, struct frame *fr, size_t *used);

/* Write the 9-byte header for a frame. */
void frame_hdr(uint8_t hdr[FRAME_HDR], uint8_t type, uint32_t stream, uint32_t len);

/* TLV writer over a caller-owned fixed buffer; err is set on overflow and all
 * later puts are ignored, so callers check once at the end. */
struct tlv_w {
	uint8_t *buf;
	size_t len, cap;
	int err;
};
void tlv_init(struct tlv_w *w, uint8_t *buf, size_t cap);
void tlv_put(struct tlv_w *w, uint8_t tag, const void *val, size_t len);
void tlv_put_str(struct tlv_w *w, uint8_t tag, const char *s);
void tlv_put_u32(struct tlv_w *w, uint8_t tag, uint32_t v);
void tlv_put_u64(struct tlv_w *w, uint8_t tag, uint64_t v);

/* TLV reader.  tlv_next returns 1 with the next item, 0 at a clean end, -1
 * when the rest is malformed (truncated item).  Unknown tags are returned
 * too: readers skip what they do not know. */
struct tlv_r {
	const uint8_t *p;
	size_t n;
};
void tlv_rinit(struct tlv_r *r, const uint8_t *p, size_t n);
int tlv_next(struct tlv_r *r, uint8_t *tag, const uint8_t **val, uint32_t *len);
/* Decode fixed-size values; return -1 when len is wrong. */
int tlv_u32(const uint8_t *val, uint32_t len, uint32_t *out);
int tlv_u64(const uint8_t *val, uint32_t len, uint64_t *out);
/* Copy a string value into dst (NUL-terminated).  -1 if it does not fit or
 * contains a NUL byte (a NUL can never be part of a path, arg or env). */
int tlv_str(const uint8_t *val, uint32_t len, char *dst, size_t dstsz);

uint32_t get_le32(const uint8_t *p);
void put_le32(uint8_t *p, uint32_t v);
uint64_t get_le64(const uint8_t *p);
void put_le64(uint8_t *p, uint64_t v);

#endif
