"""A throwaway certificate authority for the TLS tests, made in the test with `cryptography`.

`CertificateAuthority.create(dir)` writes a self-signed CA certificate (`ca.pem`, what clients
trust); `issue(name, hosts)` writes a PEM keystore for the broker: the unencrypted PKCS#8 key,
its certificate signed by the CA (subjectAltName = `hosts`, IP addresses or DNS names) and the
CA certificate, the layout Kafka reads with ``ssl.keystore.type=PEM``.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Certificates valid from a day ago (clock skew) for a day: they exist for one test session.
_VALIDITY = datetime.timedelta(days=1)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _alt_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


@dataclass(frozen=True)
class CertificateAuthority:
    directory: Path
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    @property
    def ca_pem(self) -> Path:
        """The CA certificate: what a client puts in ``ssl.ca.location``."""
        return self.directory / "ca.pem"

    @classmethod
    def create(
        cls, directory: Path, common_name: str = "zdict-sidecar test CA"
    ) -> CertificateAuthority:
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _VALIDITY)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        authority = cls(directory, key, certificate)
        authority.ca_pem.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        return authority

    def issue(self, name: str, hosts: list[str], *, client: bool = False) -> Path:
        """A PEM keystore (key, certificate, CA) for a server known as `hosts`; its path.
        With `client`, the certificate serves as a TLS client's too."""
        usages = [ExtendedKeyUsageOID.SERVER_AUTH]
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(hosts[0]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _VALIDITY)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.SubjectAlternativeName([_alt_name(h) for h in hosts]), critical=False
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        path = self.directory / f"{name}.keystore.pem"
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            + certificate.public_bytes(serialization.Encoding.PEM)
            + self.certificate.public_bytes(serialization.Encoding.PEM)
        )
        path.chmod(0o600)
        return path
