"""kgwe.certs.rotation on plain data: what KGWE issues, when it renews or rotates, and that a client and a
server never stop trusting each other across a rotation (real TLS handshakes over loopback)."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import threading
from collections.abc import Mapping
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgwe.certs import x509
from kgwe.certs.rotation import (
    CA_KEY,
    CERT_KEY,
    KEY_KEY,
    PREVIOUS_CA_UNTIL_ANNOTATION,
    ROTATE_ANNOTATION,
    ROTATED_ANNOTATION,
    CertPlan,
    Lifetimes,
    Stored,
    Wanted,
    plan,
)

T0 = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC)
CA = "kgwe-ca"
WEBHOOK = Wanted("kgwe-webhook-tls", "kgwe-webhook.ns.svc", "server", ("kgwe-webhook.ns.svc",))
CLIENT = Wanted("kgwe-scheduler-extender-client", "kgwe-scheduler", "client")
LIFE = Lifetimes(
    ca=dt.timedelta(days=30), leaf=dt.timedelta(days=9), renew_fraction=1 / 3, overlap=dt.timedelta(hours=6)
)


def applied(stored: Mapping[str, Stored | None], todo: CertPlan) -> dict[str, Stored | None]:
    """The Secrets after the plan's writes (KGWE's annotations replace its own, a person's stay)."""
    out = dict(stored)
    for w in todo.writes:
        before = stored.get(w.name)
        theirs = {k: v for k, v in (before.annotations if before else {}).items() if k == ROTATE_ANNOTATION}
        out[w.name] = Stored(dict(w.data), {**theirs, **w.annotations})
    return out


def step(stored, now, wanted=(WEBHOOK,)):
    todo = plan(now, CA, stored, list(wanted), LIFE)
    return todo, applied(stored, todo)


def test_first_pass_makes_a_ca_then_the_certificate_it_signs_and_a_second_pass_writes_nothing():
    todo, stored = step({}, T0, (WEBHOOK, CLIENT))
    assert [w.name for w in todo.writes] == [CA, WEBHOOK.secret, CLIENT.secret]  # the CA first
    ca = stored[CA]
    assert x509.read(ca.data[CERT_KEY]).is_ca and todo.bundle == ca.data[CERT_KEY] == ca.data[CA_KEY]
    leaf = stored[WEBHOOK.secret]
    info = x509.read(leaf.data[CERT_KEY])
    assert info.dns_names == WEBHOOK.dns_names and info.usages == {"server"} and not info.is_ca
    assert x509.signed_by(leaf.data[CERT_KEY], ca.data[CERT_KEY])
    assert x509.key_matches(leaf.data[CERT_KEY], leaf.data[KEY_KEY]) and leaf.data[CA_KEY] == todo.bundle
    assert x509.read(stored[CLIENT.secret].data[CERT_KEY]).usages == {"client"}
    assert info.not_after - T0 <= LIFE.leaf
    again, _ = step(stored, T0 + dt.timedelta(days=1), (WEBHOOK, CLIENT))
    assert again.writes == [] and again.bundle == todo.bundle


def test_a_certificate_is_renewed_when_a_third_of_its_life_is_left_and_the_ca_stays():
    _, stored = step({}, T0)
    ca_before = stored[CA].data[CERT_KEY]
    quiet, _ = step(stored, T0 + dt.timedelta(days=5))  # 4 of 9 days left: 44% > 33%
    assert quiet.writes == []
    todo, after = step(stored, T0 + dt.timedelta(days=6, hours=1))  # under 3 days left
    assert [w.name for w in todo.writes] == [WEBHOOK.secret]
    assert "renewed early" in todo.writes[0].reason
    assert after[CA].data[CERT_KEY] == ca_before
    assert after[WEBHOOK.secret].data[CERT_KEY] != stored[WEBHOOK.secret].data[CERT_KEY]


