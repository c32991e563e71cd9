"""The files of a secure cluster (``isrsim cluster up --secure``, docs/security.md): a CA, a certificate per
node, SCRAM users, each node's security settings, and ``client.properties``.

::

    <root>/security/ca.pem                 the CA certificate (public: clients trust it)
    <root>/security/ca-key.pem             the CA's private key (0600)
    <node dir>/security/keystore.pem       the node's private key and certificate, signed by the CA (0600)
    <data dir>/security/credentials.json   SCRAM credentials of `admin` and `broker`, salted (0600)
    <root>/client.properties               librdkafka's keys for the super user `admin` (0600)

Like ``kafka-storage format --add-scram``, the credentials are written into each node's data directory
before the node first starts. Every secret file is created with mode 0600; the node configs, which hold
the `broker` user's password in ``sasl.jaas.config``, too.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from broker import CredentialStore, ScramCredential, write_secret_file
from protocol import CLIENT_PROPERTIES, CREDENTIALS_FILE, SECURITY_DIR

ADMIN_USER = "admin"
BROKER_USER = "broker"
SECURE_PROTOCOL = "SASL_SSL"
MECHANISM = "SCRAM-SHA-256"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SUPER_USERS = f"User:{ADMIN_USER};User:{BROKER_USER}"
CERT_DAYS = 825
DEFAULT_HOSTS = ("localhost", "127.0.0.1")


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "isrsim"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass
class CertificateAuthority:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @classmethod
    def create(cls, common_name: str = "isrsim CA") -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
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
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    def issue(self, common_name: str, hosts: Sequence[str]) -> bytes:
        """A PEM keystore (private key, then certificate and the CA's) for a node named by ``hosts``
        (DNS names and IP addresses in its subjectAltName), for TLS servers and clients alike."""
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = []
        for host in dict.fromkeys(hosts):
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [x509.oid.ExtendedKeyUsageOID.SERVER_AUTH, x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        return _key_pem(key) + _cert_pem(cert) + _cert_pem(self.cert)

    def save(self, directory: Path, key_directory: Path | None = None) -> Path:
        """``ca.pem`` (0644) in ``directory`` and ``ca-key.pem`` (0600) in ``key_directory`` (by default
        the same), so that whatever reads the certificate need not see the key; returns the certificate's
        path."""
        directory.mkdir(parents=True, exist_ok=True)
        write_secret_file((key_directory or directory) / "ca-key.pem", _key_pem(self.key).decode())
        path = directory / "ca.pem"
        path.write_bytes(_cert_pem(self.cert))
        return path


def jaas_config(username: str, password: str) -> str:
    """Kafka's ``sasl.jaas.config`` for SCRAM (quotes and backslashes in the values escaped)."""

    def quoted(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"')

    username, password = quoted(username), quoted(password)
    return (
        f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{username}" '
        f'password="{password}";'
    )


def write_node_properties(path: Path, settings: dict[str, str]) -> None:
    """A node's security keys as a properties file (it holds a password: 0600)."""
    lines = ["# written by `isrsim security init`: this node's TLS and SASL keys (docs/security.md)"]
    lines += [f"{k}={v}" for k, v in settings.items()]
    write_secret_file(path, "\n".join(lines) + "\n")


@dataclass
class SecureSetup:
    """What `cluster up --secure` made: passwords, and the paths every node config names."""

    root: Path
    ca_path: Path
    admin_password: str
    broker_password: str
    credentials: CredentialStore

    @classmethod
    def create(cls, root: Path, ca_key_dir: Path | None = None) -> SecureSetup:
        ca = CertificateAuthority.create()
        ca_path = ca.save(root / SECURITY_DIR, ca_key_dir)
        setup = cls(root, ca_path, secrets.token_urlsafe(18), secrets.token_urlsafe(18), CredentialStore())
        setup.credentials.put(ADMIN_USER, ScramCredential.from_password(setup.admin_password))
        setup.credentials.put(BROKER_USER, ScramCredential.from_password(setup.broker_password))
        setup._ca = ca
        return setup

    _ca: CertificateAuthority | None = None

    def node_settings(
        self, name: str, node_dir: Path, data_dir: Path, hosts: Sequence[str] = DEFAULT_HOSTS
    ) -> dict[str, str]:
        """Writes the node's keystore and credentials; returns its security config keys."""
        assert self._ca is not None
        keystore = node_dir / SECURITY_DIR / "keystore.pem"
        write_secret_file(keystore, self._ca.issue(name, hosts).decode())
        self.credentials.save(data_dir / SECURITY_DIR / CREDENTIALS_FILE)
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_path),
            "sasl.enabled.mechanisms": f"{MECHANISM},PLAIN",
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            "sasl.jaas.config": jaas_config(BROKER_USER, self.broker_password),
            "authorizer.class.name": AUTHORIZER,
            "super.users": SUPER_USERS,
        }

    def write_client_properties(self) -> Path:
        """``<root>/client.properties`` for the super user ``admin`` (librdkafka's keys, mode 0600)."""
        path = self.root / CLIENT_PROPERTIES
        write_secret_file(
            path,
            "\n".join(
                [
                    "# written by `isrsim cluster up --secure`: the super user admin (docs/security.md)",
                    f"security.protocol={SECURE_PROTOCOL}",
                    f"sasl.mechanism={MECHANISM}",
                    f"sasl.username={ADMIN_USER}",
                    f"sasl.password={self.admin_password}",
                    f"ssl.ca.location={self.ca_path}",
                ]
            )
            + "\n",
        )
        return path


__all__ = [
    "ADMIN_USER",
    "AUTHORIZER",
    "BROKER_USER",
    "CLIENT_PROPERTIES",
    "SECURE_PROTOCOL",
    "SUPER_USERS",
    "CertificateAuthority",
    "SecureSetup",
    "jaas_config",
    "write_node_properties",
]
