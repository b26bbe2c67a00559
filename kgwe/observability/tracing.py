"""OpenTelemetry tracing, off unless asked for.

On when OTEL_EXPORTER_OTLP_ENDPOINT (the standard variable) is set and the optional extra is installed
(`pip install kgwe[tracing]`): spans then go over OTLP/HTTP, configured by the standard OTEL_* variables.
Off, `span()` hands back a shared do-nothing context and `TRACER` is None, so hot paths test one global
and pay nothing else. kube-scheduler sends no trace context to extenders, so each extender decision is a
root span carrying the pod's UID (`k8s.pod.uid`) for correlation.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the optional extra kgwe[tracing]; imported where used
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer
    from opentelemetry.util.types import AttributeValue

log = logging.getLogger(__name__)
ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACER: Tracer | None = None  # while tracing is on
_OFF = contextlib.nullcontext()


def configure(service_name: str, exporter: SpanExporter | None = None) -> bool:
    """Turn tracing on for this process if OTEL_EXPORTER_OTLP_ENDPOINT is set, or `exporter` is given (tests
    pass the SDK's in-memory exporter; spans are then exported synchronously). True when on."""
    global TRACER
    if exporter is None and not os.environ.get(ENDPOINT_ENV):
        return False
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError:
        log.warning("%s is set but opentelemetry-sdk is missing: install kgwe[tracing]", ENDPOINT_ENV)
        return False
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if exporter is None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            log.warning("%s is set but the OTLP exporter is missing: install kgwe[tracing]", ENDPOINT_ENV)
            return False
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    TRACER = provider.get_tracer("kgwe")
    log.info("tracing on: spans of %s go to %s", service_name, os.environ.get(ENDPOINT_ENV, exporter))
    return True


def disable() -> None:
    """Back to off (tests)."""
    global TRACER
    TRACER = None


def span(name: str, **attributes: AttributeValue | None) -> contextlib.AbstractContextManager[Span | None]:
    """A span named `name` (a child of the current one), or a shared no-op context while tracing is off."""
    if TRACER is None:
        return _OFF
    return TRACER.start_as_current_span(
        name, attributes={k: v for k, v in attributes.items() if v is not None}
    )


@contextlib.contextmanager
def root_span(name: str, **attributes: AttributeValue) -> Iterator[Any]:  # Any: a Span, None when off
    """A span that starts a new trace (no parent), e.g. one extender decision."""
    if TRACER is None:
        yield None
        return
    from opentelemetry import context

    token = context.attach(context.Context())
    try:
        with TRACER.start_as_current_span(name, attributes=attributes) as s:
            yield s
    finally:
        context.detach(token)
