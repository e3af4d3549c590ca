"""A throwaway certificate authority for `minibroker cluster up --tls`.

Owns: creating, under a cluster's `tls/` directory, a CA certificate
(`ca.pem`, the clients' trust store), one server certificate for every
address of the cluster (`server.pem`, `server.key` 0600) and a Kafka-style
client properties file (`client.properties`). The CA's private key is
never written: it signs the server certificate and is dropped, so nothing
on disk can mint more certificates trusted by this cluster. Must not know
how the files are used (minibroker.net.tls loads them).

Needs the `cryptography` package (the `tls` extra): the standard library
can use certificates but cannot make them.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import socket

from minibroker.net.credentials import write_private_file

VALID_DAYS = 825     # the longest validity clients such as macOS accept for a server certificate


class LocalCAError(RuntimeError):
    """The certificates could not be made (usually: `cryptography` is not installed)."""


def create_cluster_certificates(tls_dir: str, hosts: list[str], client_properties: dict[str, str],
                                now: datetime.datetime | None = None) -> None:
    """Write ca.pem, server.pem, server.key (0600) and client.properties into `tls_dir`;
    the server certificate names every one of `hosts` plus localhost and this host's name."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise LocalCAError("`cluster up --tls` needs the cryptography package: "
                           "pip install 'minibroker[tls]' (or pip install cryptography)") from None
    now = now or datetime.datetime.now(datetime.UTC)
    os.makedirs(tls_dir, mode=0o700, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "minibroker local cluster CA"),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "minibroker")])
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                            content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False,
                                            encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
               .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for h in sorted(set(hosts) | {"localhost", "127.0.0.1", socket.gethostname()}):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "minibroker")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    write_private_file(os.path.join(tls_dir, "server.key"), key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    _write_public(os.path.join(tls_dir, "server.pem"), cert.public_bytes(serialization.Encoding.PEM)
                  + ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_public(os.path.join(tls_dir, "ca.pem"), ca_cert.public_bytes(serialization.Encoding.PEM))
    lines = ["# Client settings for this cluster: minibroker ... --command-config " +
             os.path.join(tls_dir, "client.properties")]
    lines += [f"{k}={v}" for k, v in client_properties.items()]
    _write_public(os.path.join(tls_dir, "client.properties"), ("\n".join(lines) + "\n").encode())


def _write_public(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
