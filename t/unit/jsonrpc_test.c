/* jsonrpc_test.c - unit tests of lib/jsonrpc.c: the line splitter (its cap:
 * an oversized line is reported once and never held), the classifier
 * (request, notification, response, -32700, -32600 with a batch among
 * them) and the writers.  Built by t/run-unit with ASan + UBSan. */
#include "../../lib/jsonrpc.c" /* self-contained: t/run-unit links frame+util only */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"

struct seen {
	int n, over;
	size_t last_n;
	char lines[8][64];
};

static int collect(void *arg, const char *line, size_t n, int oversized)
{
	struct seen *s = arg;

	if (oversized) {
		s->over++;
		s->last_n = n;
		snprintf(s->lines[s->n++ % 8], 64, "<over %zu>", n);
		return 0;
	}
	snprintf(s->lines[s->n++ % 8], 64, "%s", line);
	s->last_n = n;
	return 0;
}

static enum rpc_kind kind_of(const char *s, int *code)
{
	struct rpc_msg m;
	enum rpc_kind k = rpc_parse(s, strlen(s), &m);

	*code = m.code;
	rpc_msg_free(&m);
	return k;
}

int main(void)
{
	struct rpc_lines l = { .max = 16 };
	struct seen s = { 0 };
	struct rpc_msg m;
	json_t *j, *id;
	const char *cl;
	char *line;
	size_t n;
	int code;

	/* splitting */
	rpc_lines_feed(&l, "ab\ncd", 5, collect, &s);
	ok(s.n == 1 && !strcmp(s.lines[0], "ab"), "a complete line is delivered, the rest kept");
	rpc_lines_feed(&l, "e\r\n\n", 4, collect, &s);
	ok(s.n == 3 && !strcmp(s.lines[1], "cde") && !strcmp(s.lines[2], ""),
	   "a line split over two feeds joins; CR dropped; an empty line is a line");
	rpc_lines_feed(&l, "0123456789abcdef", 16, collect, &s);
	rpc_lines_feed(&l, "\n", 1, collect, &s);
	ok(s.n == 4 && s.over == 0 && !strcmp(s.lines[3], "0123456789abcdef"), "exactly max bytes is taken");
	for (int i = 0; i < 1000; i++)
		rpc_lines_feed(&l, "0123456789", 10, collect, &s);
	ok(l.cap <= 17, "past the cap nothing more is buffered (cap %zu)", l.cap);
	rpc_lines_feed(&l, "xyz\nok\n", 7, collect, &s);
	ok(s.over == 1 && !strcmp(s.lines[4], "<over 10003>") && !strcmp(s.lines[5], "ok"),
	   "an oversized line is reported once with its length; the next line is whole");
	rpc_lines_feed(&l, "tail", 4, collect, &s);
	rpc_lines_end(&l, collect, &s);
	ok(s.n == 7 && !strcmp(s.lines[6], "tail"), "a last line without newline is delivered at the end");
	rpc_lines_free(&l);

	/* classifying */
	ok(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}", &code) == RPC_REQUEST, "a request");
	ok(kind_of("{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"x\",\"params\":{}}", &code) == RPC_REQUEST,
	   "a request with a string id and params");
	ok(kind_of("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", &code) == RPC_NOTIFICATION,
	   "a notification (no id)");
	ok(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}", &code) == RPC_RESPONSE, "a response");
	ok(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1,\"message\":\"m\"}}", &code) == RPC_RESPONSE,
	   "an error response");
	ok(kind_of("not json", &code) == RPC_INVALID && code == RPC_PARSE_ERROR, "garbage: -32700");
	ok(kind_of("{\"a\":1,\"a\":2}", &code) == RPC_INVALID && code == RPC_PARSE_ERROR,
	   "a duplicate key: -32700");
	ok(kind_of("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", &code) == RPC_INVALID &&
	   code == RPC_INVALID_REQUEST, "a batch: -32600");
	ok(kind_of("7", &code) == RPC_INVALID && code == RPC_INVALID_REQUEST, "a scalar: -32600");
	ok(kind_of("{\"id\":1,\"method\":\"ping\"}", &code) == RPC_INVALID && code == RPC_INVALID_REQUEST,
	   "no jsonrpc member: -32600");
	ok(kind_of("{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", &code) == RPC_INVALID, "jsonrpc 1.0: -32600");
	ok(kind_of("{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", &code) == RPC_INVALID,
	   "a null id: -32600 (MCP ids are strings or integers)");
	ok(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", &code) == RPC_INVALID, "a real id: -32600");
	ok(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":7}", &code) == RPC_INVALID, "a method not a string");
	ok(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\"}", &code) == RPC_INVALID, "an empty method");
	ok(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":3}", &code) == RPC_INVALID,
	   "params neither object nor array");
	ok(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{},\"error\":{}}", &code) == RPC_INVALID,
	   "result and error at once");
	ok(kind_of("{\"jsonrpc\":\"2.0\",\"result\":{}}", &code) == RPC_INVALID, "a response without id");
	ok(kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"extra\":1}", &code) == RPC_INVALID,
	   "an unknown member");
	cl = "{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":7}";
	rpc_parse(cl, strlen(cl), &m);
	ok(m.kind == RPC_INVALID && json_integer_value(m.id) == 42 && strstr(m.why, "method"),
	   "an invalid request keeps its id for the error, with a reason: %s", m.why);
	rpc_msg_free(&m);
	cl = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\\u0000b\"}";
	rpc_parse(cl, strlen(cl), &m);
	ok(m.kind == RPC_INVALID && m.code == RPC_PARSE_ERROR, "a NUL in a string is refused");
	rpc_msg_free(&m);

	/* writing */
	id = json_integer(3);
	j = rpc_error(id, RPC_METHOD_NOT_FOUND, "line\nbreak", json_pack("{s:s}", "m", "x"));
	json_decref(id);
	line = rpc_line(j, &n);
	ok(line && n == strlen(line) && line[n - 1] == '\n' && !memchr(line, '\n', n - 1),
	   "a message is one line even with a newline inside: %s", line);
	ok(line && strstr(line, "\"code\":-32601") && strstr(line, "\"id\":3"), "the error has its code and id");
	free(line);
	json_decref(j);
	j = rpc_error(NULL, RPC_PARSE_ERROR, "x", NULL);
	line = rpc_line(j, &n);
	ok(line && strstr(line, "\"id\":null"), "no id: null");
	free(line);
	json_decref(j);
	j = rpc_notification("notifications/message", json_pack("{s:s}", "level", "info"));
	line = rpc_line(j, &n);
	ok(line && strstr(line, "\"method\":\"notifications/message\"") && !strstr(line, "\"id\""),
	   "a notification has no id");
	free(line);
	json_decref(j);
	return tap_done();
}
