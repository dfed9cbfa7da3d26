"""An RFC 3161 timestamp authority on 127.0.0.1 for the `verify-app` tests: rcodesign asks it
for a token over the CMS signature (`signed_image(..., timestamp_url=tsa.url)`), as it asks
Apple's. Its chain (a root and a leaf with the critical timeStamping usage) is made here;
`gen_time` is the time it vouches for, so a test can timestamp in the past."""

from __future__ import annotations

import datetime as dt
import hashlib
import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from asn1crypto import algos, cms, core, tsp
from asn1crypto import x509 as asn1_x509
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NOW = dt.datetime.now(dt.UTC)
DAY = dt.timedelta(days=1)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


class LocalTsa:
    """A timestamp authority: `root` (PEM) is what a policy trusts for it."""

    def __init__(self, folder: Path, *, gen_time: dt.datetime = NOW,
                 imprint_over: bytes | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        root_key = rsa.generate_private_key(65537, 2048)
        root = (x509.CertificateBuilder().subject_name(_name("test TSA root"))
                .issuer_name(_name("test TSA root")).public_key(root_key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(NOW - 3650 * DAY).not_valid_after(NOW + 3650 * DAY)
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(root_key, hashes.SHA256()))
        self.key = rsa.generate_private_key(65537, 2048)
        self.cert = (x509.CertificateBuilder().subject_name(_name("test TSA"))
                     .issuer_name(root.subject).public_key(self.key.public_key())
                     .serial_number(x509.random_serial_number())
                     .not_valid_before(NOW - 3650 * DAY).not_valid_after(NOW + 3650 * DAY)
                     .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.TIME_STAMPING]),
                                    critical=True)
                     .sign(root_key, hashes.SHA256()))
        self.root = folder / "tsa-root.pem"
        self.root.write_bytes(root.public_bytes(serialization.Encoding.PEM))
        self.gen_time = gen_time
        self.imprint_over = imprint_over  # a lying authority: an imprint of other bytes
        self.url = ""

    def token(self, request: bytes) -> bytes:
        """The TimeStampResp to a TimeStampReq (DER)."""
        asked = tsp.TimeStampReq.load(request)
        imprint = asked["message_imprint"]
        if self.imprint_over is not None:
            imprint = tsp.MessageImprint({"hash_algorithm": {"algorithm": "sha256"},
                                          "hashed_message": hashlib.sha256(
                                              self.imprint_over).digest()})
        info = tsp.TSTInfo({
            "version": "v1", "policy": "1.3.6.1.4.1.99999.1",
            "message_imprint": imprint,
            "serial_number": x509.random_serial_number(),
            "gen_time": self.gen_time.replace(microsecond=0),
            "nonce": asked["nonce"].native if asked["nonce"].native is not None else None,
        })
        content = info.dump()
        certificate = asn1_x509.Certificate.load(self.cert.public_bytes(
            serialization.Encoding.DER))
        attributes = cms.CMSAttributes([
            cms.CMSAttribute({"type": "content_type", "values": ["tst_info"]}),
            cms.CMSAttribute({"type": "message_digest",
                              "values": [hashlib.sha256(content).digest()]}),
        ])
        signature = self.key.sign(b"\x31" + attributes.dump()[1:], padding.PKCS1v15(),
                                  hashes.SHA256())
        signer = cms.SignerInfo({
            "version": "v1",
            "sid": cms.SignerIdentifier({"issuer_and_serial_number": cms.IssuerAndSerialNumber(
                {"issuer": certificate.issuer, "serial_number": certificate.serial_number})}),
            "digest_algorithm": algos.DigestAlgorithm({"algorithm": "sha256"}),
            "signed_attrs": attributes,
            "signature_algorithm": algos.SignedDigestAlgorithm({"algorithm": "rsassa_pkcs1v15"}),
            "signature": signature,
        })
        signed = cms.SignedData({
            "version": "v3",
            "digest_algorithms": [algos.DigestAlgorithm({"algorithm": "sha256"})],
            "encap_content_info": {"content_type": "tst_info",
                                   "content": core.ParsableOctetString(content)},
            "certificates": [certificate],
            "signer_infos": [signer],
        })
        return tsp.TimeStampResp({
            "status": {"status": "granted"},
            "time_stamp_token": cms.ContentInfo({"content_type": "signed_data",
                                                 "content": signed}),
        }).dump()


@contextmanager
def serving(tsa: LocalTsa) -> Iterator[LocalTsa]:
    """`tsa` answering on 127.0.0.1 (its `url` set) until the block ends."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            answer = tsa.token(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/timestamp-reply")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    tsa.url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        yield tsa
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
