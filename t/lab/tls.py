#!/usr/bin/env python3
"""t/lab/tls.py - the HTTPS listener of the sealed test world (t/lab/lab.sh).

tls.py LOG ADDR CERT KEY: HTTPS on ADDR:443 with CERT/KEY (signed by the
lab's own test CA, made by lab.sh with openssl; names pkg.test, other.test,
*.wild.test).  Any request gets HTTP 200 with the body "lab tls ADDR"; each
connection is logged to LOG as "tls ADDR PEER".  Runs until killed.
"""
import socket
import ssl
import sys
import threading


def serve(conn, log, addr, peer):
    try:
        conn.settimeout(5)
        req = b""
        while b"\r\n\r\n" not in req and len(req) < 8192:
            chunk = conn.recv(4096)
            if not chunk:
                break
            req += chunk
        body = ("lab tls %s\n" % addr).encode()
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
    except (OSError, ssl.SSLError):
        pass
    finally:
        conn.close()


def main():
    log, addr, cert, key = sys.argv[1:5]
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
        threading.Thread(target=serve, args=(t, log, addr, peer[0]), daemon=True).start()


if __name__ == "__main__":
    main()
