"""Metrics credentials never in clear: the guarded /metrics (budgets, costs) off loopback is served over TLS
only, so the bearer token Prometheus sends never crosses the network unencrypted; a plain port answers it
only on loopback. The chart's ServiceMonitors scrape https with the `authorization` field (the deprecated
bearerTokenFile is gone) and check the certificate against KGWE's CA. Against the real API server (token
reviews with deploy/'s RBAC) and a real Prometheus scraping as a ServiceMonitor tells it to."""

from __future__ import annotations

import re
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from kgwe.httpd import metrics_port
from kgwe.localcluster.pki import write_mtls_dirs
from kgwe.reconcile.certificates import wanted_certificates
from kgwe.resources import deploy_dir
from kgwe.vocab import METRICS_TLS_PORT, METRICS_TLS_SECRET
from tests.harness.processes import start_kgwe, stop
from tests.harness.waiting import wait_for
from tests.security.test_client_and_metrics_access import deployed_controller, tokens  # noqa: F401


def _get(url: str, token: str | None = None, ca: Path | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    ctx = ssl.create_default_context(cafile=str(ca)) if ca is not None else None
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=30, context=ctx
        ) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_the_servicemonitors_scrape_https_with_the_authorization_field():
    monitors = [
        d
        for d in yaml.safe_load_all((deploy_dir() / "monitoring" / "servicemonitor.yaml").read_text())
        if d and d["kind"] == "ServiceMonitor"
    ]
    assert {m["metadata"]["name"] for m in monitors} == {"kgwe-controller", "kgwe-extender"}
    for monitor in monitors:
        (endpoint,) = monitor["spec"]["endpoints"]
        assert "bearerTokenFile" not in endpoint and endpoint["scheme"] == "https"
        assert endpoint["authorization"]["type"] == "Bearer"
        assert endpoint["tlsConfig"]["ca"]["secret"] == {"name": METRICS_TLS_SECRET, "key": "ca.crt"}
        service = monitor["metadata"]["name"]
        assert endpoint["tlsConfig"]["serverName"] == f"{service}.kgwe-system.svc"
        # the certificate the controller issues holds that name
        (wanted,) = wanted_certificates(["metrics"], "kgwe-system")
        assert endpoint["tlsConfig"]["serverName"] in wanted.dns_names
    for component in ("controller", "scheduler"):
        rendered = (
            deploy_dir() / component / f"{'deployment' if component == 'controller' else component}.yaml"
        )
        text = rendered.read_text()
        assert (
            f"--metrics-listen=0.0.0.0:{METRICS_TLS_PORT}" in text
            and f"secretName: {METRICS_TLS_SECRET}" in text
        )


def test_metrics_off_loopback_without_tls_is_refused_at_start(tmp_path, inventory_file):
    from tests.security.test_client_and_metrics_access import refused

    base = ["extender", "--inventory", str(inventory_file), "--listen", "127.0.0.1:0"]
    refused([*base, "--metrics-listen", "0.0.0.0:0"], "over TLS only", "--metrics-tls-cert-file")
    refused(["controller", "--once", "--metrics-listen", "0.0.0.0:0"], "over TLS only")


@pytest.mark.cluster
def test_the_controller_serves_guarded_metrics_over_tls_only(k8s_api, tokens, tmp_path):  # noqa: F811
    server, _ = write_mtls_dirs(tmp_path / "tls")  # a serving certificate for 127.0.0.1 and its CA
    files = (str(server / "tls.crt"), str(server / "tls.key"))
    controller = deployed_controller(k8s_api, tmp_path, metrics_tls_port=(("0.0.0.0", 0), files))
    assert controller.server is not None and controller.metrics_server is not None
    controller.server.start()
    controller.metrics_server.start()
    try:
        plain = f"http://127.0.0.1:{controller.server.port}"
        status, body = _get(f"{plain}/metrics", tokens["prometheus"])  # the token would cross in clear
        assert status == 404 and metrics_port.OVER_TLS_ONLY.encode() in body.replace(b"\\", b"")
        assert _get(f"{plain}/healthz")[0] == 200
        https = f"https://127.0.0.1:{controller.metrics_server.port}/metrics"
        ca = server / "ca.crt"
        assert _get(https, ca=ca)[0] == 401
        assert _get(https, tokens["stranger"], ca=ca)[0] == 403
        status, body = _get(https, tokens["prometheus"], ca=ca)
        assert status == 200 and b"kgwe_" in body
    finally:
        controller.metrics_server.stop()
        controller.server.stop()


@pytest.mark.cluster
def test_prometheus_scrapes_the_extender_over_tls_with_its_authorization(
    control_plane,
    tokens,  # noqa: F811
    tmp_path,
    prometheus,
):
    server, _ = write_mtls_dirs(tmp_path / "tls")
    token_file = tmp_path / "token"
    token_file.write_text(tokens["prometheus"])
    args = ["extender", "--kubeconfig", str(control_plane.kubeconfig_path), "--listen", "127.0.0.1:0"]
    args += ["--probe-listen", "0.0.0.0:0", "--metrics-listen", "0.0.0.0:0"]
    args += [
        "--metrics-tls-cert-file",
        str(server / "tls.crt"),
        "--metrics-tls-key-file",
        str(server / "tls.key"),
    ]
    log = tmp_path / "extender.log"
    proc, port = start_kgwe(args, log, r"/metrics on 0\.0\.0\.0:(\d+)")
    try:
        probes = int(re.search(r"probes .* on 0\.0\.0\.0:(\d+)", log.read_text()).group(1))
        https = {
            "scheme": "https",
            "tls_config": {"ca_file": str(server / "ca.crt"), "server_name": "localhost"},
            "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
        }
        scrapes = {
            "tls-with-token": https,
            "tls-without-token": {k: v for k, v in https.items() if k != "authorization"},
            "plain-with-token": {"authorization": https["authorization"]},
        }
        targets = {job: f"127.0.0.1:{port}" for job in scrapes}
        targets["plain-with-token"] = f"127.0.0.1:{probes}"  # the plain port: /metrics is not served there
        with prometheus(targets, tmp_path / "prometheus", scrape_options=scrapes) as prom:

            def up() -> dict[str, str]:
                return {r["metric"]["job"]: r["value"][1] for r in prom.query("up")}

            wait_for(
                "a scrape of each job",
                lambda: len(up()) == 3 and up()["tls-with-token"] == "1",
                120,
                describe=up,
            )
            assert up() == {"tls-with-token": "1", "tls-without-token": "0", "plain-with-token": "0"}
            assert prom.query('kgwe_extender_ready{job="tls-with-token"}')
    finally:
        stop(proc)
