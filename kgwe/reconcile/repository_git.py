"""The Git side of one PolicyRepository: its credentials (only from Secrets that opt in), the mirror its
revisions are fetched into, and the commit-back to its reports branch."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kubernetes.client.exceptions import ApiException

from kgwe.gitops.auth import GitCredentials, is_ssh_url, parse_hosts
from kgwe.gitops.commit_back import CommitBack
from kgwe.gitops.gitcmd import GitAccess, UnsafeGitArgument, url_origin
from kgwe.gitops.source import GitRef, GitSource, GitSourceError
from kgwe.policy.cluster_kinds import PolicyRepositorySpec
from kgwe.runtime.cluster import Cluster
from kgwe.runtime.kinds import SECRET
from kgwe.vocab import GIT_CREDENTIALS_LABEL, GIT_HOSTS_ANNOTATION


class RepositoryGit:
    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        *,
        cache_dir: Path,
        access: GitAccess,
        attempts: int = 3,
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.cache_dir = cache_dir
        self.access = access
        self.attempts = attempts
        self._sources: dict[tuple[str, GitRef, float], GitSource] = {}

    def credentials(self, spec: PolicyRepositorySpec) -> GitCredentials | None:
        """The repository's Git credentials: only from a Secret that opts in with GIT_CREDENTIALS_LABEL and
        names the hosts they may go to (GIT_HOSTS_ANNOTATION; the spec's URL must be on one); the
        controller's own environment only when its operator allowed it (GitAccess), bound to the hosts in
        KGWE_GIT_HOSTS."""
        ssh = is_ssh_url(spec.url)
        if spec.secret_ref is None:
            if ssh:
                raise GitSourceError(
                    "an SSH URL needs spec.secretRef naming a Secret with identity and known_hosts"
                )
            if not self.access.credentials_from_env:
                return None
            local = GitCredentials.from_env()
            return local if local.secret else None
        name = spec.secret_ref.name
        try:
            secret = self.cluster.get(SECRET, name, self.namespace)
        except ApiException as exc:
            raise GitSourceError(f"secret {self.namespace}/{name} for Git credentials: {exc.reason}") from exc
        if secret is None:
            raise GitSourceError(f"secret {self.namespace}/{name} for Git credentials: Not Found")
        meta = secret.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(GIT_CREDENTIALS_LABEL) != "true":
            raise GitSourceError(
                f'secret {self.namespace}/{name} is not labelled {GIT_CREDENTIALS_LABEL}="true"; a '
                "PolicyRepository may only use Secrets that opt in to being Git credentials"
            )
        annotations = meta.get("annotations") or {}
        try:
            hosts = parse_hosts(annotations.get(GIT_HOSTS_ANNOTATION, ""))
        except ValueError as exc:
            raise GitSourceError(f"secret {self.namespace}/{name}: {GIT_HOSTS_ANNOTATION}: {exc}") from None
        if not hosts:
            raise GitSourceError(
                f"secret {self.namespace}/{name} names no host in its {GIT_HOSTS_ANNOTATION} annotation; "
                "Git credentials are sent only to the hosts they are bound to"
            )
        creds = replace(GitCredentials.from_secret_data(secret.get("data") or {}), hosts=hosts)
        try:
            creds.check_bound(url_origin(spec.url))
        except UnsafeGitArgument as exc:
            raise GitSourceError(f"secret {self.namespace}/{name}: {exc}") from None
        if ssh and not creds.ssh_known_hosts:
            raise GitSourceError(
                f"secret {self.namespace}/{name} has no known_hosts: SSH host keys are never trusted on "
                "first use"
            )
        return creds

    def source(self, spec: PolicyRepositorySpec) -> GitSource:
        """The mirror of the spec's URL and ref (kept while they stay the same), with fresh credentials."""
        ref = GitRef.from_model(spec.ref)
        key = (spec.url, ref, spec.timeout_seconds)
        source = self._sources.get(key)
        if source is None:
            source = GitSource(
                spec.url,
                ref,
                cache_dir=self.cache_dir / "git",
                timeout_seconds=spec.timeout_seconds,
                attempts=self.attempts,
                allow_local=self.access.allow_local_urls,
                ca_file=self.access.ca_file,
                allowed_networks=self.access.allowed_networks,
            )
            self._sources = {key: source}
        source.credentials = self.credentials(spec)
        return source

    def commit_back(self, spec: PolicyRepositorySpec, workdir_name: str) -> CommitBack:
        """A CommitBack to the repository's reports branch that may write only under spec.reports.path."""
        return CommitBack(
            spec.url,
            spec.reports_branch,
            workdir=self.cache_dir / workdir_name,
            credentials=self.credentials(spec),
            allowed_prefixes=(spec.reports_path,),
            timeout_seconds=spec.timeout_seconds,
            allow_local=self.access.allow_local_urls,
            ca_file=self.access.ca_file,
            allowed_networks=self.access.allowed_networks,
        )
