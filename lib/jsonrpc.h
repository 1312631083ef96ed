/* jsonrpc.h - JSON-RPC 2.0 over a byte stream, one message per line (the
 * stdio transport of the Model Context Protocol, isopod-mcp(1)).
 *
 * Two pieces, both pure (no I/O, no die): a line splitter with a cap on a
 * line's length (what is past the cap is discarded up to the newline, and
 * the line is reported as oversized, so a 100 MB line costs no memory), and
 * a classifier of one line: request, notification, response, or an error
 * the caller answers (-32700 parse error, -32600 invalid request).  The
 * bytes are the client's: everything here is bounded and returns errors. */
#ifndef ISOPOD_JSONRPC_H
#define ISOPOD_JSONRPC_H

#include <jansson.h>
#include <stddef.h>

#define RPC_PARSE_ERROR (-32700)
#define RPC_INVALID_REQUEST (-32600)
#define RPC_METHOD_NOT_FOUND (-32601)
#define RPC_INVALID_PARAMS (-32602)
#define RPC_INTERNAL_ERROR (-32603)

#define RPC_LINE_MAX_DEFAULT (4u << 20) /* 4 MiB: a message longer is refused */
#define RPC_WHY_SZ 256

/* The line splitter.  Zero it, set max (0: RPC_LINE_MAX_DEFAULT). */
struct rpc_lines {
	char *buf;
	size_t len, cap, max;
	int over;            /* the current line passed max: discarding to '\n' */
	unsigned long long over_bytes; /* its length so far */
};

/* The callback gets each complete line (without its '\n', NUL-terminated
 * in place; a trailing '\r' removed), or (oversized = 1, line NULL, n = its
 * length) once per line past the cap.  A non-zero return stops the feed
 * and is returned. */
typedef int (*rpc_line_fn)(void *arg, const char *line, size_t n, int oversized);
/* Feed n bytes.  0, the callback's non-zero return, or -1 (ENOMEM). */
int rpc_lines_feed(struct rpc_lines *l, const char *p, size_t n, rpc_line_fn fn, void *arg);
/* End of input: a last line without '\n' is delivered like the others. */
int rpc_lines_end(struct rpc_lines *l, rpc_line_fn fn, void *arg);
void rpc_lines_free(struct rpc_lines *l);

enum rpc_kind {
	RPC_REQUEST,      /* method + id: answer it */
	RPC_NOTIFICATION, /* method, no id: never answered */
	RPC_RESPONSE,     /* result or error + id: an answer to us */
	RPC_INVALID       /* answer with error code, id (or null) */
};

struct rpc_msg {
	enum rpc_kind kind;
	json_t *msg;          /* the whole message (owned; rpc_msg_free) */
	json_t *id;           /* borrowed from msg: a string or an integer; NULL */
	const char *method;   /* borrowed */
	json_t *params;       /* borrowed: an object, an array, or NULL */
	int code;             /* RPC_INVALID: RPC_PARSE_ERROR or RPC_INVALID_REQUEST */
	char why[RPC_WHY_SZ]; /* RPC_INVALID: the reason, for the error's message */
};

/* Classify one line (n bytes; need not be NUL-terminated).  Blank lines
 * are the caller's to skip.  A JSON array (a batch) is RPC_INVALID
 * -32600: the MCP revisions we speak have no batches.  Always returns
 * m->kind; free with rpc_msg_free. */
enum rpc_kind rpc_parse(const char *line, size_t n, struct rpc_msg *m);
void rpc_msg_free(struct rpc_msg *m);

/* Messages to send (new references; NULL on ENOMEM).  id may be NULL
 * (JSON null: the request's id could not be read). */
json_t *rpc_result(json_t *id, json_t *result); /* steals result */
json_t *rpc_error(json_t *id, int code, const char *message, json_t *data); /* steals data */
json_t *rpc_notification(const char *method, json_t *params); /* steals params */
/* The message as one line: compact JSON + '\n' (jansson escapes every
 * newline inside strings, so the line is one line).  malloc'd; *n its
 * length.  NULL on ENOMEM. */
char *rpc_line(const json_t *msg, size_t *n);

#endif
