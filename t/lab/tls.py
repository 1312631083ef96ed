#!/usr/bin/env python3
"""t/lab/tls.py - the HTTPS listener of the sealed test world (t/lab/lab.sh).

tls.py LOG ADDR CERT KEY: HTTPS on ADDR:443 with CERT/KEY (signed by the
lab's own test CA, made by lab.sh with openssl; names pkg.test, other.test,
*.wild.test).  Any request gets HTTP 200 with the body "lab tls ADDR"; each
connection is logged to LOG as "tls ADDR PEER".  Runs until killed.

It is also a package index of one package (PEP 503 simple API) for pip:
GET /simple/labpkg/ lists labpkg-1.0-py3-none-any.whl under
https://pkg.test/packages/, which answers 302 to the same file under
https://files.test/files/: a download that needs a second name, as a real
index's CDN does.  The wheel is made here, in memory (stdlib zipfile).
"""
import base64
import hashlib
import io
import socket
import ssl
import sys
import threading
import zipfile

WHEEL = "labpkg-1.0-py3-none-any.whl"


def make_wheel():
    files = {
        "labpkg/__init__.py": b'WHERE = "lab index"\n',
        "labpkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: labpkg\nVersion: 1.0\n",
        "labpkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: isopod-lab\n"
                                      b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += "%s,sha256=%s,%d\n" % (name, digest, len(data))
    record += "labpkg-1.0.dist-info/RECORD,,\n"
    files["labpkg-1.0.dist-info/RECORD"] = record.encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()


def answer(req, addr, wheel):
    """(status line, headers, body) for the request head req."""
    lines = req.split(b"\r\n")
    parts = lines[0].split(b" ")
    path = parts[1].decode("latin-1") if len(parts) > 2 else "/"
    host = ""
    for h in lines[1:]:
        if h.lower().startswith(b"host:"):
            host = h[5:].strip().decode("latin-1").split(":")[0].lower()
    if path.rstrip("/") == "/simple/labpkg" and host == "pkg.test":
        body = ('<html><body><a href="https://pkg.test/packages/%s">%s</a></body></html>\n'
                % (WHEEL, WHEEL)).encode()
        return b"200 OK", b"Content-Type: text/html\r\n", body
    if path == "/packages/" + WHEEL and host == "pkg.test":
        return (b"302 Found", ("Location: https://files.test/files/%s\r\n" % WHEEL).encode(),
                b"")
    if path == "/files/" + WHEEL and host == "files.test":
        return b"200 OK", b"Content-Type: application/octet-stream\r\n", wheel
    return b"200 OK", b"Content-Type: text/plain\r\n", ("lab tls %s\n" % addr).encode()


def serve(conn, log, addr, peer, wheel):
    try:
        conn.settimeout(5)
        req = b""
        while b"\r\n\r\n" not in req and len(req) < 8192:
            chunk = conn.recv(4096)
            if not chunk:
                break
            req += chunk
        status, headers, body = answer(req, addr, wheel)
        conn.sendall(b"HTTP/1.0 " + status + b"\r\n" + headers + b"Content-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
    except (OSError, ssl.SSLError):
        pass
    finally:
        conn.close()


def main():
    log, addr, cert, key = sys.argv[1:5]
    wheel = make_wheel()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, 443))
    s.listen(64)
    while True:
        c, peer = s.accept()
        with open(log, "a") as f:
            f.write("tls %s %s\n" % (addr, peer[0]))
        try:
            c.settimeout(5)
            t = ctx.wrap_socket(c, server_side=True)
        except (OSError, ssl.SSLError):
            c.close()
            continue
        threading.Thread(target=serve, args=(t, log, addr, peer[0], wheel), daemon=True).start()


if __name__ == "__main__":
    main()
