"""Throwaway network servers on random loopback ports for the network tools' tests, in the test's event loop:
a TLS server with a certificate made here (a CA and a leaf: days left and names as asked), a UDP DNS server
answering from a fixture zone (dnspython), and a port where nothing listens."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_chain(directory: Path, *, names: Sequence[str], days_left: float) -> Path:
    """A PEM file with a leaf for `names` (valid `days_left` more days), its CA after it, and the leaf's key."""
    now = datetime.now(UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("opsloop test CA"))
        .issuer_name(_name("opsloop test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=30))
        .not_valid_after(now + timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=30))
        .not_valid_after(now + timedelta(days=days_left))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    path = directory / f"{names[0]}.pem"
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path.write_bytes(
        leaf.public_bytes(serialization.Encoding.PEM) + ca.public_bytes(serialization.Encoding.PEM) + key_pem
    )
    return path


@asynccontextmanager
async def tls_server(chain: Path) -> AsyncIterator[int]:
    """A TLS server on 127.0.0.1 presenting `chain` (make_chain's file); yields its port. It closes each
    connection after the handshake."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(chain)

    async def handle(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound by the OS, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Record:
    name: str
    type: str
    value: str
    ttl: int = 300


class _Zone(asyncio.DatagramProtocol):
    """Answers each query from `records`: a CNAME is followed within the zone; an unknown name is NXDOMAIN."""

    def __init__(self, records: Sequence[Record]) -> None:
        self.records = records
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        query = dns.message.from_wire(data)
        response = dns.message.make_response(query)
        response.flags |= dns.flags.AA
        question = query.question[0]
        name, rdtype = question.name.to_text(omit_final_dot=True), dns.rdatatype.to_text(question.rdtype)
        if not any(r.name == name for r in self.records):
            response.set_rcode(dns.rcode.NXDOMAIN)
        while True:
            found = [r for r in self.records if r.name == name and r.type in (rdtype, "CNAME")]
            for r in found:
                response.answer.append(dns.rrset.from_text(r.name + ".", r.ttl, "IN", r.type, r.value))
            cname = next((r for r in found if r.type == "CNAME" and rdtype != "CNAME"), None)
            if cname is None:
                break
            name = cname.value.rstrip(".")
        assert self.transport is not None
        self.transport.sendto(response.to_wire(), addr)


@asynccontextmanager
async def dns_server(records: Sequence[Record]) -> AsyncIterator[int]:
    """A UDP DNS server on 127.0.0.1 answering from `records`; yields its port."""
    transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
        lambda: _Zone(records), local_addr=("127.0.0.1", 0)
    )
    try:
        yield transport.get_extra_info("sockname")[1]
    finally:
        transport.close()