def test_an_ageing_ca_is_replaced_with_the_old_one_kept_in_the_bundle_for_the_overlap_only():
    _, stored = step({}, T0)
    old_ca = stored[CA].data[CERT_KEY]
    renew_at = T0 + dt.timedelta(days=21)  # under a third of 30 days left
    todo, stored = step(stored, renew_at)
    assert [w.name for w in todo.writes] == [CA, WEBHOOK.secret]
    assert "CA expires" in todo.writes[0].reason
    new_ca = stored[CA].data[CERT_KEY]
    assert x509.split_bundle(todo.bundle) == [new_ca, old_ca]
    assert x509.signed_by(stored[WEBHOOK.secret].data[CERT_KEY], new_ca)
    assert stored[CA].annotations[PREVIOUS_CA_UNTIL_ANNOTATION] == "2026-12-18T18:00:00Z"
    same, _ = step(stored, renew_at + dt.timedelta(hours=5))
    assert same.writes == []
    todo, stored = step(stored, renew_at + dt.timedelta(hours=6, seconds=1))
    assert {w.name: w.reason for w in todo.writes} == {
        CA: "the previous CA left the bundle",
        WEBHOOK.secret: "the CA bundle changed",
    }
    assert todo.bundle == new_ca and PREVIOUS_CA_UNTIL_ANNOTATION not in stored[CA].annotations
    leaf = stored[WEBHOOK.secret]
    assert x509.signed_by(leaf.data[CERT_KEY], new_ca) and leaf.data[CA_KEY] == new_ca


def test_rotation_on_request_of_the_ca_replaces_everything_once_and_of_a_certificate_only_that_one():
    _, stored = step({}, T0, (WEBHOOK, CLIENT))
    ca = stored[CA]
    stored[CA] = Stored(ca.data, {**ca.annotations, ROTATE_ANNOTATION: "now-1"})
    todo, stored = step(stored, T0 + dt.timedelta(minutes=1), (WEBHOOK, CLIENT))
    assert [w.name for w in todo.writes] == [CA, WEBHOOK.secret, CLIENT.secret]
    assert "rotation asked" in todo.writes[0].reason
    assert stored[CA].annotations[ROTATED_ANNOTATION] == "now-1"
    assert step(stored, T0 + dt.timedelta(minutes=2), (WEBHOOK, CLIENT))[0].writes == []
    ca_now = stored[CA].data[CERT_KEY]
    leaf = stored[CLIENT.secret]
    stored[CLIENT.secret] = Stored(leaf.data, {ROTATE_ANNOTATION: "client-1"})
    todo, stored = step(stored, T0 + dt.timedelta(minutes=3), (WEBHOOK, CLIENT))
    assert [w.name for w in todo.writes] == [CLIENT.secret]
    assert stored[CA].data[CERT_KEY] == ca_now
    assert stored[CLIENT.secret].annotations[ROTATED_ANNOTATION] == "client-1"


def test_unusable_secrets_are_replaced_never_trusted_and_never_crash():
    _, good = step({}, T0)
    other_ca = x509.new_ca("someone-else", T0, dt.timedelta(days=30))
    foreign = x509.issue(
        other_ca, WEBHOOK.common_name, usage="server", now=T0, valid=dt.timedelta(days=9),
        dns_names=WEBHOOK.dns_names,
    )  # fmt: skip
    renamed = Wanted(WEBHOOK.secret, "kgwe-webhook.other.svc", "server", ("kgwe-webhook.other.svc",))
    cases = {
        "garbage": ({CERT_KEY: b"not a pem", KEY_KEY: b"x"}, WEBHOOK, "unreadable"),
        "key of another": ({CERT_KEY: good[WEBHOOK.secret].data[CERT_KEY], KEY_KEY: other_ca.key_pem},
                           WEBHOOK, "do not belong together"),
        "foreign CA": ({CERT_KEY: foreign.cert_pem, KEY_KEY: foreign.key_pem}, WEBHOOK, "another CA"),
        "other namespace": (dict(good[WEBHOOK.secret].data), renamed, "other names"),
        "client wants server": (dict(good[WEBHOOK.secret].data),
                                Wanted(WEBHOOK.secret, WEBHOOK.common_name, "client", WEBHOOK.dns_names),
                                "not a client"),
    }  # fmt: skip
    for label, (data, want, why) in cases.items():
        todo = plan(T0, CA, {CA: good[CA], WEBHOOK.secret: Stored(data)}, [want], LIFE)
        assert [w.name for w in todo.writes] == [WEBHOOK.secret], label
        assert why in todo.writes[0].reason, (label, todo.writes[0].reason)
        assert x509.signed_by(todo.writes[0].data[CERT_KEY], good[CA].data[CERT_KEY]), label
    broken_ca = Stored(
        {CERT_KEY: good[WEBHOOK.secret].data[CERT_KEY], KEY_KEY: good[WEBHOOK.secret].data[KEY_KEY]}
    )
    todo = plan(T0, CA, {CA: broken_ca, WEBHOOK.secret: good[WEBHOOK.secret]}, [WEBHOOK], LIFE)
    assert [w.name for w in todo.writes] == [CA, WEBHOOK.secret]  # a leaf in the CA's Secret is no CA


