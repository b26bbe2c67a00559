"""One quantity parser (kgwe.quantity) for the extender, `kgwe validate`, metering and quotas: every spelling
the API server takes is read to the same exact amount as kubernetes.utils.parse_quantity reads it, what the
API server refuses is refused, and the extender accepts a pod's amounts exactly when `kgwe validate`
accepts its template."""

from __future__ import annotations

from decimal import Context, Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity as client_parse

from kgwe.extender.request import RequestError, memory_mib, parse_pod
from kgwe.policy.pod_template import template_findings
from kgwe.quantity import count, in_units, milli, parse_quantity, whole

BINARY = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
DECIMAL = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"]


@st.composite
def spellings(draw: st.DrawFn) -> str:
    """A quantity as a person or a tool may write it: sign, digits with or without a fraction (or only
    one), then a binary or decimal suffix or an exponent."""
    sign = draw(st.sampled_from(["", "+", "-"]))
    whole_part = draw(st.text("0123456789", min_size=0, max_size=7))
    fraction = draw(st.none() | st.text("0123456789", min_size=0, max_size=5))
    if not whole_part and not fraction:
        whole_part = "0"
    number = whole_part + ("" if fraction is None else "." + fraction)
    suffix = draw(
        st.sampled_from(BINARY + DECIMAL)
        | st.builds(
            lambda e, s, n: f"{e}{s}{n}",
            st.sampled_from("eE"),
            st.sampled_from(["", "+", "-"]),
            st.integers(0, 30),
        )
    )
    return sign + number + suffix


@given(spellings())
@settings(max_examples=400, deadline=None)
def test_every_spelling_reads_as_the_kubernetes_client_reads_it(text: str) -> None:
    """Ours is exact; the client computes in Decimal's default 28 digits: equal once rounded as it rounds."""
    assert Context(prec=28).plus(parse_quantity(text)) == client_parse(text)


@given(st.integers(0, 2**50), st.sampled_from(BINARY))
@settings(deadline=None)
def test_binary_spellings_of_an_amount(n: int, suffix: str) -> None:
    power = 2 ** (10 * (BINARY.index(suffix) + 1))
    assert parse_quantity(f"{n}{suffix}") == n * power
    assert in_units(f"{n * power}", power) == n
    assert in_units(f"{n * power}e0", power) == n


@given(st.integers(0, 10**12))
@settings(deadline=None)
def test_one_amount_many_spellings(n: int) -> None:
    spelled = [str(n), f"{n}e0", f"{n}000m", f"{n}E+0", f" {n} ", f"+{n}", f"{n}.", f"{n}.000"]
    if n % 1000 == 0:
        spelled += [f"{n // 1000}k", f"{n // 1000}e3"]
    assert {parse_quantity(s) for s in spelled} == {Decimal(n)}
    assert {whole(s) for s in spelled} == {n}
    assert milli(str(n)) == 1000 * n


@pytest.mark.parametrize(
    "text",
    ["", " ", "K", "1K", "1Kb", "1ki", "1_000", "NaN", "Infinity", "1 Gi", "1e", "1e1.5", "--1", "0x10",
     "1.2.3", "١", "e3", "Mi", ".", "+", "1Gi ", "1e+", "1e1000001"],
)  # fmt: skip
def test_what_the_api_server_refuses_is_refused(text: str) -> None:
    if text == "1Gi ":  # trailing space: trimmed, as the API server trims a JSON quantity
        assert parse_quantity(text) == 2**30
        return
    with pytest.raises(ValueError):
        parse_quantity(text)


def test_bounded_against_hostile_input() -> None:
    with pytest.raises(ValueError, match="characters"):
        parse_quantity("1" * 200)
    with pytest.raises(ValueError, match="exponent"):
        parse_quantity("1e5000")
    assert parse_quantity("1e1000") == Decimal(10) ** 1000  # exact, and cheap
    assert memory_mib("1e1000") == 2**62  # beyond every node: clamped, not an enormous integer


def test_counts_and_cpu() -> None:
    assert whole("2e0") == whole("2000m") == whole(2) == 2
    for bad in ("1.5", "-1", "500m", True):
        with pytest.raises(ValueError):
            whole(bad)
    assert count(None) == 0 and count("lots") == 0 and count("3") == 3 and count("x", -1) == -1
    assert milli("0.5") == 500 and milli("100m") == 100 and milli("0.1m") == 1  # rounded up, as MilliValue()


def _pod(amounts: dict[str, object]) -> dict:
    return {"spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": amounts}}]}}


@given(spellings(), st.sampled_from(["memory", "cpu", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]))
@settings(max_examples=300, deadline=None)
def test_extender_accepts_a_pod_exactly_when_validate_accepts_its_template(text: str, resource: str) -> None:
    template = {"metadata": {}, "spec": _pod({resource: text})["spec"]}
    validate_ok = not template_findings(template)
    try:
        parse_pod(_pod({resource: text}))
        extender_ok = True
    except RequestError:
        extender_ok = False
    assert extender_ok == validate_ok, (text, resource, template_findings(template))


def test_the_spellings_the_issue_named() -> None:
    """memory_mib("1e9") and "1Pi" raised: the extender answered 400 for a pod `kgwe validate` accepted."""
    assert memory_mib("1e9") == 953 and memory_mib("1Pi") == 2**30
    request = parse_pod(_pod({"memory": "1e9", "cpu": "1.5", "nvidia.com/gpu": "2e0"}))
    assert (request.memory_mib, request.cpu_milli, request.gpus) == (953, 1500, 2)
