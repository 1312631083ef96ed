#!/usr/bin/env python3
"""t/oci/liar.py ADDR PORT UPSTREAM MODEFILE - a registry that lies.

Serves GET and HEAD of /v2/... on ADDR:PORT from the real registry UPSTREAM
(host:port), altered as the first line of MODEFILE says (read at each
request, so one liar serves every test):
  honest              pass everything through
  flip DIGEST         the blob DIGEST with one byte changed (same length)
  truncate DIGEST     the blob DIGEST cut to half its length (Content-Length
                      says the half: what a registry with a torn file sends)
  orphan              every manifest fetched by tag names (subject) a parent
                      manifest that does not exist
  auth VALUE          honest, but only to requests whose Authorization header
                      is VALUE (else 401)
  trickle [DIGEST]    every body (or only the blob DIGEST's) one byte per
                      half second (never a 60 s stall: only the caller's
                      deadline ends it; at most 120 bytes, then the
                      connection is dropped)
  redirect KIND       every manifest (KIND manifests: refused, a manifest
                      comes from the registry named) or blob (KIND blobs:
                      followed, as storage is) a 302 to the same path on
                      UPSTREAM
Each request is logged to stderr."""
import http.client
import http.server
import json
import sys
import time

ADDR, PORT, UPSTREAM, MODEFILE = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]


def mode():
    try:
        with open(MODEFILE) as f:
            return (f.readline().split() or ["honest"])
    except OSError:
        return ["honest"]


class Liar(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def fetch(self):
        c = http.client.HTTPConnection(UPSTREAM, timeout=30)
        hdrs = {k: v for k, v in self.headers.items() if k.lower() in ("accept", "authorization")}
        c.request("GET", self.path, headers=hdrs)
        r = c.getresponse()
        body = r.read()
        c.close()
        return r, body

    def answer(self, head):
        m = mode()
        if m[0] == "auth" and self.headers.get("Authorization") != " ".join(m[1:]):
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="liar"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if m[0] == "redirect" and "/" + m[1] + "/" in self.path:
            self.send_response(302)
            self.send_header("Location", "http://" + UPSTREAM + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        r, body = self.fetch()
        ctype = r.getheader("Content-Type", "application/octet-stream")
        if r.status == 200:
            if m[0] == "flip" and self.path.endswith("/blobs/" + m[1]):
                body = body[:-1] + bytes([body[-1] ^ 0xFF])
            elif m[0] == "truncate" and self.path.endswith("/blobs/" + m[1]):
                body = body[: len(body) // 2]
            elif m[0] == "orphan" and "/manifests/" in self.path and "sha256:" not in self.path:
                j = json.loads(body)
                j["subject"]["digest"] = "sha256:" + "0" * 64
                body = json.dumps(j, separators=(",", ":"), sort_keys=True).encode()
        self.send_response(r.status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if head:
            return
        if m[0] == "trickle" and (len(m) == 1 or self.path.endswith("/blobs/" + m[1])):
            for b in body[:120]:
                self.wfile.write(bytes([b]))
                self.wfile.flush()
                time.sleep(0.5)
            self.close_connection = True
            return
        self.wfile.write(body)

    def do_GET(self):
        self.answer(False)

    def do_HEAD(self):
        self.answer(True)


http.server.ThreadingHTTPServer((ADDR, PORT), Liar).serve_forever()
