"""When KGWE issues or rotates its own certificates, decided on plain data: what the Secrets hold, and now.

The controller's leader is KGWE's own small CA. One CA (its Secret holds the CA certificate and key) signs
the admission webhook's serving certificate and, with the standalone extender over mutual TLS, the
extender's serving certificate and kube-scheduler's client certificate. `plan` says what to write:

- the CA is made when missing or unreadable, renewed when less than `renew_fraction` of its lifetime is
  left, and replaced at once when someone asks for it (a new value in the ROTATE annotation of its Secret);
- a new CA never breaks a running client: the bundle (every Secret's ca.crt, and the webhook
  configuration's caBundle) keeps the previous CA beside the new one for `overlap` (never past its
  expiry) while every certificate is reissued from the new CA, so a client that still trusts only the old
  CA and a server that has not reread its files yet keep verifying each other;
- a certificate is reissued when it is missing, unreadable, not from the current CA, for other names or
  another usage, asked for (ROTATE on its own Secret), or has less than `renew_fraction` of its lifetime
  left; a certificate that still fits gets only the current bundle as ca.crt when that changed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kgwe.certs.x509 import CertificateError, KeyPair, Usage, issue, key_matches, new_ca, read, signed_by
from kgwe.certs.x509 import split_bundle as _split
from kgwe.timestamps import format_rfc3339, parse_rfc3339
from kgwe.vocab import ANNOTATION_PREFIX

CERT_KEY, KEY_KEY, CA_KEY = "tls.crt", "tls.key", "ca.crt"  # a kubernetes.io/tls Secret's keys
# Set by a person (any new value) to have KGWE replace this Secret's certificate now; on the CA's Secret,
# the CA and every certificate it signed.
ROTATE_ANNOTATION = ANNOTATION_PREFIX + "rotate"
# Written by KGWE: the ROTATE value it last acted on.
ROTATED_ANNOTATION = ANNOTATION_PREFIX + "rotated"
# Written by KGWE on the CA's Secret: until when the previous CA(s) stay in the bundle.
PREVIOUS_CA_UNTIL_ANNOTATION = ANNOTATION_PREFIX + "previous-ca-until"
CA_COMMON_NAME = "kgwe-ca"
MAX_PREVIOUS_CAS = 3


@dataclass(frozen=True)
class Lifetimes:
    """How long certificates live and how early they are renewed."""

    ca: dt.timedelta = dt.timedelta(days=3 * 365)
    leaf: dt.timedelta = dt.timedelta(days=90)
    renew_fraction: float = 1 / 3  # renew when less than this share of the lifetime is left
    overlap: dt.timedelta = dt.timedelta(days=1)  # the previous CA stays trusted this long after a rotation


@dataclass(frozen=True)
class Wanted:
    """A certificate KGWE keeps in Secret `secret`."""

    secret: str
    common_name: str
    usage: Usage
    dns_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Stored:
    """What a Secret holds now (its data decoded); absent Secrets are None."""

    data: Mapping[str, bytes] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SecretWrite:
    """A Secret to write (type kubernetes.io/tls): its whole data and KGWE's annotations, and why."""

    name: str
    data: dict[str, bytes]
    annotations: dict[str, str]
    reason: str


@dataclass(frozen=True)
class CertPlan:
    writes: list[SecretWrite]  # the CA's Secret first, then the certificates it signs
    bundle: bytes  # the CAs every client trusts now (current first)


def _remaining_share(not_before: dt.datetime, not_after: dt.datetime, now: dt.datetime) -> float:
    lifetime = (not_after - not_before).total_seconds()
    return (not_after - now).total_seconds() / lifetime if lifetime > 0 else 0.0


def _rotation_asked(stored: Stored | None) -> str | None:
    """The ROTATE value not yet acted on, if any."""
    if stored is None:
        return None
    asked = stored.annotations.get(ROTATE_ANNOTATION)
    return asked if asked and asked != stored.annotations.get(ROTATED_ANNOTATION) else None


