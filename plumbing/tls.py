"""The appliance's TLS certificate: the operator's, or one made at the first start and kept.

``strata up --tls`` serves the API, the console and S3 over TLS. Without ``--tls-cert`` and
``--tls-key`` it uses ``DATA_DIR/tls/cert.pem`` and ``key.pem``, made once (a self-signed
certificate for the names and addresses the appliance answers on) and reused on every later
start, so clients that trust it once keep trusting it. Clients trust it with the certificate
file as their CA bundle (``boto3 ... verify=``, ``requests ... verify=``, ``curl --cacert``)
or by comparing its SHA-256 fingerprint. :func:`trust_bundle` writes the system's CAs plus
this certificate, for the appliance's own processes (which call the gateway and the API
over TLS and still reach outside S3 targets).
"""
from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from plumbing.atomic import write_atomic

SYSTEM_CAS = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
VALID_DAYS = 3650


class TlsError(Exception):
    """A certificate or key the operator gave cannot be used; the message says why."""


@dataclass(frozen=True)
class Certificate:
    """The certificate and key the daemons serve with, and how clients trust them."""
    cert: str
    key: str
    fingerprint: str  # SHA-256 of the DER certificate, "AB:CD:..."
    generated: bool  # made by Strata (self-signed), not given by the operator


def fingerprint(cert_path: str | os.PathLike) -> str:
    """SHA-256 fingerprint of the first certificate in a PEM file, as ``AB:CD:...``."""
    der = ssl.PEM_cert_to_DER_cert(Path(cert_path).read_text())
    digest = hashlib.sha256(der).hexdigest().upper()
    return ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))


def _names(hosts: list[str]) -> list:
    from cryptography import x509

    dns, ips = {"localhost", socket.gethostname()}, {"127.0.0.1", "::1"}
    for host in hosts:
        host = (host or "").strip("[]")
        if not host or host in ("0.0.0.0", "::"):
            continue
        try:
            ips.add(str(ipaddress.ip_address(host)))
        except ValueError:
            dns.add(host)
    return ([x509.DNSName(n) for n in sorted(dns)]
            + [x509.IPAddress(ipaddress.ip_address(a)) for a in sorted(ips)])


def make_self_signed(cert_path: Path, key_path: Path, hosts: list[str]) -> None:
    """A self-signed certificate (its own CA, so a client can use the file as a CA bundle)
    for localhost, this host's name, loopback and ``hosts`` (names, addresses, or
    ``*.domain`` for virtual-host-style S3)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Strata appliance"),
                      x509.NameAttribute(NameOID.COMMON_NAME, socket.gethostname()[:64])])
    now = datetime.datetime.now(datetime.timezone.utc)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName(_names(hosts)), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(ski, critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski),
                           critical=False)
            .sign(key, hashes.SHA256()))
    write_atomic(key_path, key.private_bytes(serialization.Encoding.PEM,
                                             serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()), mode=0o600)
    write_atomic(cert_path, cert.public_bytes(serialization.Encoding.PEM), mode=0o644)


def _check_pair(cert: str, key: str) -> None:
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(f"cannot use certificate {cert} with key {key}: {exc}") from None


def certificate(data_dir: Path, cert: str | None = None, key: str | None = None,
                hosts: list[str] | None = None) -> Certificate:
    """The operator's ``cert`` and ``key`` (checked to load together), or the appliance's
    own in ``data_dir/tls`` (made on the first call, reused after)."""
    if bool(cert) != bool(key):
        raise TlsError("give both --tls-cert and --tls-key, or neither (Strata then makes "
                       "its own certificate)")
    generated = not cert
    if generated:
        folder = Path(data_dir) / "tls"
        cert, key = str(folder / "cert.pem"), str(folder / "key.pem")
        if not (os.path.exists(cert) and os.path.exists(key)):
            make_self_signed(Path(cert), Path(key), hosts or [])
    cert, key = os.path.abspath(cert), os.path.abspath(key)
    _check_pair(cert, key)
    return Certificate(cert=cert, key=key, fingerprint=fingerprint(cert), generated=generated)


def trust_bundle(path: Path, cert: str) -> str:
    """Write the system's CAs followed by ``cert`` to ``path``; return its path."""
    parts = [Path(p).read_text() for p in SYSTEM_CAS[:1] if os.path.exists(p)]
    try:
        import certifi  # the CAs requests and botocore use when no bundle is named
        parts = parts or [Path(certifi.where()).read_text()]
    except ImportError:
        pass
    parts.append(Path(cert).read_text())
    write_atomic(path, "\n".join(p.rstrip("\n") for p in parts) + "\n", mode=0o644)
    return str(path)
