"""A per-trial certificate authority for the egress gateway.

The gateway terminates TLS for brokered hosts (it must see the request to swap
placeholders in), so the sandbox trusts this CA and nothing else signed by it
exists: a fresh CA per trial, its key only in this process's memory, valid for
a day. Leaf certificates are made on demand, one per host, and cached.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import tempfile
import threading
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_LEEWAY = dt.timedelta(hours=1)  # tolerate a sandbox clock slightly behind ours
_LIFETIME = dt.timedelta(days=1)


class CertificateAuthority:
    def __init__(self, name: str = "Proctor trial CA") -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        # One key for every leaf: generating a key per host buys nothing, since
        # all leaves live and die with this CA in this process.
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.timezone.utc)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        ski = x509.SubjectKeyIdentifier.from_public_key(self._key.public_key())
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _LEEWAY).not_valid_after(now + _LIFETIME + _LEEWAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=False, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False), critical=True)
            .add_extension(ski, critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.cert_pem: bytes = self._cert.public_bytes(serialization.Encoding.PEM)
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._lock = threading.Lock()

    def leaf(self, host: str) -> x509.Certificate:
        """A server certificate for `host` (a DNS name or an IP address)."""
        try:
            san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            san = x509.DNSName(host)
        now = dt.datetime.now(dt.timezone.utc)
        public = self._leaf_key.public_key()
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key())
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
            .issuer_name(self._cert.subject)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _LEEWAY).not_valid_after(now + _LIFETIME)
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(aki, critical=False)
            .sign(self._key, hashes.SHA256())
        )

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context presenting a leaf for `host`; cached per host."""
        host = host.lower()
        with self._lock:
            if host in self._contexts:
                return self._contexts[host]
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            # The gateway speaks HTTP/1.1 only: clients offering h2 must fall back.
            ctx.set_alpn_protocols(["http/1.1"])
            key = self._leaf_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption())
            chain = self.leaf(host).public_bytes(serialization.Encoding.PEM) + self.cert_pem
            # `load_cert_chain` reads only files; they live just long enough to be loaded.
            with tempfile.TemporaryDirectory(prefix="proctor-ca-") as folder:
                (Path(folder) / "key.pem").write_bytes(key)
                (Path(folder) / "chain.pem").write_bytes(chain)
                ctx.load_cert_chain(Path(folder) / "chain.pem", Path(folder) / "key.pem")
            self._contexts[host] = ctx
            return ctx