def _ca_problem(stored: Stored | None, now: dt.datetime, lifetimes: Lifetimes) -> str | None:
    """Why the stored CA must be replaced; None when it may keep signing."""
    if stored is None or CERT_KEY not in stored.data or KEY_KEY not in stored.data:
        return "no CA yet"
    try:
        info = read(stored.data[CERT_KEY])
    except CertificateError as exc:
        return f"the CA is unreadable ({exc})"
    if not info.is_ca or not key_matches(stored.data[CERT_KEY], stored.data[KEY_KEY]):
        return "the CA's certificate and key do not belong together"
    if now >= info.not_after or now < info.not_before:
        since, until = format_rfc3339(info.not_before), format_rfc3339(info.not_after)
        return f"the CA is not valid now (valid {since} to {until})"
    if _remaining_share(info.not_before, info.not_after, now) < lifetimes.renew_fraction:
        return f"the CA expires {format_rfc3339(info.not_after)}: renewed early"
    if (asked := _rotation_asked(stored)) is not None:
        return f"rotation asked ({ROTATE_ANNOTATION}={asked})"
    return None


def _still_trusted(pem: bytes, now: dt.datetime) -> bool:
    try:
        return read(pem).not_after > now
    except CertificateError:
        return False


def _previous_cas(
    stored: Stored | None, current_pem: bytes, now: dt.datetime
) -> tuple[list[bytes], str | None]:
    """The previous CAs still in the bundle, and until when (None: none left)."""
    if stored is None:
        return [], None
    until = parse_rfc3339(stored.annotations.get(PREVIOUS_CA_UNTIL_ANNOTATION))
    if until is None or now >= until:
        return [], None
    try:
        bundle = _split(stored.data.get(CA_KEY, b""))
    except CertificateError:
        return [], None
    kept = [c for c in bundle if c.strip() != current_pem.strip() and _still_trusted(c, now)]
    return kept[:MAX_PREVIOUS_CAS], (format_rfc3339(until) if kept else None)


def _kgwe_annotations(stored: Stored | None) -> dict[str, str]:
    """The annotations KGWE itself writes on a Secret (a person's ROTATE stays theirs)."""
    own = (ROTATED_ANNOTATION, PREVIOUS_CA_UNTIL_ANNOTATION)
    return {k: v for k, v in (stored.annotations if stored else {}).items() if k in own}


def _keep_ca(name: str, stored: Stored, now: dt.datetime) -> tuple[KeyPair, bytes, SecretWrite | None]:
    """The stored CA keeps signing; its Secret changes only when a previous CA leaves the bundle."""
    ca = KeyPair(stored.data[CERT_KEY], stored.data[KEY_KEY])
    previous, until = _previous_cas(stored, ca.cert_pem, now)
    bundle = b"".join([ca.cert_pem, *previous])
    current = _kgwe_annotations(stored)
    annotations = {k: v for k, v in current.items() if k != PREVIOUS_CA_UNTIL_ANNOTATION}
    if until is not None:
        annotations[PREVIOUS_CA_UNTIL_ANNOTATION] = until
    if stored.data.get(CA_KEY) == bundle and annotations == current:
        return ca, bundle, None
    data = {CERT_KEY: ca.cert_pem, KEY_KEY: ca.key_pem, CA_KEY: bundle}
    return ca, bundle, SecretWrite(name, data, annotations, "the previous CA left the bundle")


