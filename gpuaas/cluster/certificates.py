"""The cluster's PKI: a CA, serving and client certificates, ServiceAccount keys, a front-proxy CA.

Why each exists (as kubeadm lays them out):
- `ca`: signs the apiserver's serving certificate, every client certificate (admin, controllers,
  scheduler; the apiserver authenticates them with `--client-ca-file`) and the serving
  certificates of the webhooks and the aggregated API that gpuaas runs for KEDA.
- `sa.key`/`sa.pub`: the apiserver signs ServiceAccount tokens (TokenRequest) with the key and
  verifies them with the public half; the controller-manager signs legacy tokens with it too.
- `front-proxy-ca` and its client `front-proxy-client`: the aggregation layer proxies
  `external.metrics.k8s.io` to KEDA's metrics server with this client certificate, and KEDA trusts
  the user headers only from it (`--requestheader-client-ca-file`).

Certificates are written once per state dir and reused, so a restart keeps the same identities.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its key as PEM files."""

    cert: Path
    key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    # RSA keys as PKCS#1 ("RSA PRIVATE KEY"): the form Go's x509.ParsePKCS1PrivateKey reads, which
    # Kueue's cert rotator uses on the CA key it finds in its Secret.
    form = serialization.PrivateFormat.TraditionalOpenSSL if isinstance(key, rsa.RSAPrivateKey) \
        else serialization.PrivateFormat.PKCS8
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, form, serialization.NoEncryption()))
    path.chmod(0o600)


def _load_key(path: Path) -> ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey:
    return serialization.load_pem_private_key(path.read_bytes(), password=None)  # type: ignore[return-value]


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    return x509.Name(parts + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def certificate_authority(directory: Path, name: str, common_name: str, *, rsa_key: bool = False,
                          dns_names: tuple[str, ...] = ()) -> KeyPair:
    """A self-signed CA (`NAME.crt`, `NAME.key`), created once.

    `rsa_key` and `dns_names` serve consumers that check their CA like a server certificate
    (Kueue's cert rotator verifies its CA against the DNS name `kueue-ca`, with an RSA key).
    """
    pair = KeyPair(directory / f"{name}.crt", directory / f"{name}.key")
    if pair.cert.exists() and pair.key.exists():
        return pair
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048) if rsa_key else ec.generate_private_key(ec.SECP256R1()))
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(_name(common_name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY * 10)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False))
    if dns_names:
        cert = cert.add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False)
    cert = cert.sign(key, hashes.SHA256())
    directory.mkdir(parents=True, exist_ok=True)
    _write_key(pair.key, key)
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return pair


def issue(ca: KeyPair, directory: Path, name: str, common_name: str, *, organizations: tuple[str, ...] = (),
          dns_names: tuple[str, ...] = (), ip_addresses: tuple[str, ...] = (), server: bool = False,
          client: bool = False) -> KeyPair:
    """A leaf certificate signed by `ca` (`NAME.crt`, `NAME.key`), created once.

    Client certificates carry the user in CN and the groups in O, as the apiserver's x509
    authenticator reads them.
    """
    pair = KeyPair(directory / f"{name}.crt", directory / f"{name}.key")
    if pair.cert.exists() and pair.key.exists():
        return pair
    ca_key = _load_key(ca.key)
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
    builder = (x509.CertificateBuilder().subject_name(_name(common_name, organizations))
               .issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, key_cert_sign=False,
                                            crl_sign=False, content_commitment=False, data_encipherment=False,
                                            key_agreement=False, encipher_only=False, decipher_only=False),
                              critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                              critical=False))
    if dns_names or ip_addresses:
        names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    directory.mkdir(parents=True, exist_ok=True)
    _write_key(pair.key, key)
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return pair


def service_account_keys(directory: Path) -> KeyPair:
    """The ServiceAccount token signing key (`sa.key`) and its public key (`sa.pub`), created once."""
    pair = KeyPair(directory / "sa.pub", directory / "sa.key")
    if pair.cert.exists() and pair.key.exists():
        return pair
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    directory.mkdir(parents=True, exist_ok=True)
    _write_key(pair.key, key)
    pair.cert.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                        serialization.PublicFormat.SubjectPublicKeyInfo))
    return pair


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """The names a client may use for an in-cluster Service (the apiserver dials `<svc>.<ns>.svc`)."""
    return (service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local")