def _serve_once(cert: Path, key: Path, errors: list[str]) -> int:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept() -> None:
        conn, _ = listener.accept()
        try:
            with ctx.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"ok")
        except (ssl.SSLError, OSError) as exc:
            errors.append(str(exc))
        finally:
            listener.close()

    threading.Thread(target=accept, daemon=True).start()
    return port


def _handshake(tmp: Path, server: Stored, client_bundle: bytes) -> bool:
    """A real TLS handshake: the server presents `server`'s certificate, the client trusts `client_bundle`."""
    (tmp / "tls.crt").write_bytes(server.data[CERT_KEY])
    (tmp / "tls.key").write_bytes(server.data[KEY_KEY])
    (tmp / "bundle.pem").write_bytes(client_bundle)
    errors: list[str] = []
    port = _serve_once(tmp / "tls.crt", tmp / "tls.key", errors)
    ctx = ssl.create_default_context(cafile=str(tmp / "bundle.pem"))
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            ctx.wrap_socket(raw, server_hostname=WEBHOOK.dns_names[0]) as tls,
        ):
            return tls.recv(2) == b"ok"
    except ssl.SSLCertVerificationError:
        return False


def test_across_a_rotation_old_and_new_servers_and_clients_keep_verifying_each_other(tmp_path):
    """The moments of a CA rotation on a cluster: the API server gets the new bundle first, the webhook
    pod rereads its Secret later. Every pairing that can happen must handshake."""
    _, before = step({}, dt.datetime.now(dt.UTC))
    ca = before[CA]
    before[CA] = Stored(ca.data, {ROTATE_ANNOTATION: "1"})
    todo, after = step(before, dt.datetime.now(dt.UTC))
    old_server, new_server = before[WEBHOOK.secret], after[WEBHOOK.secret]
    assert _handshake(tmp_path, old_server, before[CA].data[CA_KEY])  # before the rotation
    assert _handshake(tmp_path, old_server, todo.bundle)  # new caBundle, pod not yet reloaded
    assert _handshake(tmp_path, new_server, todo.bundle)  # pod reloaded
    assert not _handshake(tmp_path, new_server, before[CA].data[CA_KEY])  # why the bundle goes first


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=6 * 24), st.sampled_from(["", "ca", "leaf"])),
        min_size=1,
        max_size=12,
    )
)
def test_any_sequence_of_time_and_rotation_requests_keeps_every_certificate_valid_and_trusted(steps):
    """Invariants after every pass: each certificate is valid now, signed by the current CA, carries the
    bundle; and the previous pass's certificate is still trusted by the new bundle (no broken handshake)."""
    now = T0
    _, stored = step({}, now, (WEBHOOK, CLIENT))
    for tokens, (hours, ask) in enumerate(steps):
        now += dt.timedelta(hours=hours)
        if ask:
            name = CA if ask == "ca" else WEBHOOK.secret
            s = stored[name]
            stored[name] = Stored(s.data, {**s.annotations, ROTATE_ANNOTATION: str(tokens)})
        previous_leaf = stored[WEBHOOK.secret].data[CERT_KEY]
        todo, stored = step(stored, now, (WEBHOOK, CLIENT))
        bundle = x509.split_bundle(todo.bundle)
        ca_cert = stored[CA].data[CERT_KEY]
        assert bundle[0] == ca_cert
        for want in (WEBHOOK, CLIENT):
            leaf = stored[want.secret]
            info = x509.read(leaf.data[CERT_KEY])
            assert info.not_before <= now < info.not_after
            assert x509.signed_by(leaf.data[CERT_KEY], ca_cert) and leaf.data[CA_KEY] == todo.bundle
        assert any(x509.signed_by(previous_leaf, c) for c in bundle), "a running server lost its trust"
        assert step(stored, now, (WEBHOOK, CLIENT))[0].writes == []  # settled: nothing more to write