def _replace_ca(
    name: str, stored: Stored | None, now: dt.datetime, lifetimes: Lifetimes, reason: str
) -> tuple[KeyPair, bytes, SecretWrite]:
    """A new CA; the old one (and any still overlapping) stays in the bundle for `lifetimes.overlap`."""
    ca = new_ca(CA_COMMON_NAME, now, lifetimes.ca)
    previous: list[bytes] = []
    if stored is not None:
        old = stored.data.get(CERT_KEY, b"")
        older, _ = _previous_cas(stored, old, now)
        previous = [c for c in [old, *older] if c and _still_trusted(c, now)][:MAX_PREVIOUS_CAS]
    annotations: dict[str, str] = {}
    asked = _rotation_asked(stored)
    rotated = asked or _kgwe_annotations(stored).get(ROTATED_ANNOTATION)
    if rotated:
        annotations[ROTATED_ANNOTATION] = rotated
    if previous:
        annotations[PREVIOUS_CA_UNTIL_ANNOTATION] = format_rfc3339(now + lifetimes.overlap)
    bundle = b"".join([ca.cert_pem, *previous])
    data = {CERT_KEY: ca.cert_pem, KEY_KEY: ca.key_pem, CA_KEY: bundle}
    return ca, bundle, SecretWrite(name, data, annotations, reason)


def _leaf_problem(
    wanted: Wanted, stored: Stored | None, ca: KeyPair, now: dt.datetime, lifetimes: Lifetimes
) -> str | None:
    """Why the stored certificate must be reissued; None when it still fits."""
    if stored is None or CERT_KEY not in stored.data or KEY_KEY not in stored.data:
        return "no certificate yet"
    cert = stored.data[CERT_KEY]
    try:
        info = read(cert)
    except CertificateError as exc:
        return f"the certificate is unreadable ({exc})"
    if not key_matches(cert, stored.data[KEY_KEY]):
        return "the certificate and key do not belong together"
    if not signed_by(cert, ca.cert_pem):
        return "signed by another CA"
    if info.common_name != wanted.common_name or sorted(info.dns_names) != sorted(wanted.dns_names):
        return f"issued for other names ({info.common_name}: {', '.join(info.dns_names) or 'no DNS names'})"
    if wanted.usage not in info.usages:
        return f"not a {wanted.usage} certificate"
    if now >= info.not_after or now < info.not_before:
        return "not valid now"
    if _remaining_share(info.not_before, info.not_after, now) < lifetimes.renew_fraction:
        return f"expires {format_rfc3339(info.not_after)}: renewed early"
    if (asked := _rotation_asked(stored)) is not None:
        return f"rotation asked ({ROTATE_ANNOTATION}={asked})"
    return None


def plan(
    now: dt.datetime,
    ca_secret: str,
    stored: Mapping[str, Stored | None],
    wanted: Sequence[Wanted],
    lifetimes: Lifetimes | None = None,
) -> CertPlan:
    """What to write so that every wanted certificate is valid, fresh and from the current CA.

    `stored` maps Secret names (the CA's and each wanted one) to what they hold (None: absent)."""
    lifetimes = lifetimes or Lifetimes()
    stored_ca = stored.get(ca_secret)
    problem = _ca_problem(stored_ca, now, lifetimes)
    if problem is None:
        assert stored_ca is not None
        ca, bundle, ca_write = _keep_ca(ca_secret, stored_ca, now)
    else:
        ca, bundle, ca_write = _replace_ca(ca_secret, stored_ca, now, lifetimes, problem)
    writes = [] if ca_write is None else [ca_write]
    for want in wanted:
        current = stored.get(want.secret)
        rotated = _rotation_asked(current) or _kgwe_annotations(current).get(ROTATED_ANNOTATION)
        annotations = {ROTATED_ANNOTATION: rotated} if rotated else {}
        problem = _leaf_problem(want, current, ca, now, lifetimes)
        if problem is None:
            assert current is not None
            if current.data.get(CA_KEY) == bundle:
                continue
            data = {CERT_KEY: current.data[CERT_KEY], KEY_KEY: current.data[KEY_KEY], CA_KEY: bundle}
            writes.append(SecretWrite(want.secret, data, annotations, "the CA bundle changed"))
            continue
        pair = issue(
            ca,
            want.common_name,
            usage=want.usage,
            now=now,
            valid=lifetimes.leaf,
            dns_names=want.dns_names,
        )
        data = {CERT_KEY: pair.cert_pem, KEY_KEY: pair.key_pem, CA_KEY: bundle}
        writes.append(SecretWrite(want.secret, data, annotations, problem))
    return CertPlan(writes, bundle)
