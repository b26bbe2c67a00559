"""Token auth against a real smart-HTTP git server over HTTPS on loopback (git http-backend behind a
Basic-auth check, kgwe.localcluster.gitserver)."""

from __future__ import annotations

import base64
from dataclasses import replace

import pytest

from kgwe.gitops.auth import GitCredentials
from kgwe.gitops.commit_back import CommitBack
from kgwe.gitops.gitcmd import LOOPBACK_NETWORKS
from kgwe.gitops.source import GitRef, GitSource, GitSourceError
from kgwe.localcluster.gitserver import GitHttpsServer

TOKEN = "ghp_exampletoken123"


def test_token_over_https_fetch_and_push(remote, tmp_path):
    with GitHttpsServer(remote.bare.parent, username="x-access-token", password=TOKEN) as server:
        url, ca = server.url("remote.git"), server.ca_file
        host = f"127.0.0.1:{server.port}"
        creds = GitCredentials(username="x-access-token", password=TOKEN, hosts=(host,))
        rev = GitSource(
            url, GitRef(branch="main"), cache_dir=tmp_path / "c", credentials=creds, ca_file=ca
        ).fetch()
        assert rev.sha == remote.log()[0].split()[0]

        without = GitSource(
            url,
            GitRef(branch="main"),
            cache_dir=tmp_path / "c2",
            attempts=2,
            sleep=lambda s: None,
            ca_file=ca,
        )
        with pytest.raises(GitSourceError) as err:
            without.fetch()
        assert TOKEN not in str(err.value)

        cb = CommitBack(url, "main", workdir=tmp_path / "cb", credentials=creds, ca_file=ca)
        assert cb.commit_files({"reports/a.md": "over https\n"}, summary="https").status == "pushed"
        assert remote.show("main", "reports/a.md") == "over https"
        rejected = CommitBack(
            url,
            "main",
            workdir=tmp_path / "cb2",
            attempts=3,
            credentials=GitCredentials(password="wrong", hosts=(host,)),
            sleep=lambda s: None,
            ca_file=ca,
        )
        bad = rejected.commit_files({"reports/b.md": "x"}, summary="b")
        assert bad.status in ("rejected", "failed") and "wrong" not in bad.reason
        # The token never lands in the mirror's or the clone's git config.
        for cfg in (tmp_path / "c").rglob("config"):
            assert TOKEN not in cfg.read_text()
        assert TOKEN not in (tmp_path / "cb" / "repo.git" / "config").read_text()
        assert any(h.startswith("Basic ") for h in server.authorizations)


def test_secret_data_and_ssh_environment():
    from kgwe.gitops.auth import git_environment

    data = {
        k: base64.b64encode(v).decode()
        for k, v in {
            "username": b"bot",
            "password": b"tok",
            "identity": b"-----BEGIN KEY-----\nabc",
            "known_hosts": b"git.example.com ssh-ed25519 AAAA",
        }.items()
    }
    creds = replace(GitCredentials.from_secret_data(data), hosts=("127.0.0.1:8443",))
    assert creds.username == "bot" and creds.password == "tok" and "tok" not in repr(creds)
    with git_environment(
        creds, url="https://127.0.0.1:8443/p.git", allowed_networks=LOOPBACK_NETWORKS
    ) as env:
        cmd = env["GIT_SSH_COMMAND"]
        key_path = cmd.split("-i ")[1].split()[0]
        import os
        import stat

        assert stat.S_IMODE(os.stat(key_path).st_mode) == 0o600
        assert "StrictHostKeyChecking=yes" in cmd and "UserKnownHostsFile=" in cmd
        config = {
            env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"]
            for i in range(int(env["GIT_CONFIG_COUNT"]))
        }
        header = "Authorization: Basic " + base64.b64encode(b"bot:tok").decode()
        assert config["http.https://127.0.0.1:8443/.extraHeader"] == header  # scoped to that origin only
        assert config["http.followRedirects"] == "false"
    assert not os.path.exists(key_path)  # removed after use
