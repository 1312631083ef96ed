/* jsonrpc.c - line-framed JSON-RPC 2.0 (jsonrpc.h).  The bytes come from
 * the MCP client: bounded, no die, every refusal has a reason. */
#include "jsonrpc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int deliver(struct rpc_lines *l, rpc_line_fn fn, void *arg)
{
	int r;

	if (l->over) {
		r = fn(arg, NULL, (size_t)l->over_bytes, 1);
	} else {
		if (l->len && l->buf[l->len - 1] == '\r')
			l->len--;
		l->buf[l->len] = 0;
		r = fn(arg, l->buf, l->len, 0);
	}
	l->len = 0, l->over = 0, l->over_bytes = 0;
	return r;
}

int rpc_lines_feed(struct rpc_lines *l, const char *p, size_t n, rpc_line_fn fn, void *arg)
{
	size_t max = l->max ? l->max : RPC_LINE_MAX_DEFAULT;

	while (n) {
		const char *nl = memchr(p, '\n', n);
		size_t k = nl ? (size_t)(nl - p) : n;
		int r;

		if (l->over) {
			l->over_bytes += k;
		} else if (l->len + k > max) {
			/* Past the cap the line is only counted: its bytes never
			 * reach memory, whatever its length. */
			l->over = 1;
			l->over_bytes = l->len + k;
			l->len = 0;
		} else {
			if (l->len + k + 1 > l->cap) {
				size_t c = l->cap ? l->cap : 4096;
				char *b;

				while (c < l->len + k + 1)
					c *= 2;
				if (c > max + 1)
					c = max + 1;
				if (!(b = realloc(l->buf, c))) {
					errno = ENOMEM;
					return -1;
				}
				l->buf = b, l->cap = c;
			}
			memcpy(l->buf + l->len, p, k);
			l->len += k;
		}
		if (!nl)
			break;
		p += k + 1, n -= k + 1;
		if ((r = deliver(l, fn, arg)))
			return r;
	}
	return 0;
}

int rpc_lines_end(struct rpc_lines *l, rpc_line_fn fn, void *arg)
{
	if (!l->over && !l->len)
		return 0;
	return deliver(l, fn, arg);
}

void rpc_lines_free(struct rpc_lines *l)
{
	free(l->buf);
	*l = (struct rpc_lines){ .max = l->max };
}

__attribute__((format(printf, 3, 4))) static enum rpc_kind invalid(struct rpc_msg *m, int code,
							     const char *fmt, ...)
{
	va_list ap;

	m->kind = RPC_INVALID;
	m->code = code;
	va_start(ap, fmt);
	vsnprintf(m->why, sizeof m->why, fmt, ap);
	va_end(ap);
	/* The reason quotes the client's bytes (jansson's "near '...'"): made
	 * printable ASCII, so that the error answering it always encodes. */
	for (char *c = m->why; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
			*c = '?';
	return m->kind;
}

/* A JSON-RPC id as MCP allows it: a string or an integer (not null). */
static int id_ok(const json_t *id)
{
	return json_is_string(id) || json_is_integer(id);
}

enum rpc_kind rpc_parse(const char *line, size_t n, struct rpc_msg *m)
{
	json_error_t err;
	json_t *v, *id, *method, *params;
	const char *k;
	int has_result, has_error;

	*m = (struct rpc_msg){ .kind = RPC_INVALID };
	/* JSON_DECODE_ANY: a scalar or an array is valid JSON that is no
	 * request (-32600), not a parse error. */
	m->msg = json_loadb(line, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
	if (!m->msg) {
		err.text[sizeof err.text - 1] = 0;
		return invalid(m, RPC_PARSE_ERROR, "parse error: %s", err.text);
	}
	if (json_is_array(m->msg))
		return invalid(m, RPC_INVALID_REQUEST, "%s",
			       "a JSON array (batch): this server speaks MCP revisions without batches");
	if (!json_is_object(m->msg))
		return invalid(m, RPC_INVALID_REQUEST, "%s", "not a JSON object");
	id = json_object_get(m->msg, "id");
	/* The id is echoed in the error whenever it is usable, so the client
	 * can match the refusal to its request. */
	if (id_ok(id))
		m->id = id;
	v = json_object_get(m->msg, "jsonrpc");
	if (!json_is_string(v) || strcmp(json_string_value(v), "2.0"))
		return invalid(m, RPC_INVALID_REQUEST, "%s", "\"jsonrpc\" must be \"2.0\"");
	json_object_foreach(m->msg, k, v) {
		if (strcmp(k, "jsonrpc") && strcmp(k, "id") && strcmp(k, "method") &&
		    strcmp(k, "params") && strcmp(k, "result") && strcmp(k, "error"))
			return invalid(m, RPC_INVALID_REQUEST, "unknown member \"%.64s\"", k);
	}
	method = json_object_get(m->msg, "method");
	params = json_object_get(m->msg, "params");
	has_result = json_object_get(m->msg, "result") != NULL;
	has_error = json_object_get(m->msg, "error") != NULL;
	if (id && !id_ok(id))
		return invalid(m, RPC_INVALID_REQUEST, "%s", "\"id\" must be a string or an integer");
	if (!method) {
		if (!id || has_result == has_error || params)
			return invalid(m, RPC_INVALID_REQUEST, "%s",
				       "neither a request (method) nor a response (id and result or error)");
		if (has_error && !json_is_object(json_object_get(m->msg, "error")))
			return invalid(m, RPC_INVALID_REQUEST, "%s", "\"error\" must be an object");
		m->kind = RPC_RESPONSE;
		return m->kind;
	}
	if (!json_is_string(method) || !json_string_length(method))
		return invalid(m, RPC_INVALID_REQUEST, "%s", "\"method\" must be a non-empty string");
	if (has_result || has_error)
		return invalid(m, RPC_INVALID_REQUEST, "%s", "a request has no \"result\" or \"error\"");
	if (params && !json_is_object(params) && !json_is_array(params))
		return invalid(m, RPC_INVALID_REQUEST, "%s", "\"params\" must be an object or an array");
	m->method = json_string_value(method);
	m->params = params;
	m->kind = id ? RPC_REQUEST : RPC_NOTIFICATION;
	return m->kind;
}

void rpc_msg_free(struct rpc_msg *m)
{
	json_decref(m->msg);
	*m = (struct rpc_msg){ .kind = RPC_INVALID };
}

json_t *rpc_result(json_t *id, json_t *result)
{
	if (!result)
		return NULL;
	return json_pack("{s:s, s:O?, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
}

json_t *rpc_error(json_t *id, int code, const char *message, json_t *data)
{
	json_t *e = json_pack("{s:i, s:s}", "code", code, "message", message);

	if (!e) {
		json_decref(data);
		return NULL;
	}
	if (data)
		json_object_set_new(e, "data", data);
	return json_pack("{s:s, s:O?, s:o}", "jsonrpc", "2.0", "id", id, "error", e);
}

json_t *rpc_notification(const char *method, json_t *params)
{
	if (params)
		return json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", method, "params",
				 params);
	return json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method", method);
}

char *rpc_line(const json_t *msg, size_t *n)
{
	char *s, *t;
	size_t k;

	if (!msg || !(s = json_dumps(msg, JSON_COMPACT | JSON_PRESERVE_ORDER)))
		return NULL;
	k = strlen(s);
	if (!(t = realloc(s, k + 2))) {
		free(s);
		return NULL;
	}
	s = t;
	s[k] = '\n', s[k + 1] = 0;
	*n = k + 1;
	return s;
}
