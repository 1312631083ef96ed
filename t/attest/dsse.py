#!/usr/bin/python3
"""t/attest/dsse.py - an independent DSSE implementation for isopod-attest's tests.

PAE is written here from the DSSE spec (protocol.md), not taken from isopod;
Ed25519 comes from Debian's python3-securesystemslib (0.26: it has no DSSE
module, so its SSlibKey verifies the signature over the PAE computed here) and
python3-cryptography.

  dsse.py envelope SEEDFILE PAYLOADFILE     the envelope of PAYLOADFILE's bytes
  dsse.py verify ENVELOPE PUBFILE           exit 0 when a signature verifies
                                            with both libraries; prints the payload
  dsse.py resign ENVELOPE SEEDFILE TYPE     the same payload signed with another
                                            payloadType (a valid signature)
  dsse.py flip ENVELOPE payload|sig         one byte of the decoded field flipped
"""
import base64
import hashlib
import json
import sys

from cryptography.hazmat.primitives.asymmetric.ed25519 import (Ed25519PrivateKey,
                                                               Ed25519PublicKey)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from securesystemslib.signer import Signature, SSlibKey

INTOTO = "application/vnd.in-toto+json"


def pae(ptype: bytes, body: bytes) -> bytes:
    return b"DSSEv1 %d %s %d %s" % (len(ptype), ptype, len(body), body)


def b64d(s: str) -> bytes:
    s = s.replace("-", "+").replace("_", "/")
    return base64.b64decode(s + "=" * (-len(s) % 4), validate=True)


def read_hex(path: str) -> bytes:
    with open(path, encoding="ascii") as f:
        return bytes.fromhex(f.read().strip())


def envelope(seed: bytes, body: bytes, ptype: str) -> str:
    sk = Ed25519PrivateKey.from_private_bytes(seed)
    pk = sk.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    sig = sk.sign(pae(ptype.encode(), body))
    env = {"payload": base64.b64encode(body).decode(), "payloadType": ptype,
           "signatures": [{"keyid": hashlib.sha256(pk).hexdigest(),
                           "sig": base64.b64encode(sig).decode()}]}
    return json.dumps(env, separators=(",", ":")) + "\n"


def verify(env: dict, pub: bytes) -> bool:
    body = b64d(env["payload"])
    msg = pae(env["payloadType"].encode(), body)
    kid = hashlib.sha256(pub).hexdigest()  # securesystemslib wants a hex key id
    key = SSlibKey(kid, "ed25519", "ed25519", {"public": pub.hex()})
    for s in env["signatures"]:
        sig = b64d(s["sig"])
        try:
            key.verify_signature(Signature(kid, sig.hex()), msg)
            Ed25519PublicKey.from_public_bytes(pub).verify(sig, msg)
            return True
        except Exception:  # pylint: disable=broad-except
            continue
    return False


def main() -> int:
    cmd = sys.argv[1]
    if cmd == "envelope":
        with open(sys.argv[3], "rb") as f:
            sys.stdout.write(envelope(read_hex(sys.argv[2]), f.read(), INTOTO))
        return 0
    with open(sys.argv[2], encoding="utf-8") as f:
        env = json.load(f)
    if cmd == "verify":
        if not verify(env, read_hex(sys.argv[3])):
            print("dsse.py: no signature verifies", file=sys.stderr)
            return 1
        sys.stdout.write(b64d(env["payload"]).decode())
        return 0
    if cmd == "resign":
        sys.stdout.write(envelope(read_hex(sys.argv[3]), b64d(env["payload"]), sys.argv[4]))
        return 0
    if cmd == "flip":
        field = sys.argv[3]
        if field == "payload":
            raw = bytearray(b64d(env["payload"]))
        else:
            raw = bytearray(b64d(env["signatures"][0]["sig"]))
        raw[len(raw) // 2] ^= 0x01
        enc = base64.b64encode(bytes(raw)).decode()
        if field == "payload":
            env["payload"] = enc
        else:
            env["signatures"][0]["sig"] = enc
        sys.stdout.write(json.dumps(env, separators=(",", ":")) + "\n")
        return 0
    print("dsse.py: unknown command", file=sys.stderr)
    return 100


if __name__ == "__main__":
    sys.exit(main())
