"""Running git on behalf of a PolicyRepository, which may be hostile: what URLs it may name, which
transports git may use, and a hard deadline on every git process.

- URLs: https://, ssh:// and scp-like user@host:path only (the rule of the PolicyRepository model, checked
  again here before every git call). Local paths, file:// and plain http:// only with `allow_local`, an
  allowance of whoever runs KGWE (tests, `kgwe demo`, `kgwe report` on one's own repositories) that no
  PolicyRepository can turn on.
- Transports: GIT_ALLOW_PROTOCOL limits git itself (also for submodules and redirects) to https and ssh
  (plus file and http with `allow_local`); `ext::` is never allowed. URL and ref arguments go after `--`.
- Deadline: the git process and its helpers (git-remote-https, ssh) run in their own process group, killed
  as a whole when the deadline passes, so a server that trickles bytes cannot hold a worker forever.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import git

from kgwe.errors import KgweError
from kgwe.policy.types import parse_git_url

# Variables that would make git print request headers (the credentials) into its output.
_TRACE_VARIABLES = ("GIT_TRACE", "GIT_TRACE_CURL", "GIT_TRACE_PACKET", "GIT_CURL_VERBOSE", "GIT_TRACE2")


@dataclass(frozen=True)
class GitAccess:
    """What whoever runs the controller allows its git processes. No PolicyRepository can change it."""

    allow_local_urls: bool = False  # local paths, file://, http:// (tests and `kgwe demo` only)
    credentials_from_env: bool = False  # KGWE_GIT_TOKEN etc. for repositories without a secretRef
    ca_file: str | None = None  # extra CA bundle for https remotes (a private Git server's CA)


class UnsafeGitArgument(KgweError):
    """A URL, ref or path git must not be given (it could run commands or read other repositories)."""


def check_url(url: str, *, allow_local: bool = False) -> str:
    """The URL to hand to git (local paths made absolute with `allow_local`); UnsafeGitArgument otherwise."""
    try:
        return parse_git_url(url)
    except ValueError as exc:
        refused = str(exc)
    if allow_local and isinstance(url, str) and url and not url.startswith("-") and "::" not in url:
        if re.match(r"^(https?|file)://[^/@\s]*(/\S*)?$", url):  # no user-info: no password in a URL
            return url
        if ":" not in url and not re.search(r"\s", url):  # a path (scp-like host:path is not one)
            return str(Path(url).expanduser().resolve())
    raise UnsafeGitArgument(refused)


def check_argument(value: str, what: str) -> str:
    """A ref, branch or path argument: never empty, never read by git as an option."""
    if not value or value.startswith("-") or "\0" in value or "\n" in value:
        raise UnsafeGitArgument(f"{what} {value!r} is not allowed (empty, or starts with '-')")
    return value


def display_url(url: str) -> str:
    """The URL without any user-info, safe for status and logs."""
    return re.sub(r"//[^/@]+@", "//", url)


def git_process_environment(
    extra: dict[str, str], *, allow_local: bool, ca_file: str | None = None
) -> dict[str, str]:
    """The environment of one git process: ours minus tracing, plus `extra`, plus the transport allowlist."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_TRACE_VARIABLES)}
    env.update(extra)
    if ca_file:
        env["GIT_SSL_CAINFO"] = ca_file
    env["GIT_ALLOW_PROTOCOL"] = "https:ssh:http:file" if allow_local else "https:ssh"
    env.setdefault("GIT_TERMINAL_PROMPT", "0")
    env.setdefault("GIT_CONFIG_NOSYSTEM", "1")
    return env


def run_git(
    args: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout_seconds: float | None = None,
    allow_local: bool = False,
    stdout: IO[bytes] | None = None,
    input: bytes | None = None,
    ca_file: str | None = None,
) -> str:
    """Run `git *args`; its stdout (trailing newline removed), or git.GitCommandError (status None on the
    deadline). With `stdout`, output goes to that file instead."""
    command = ["git", *args]
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=git_process_environment(env or {}, allow_local=allow_local, ca_file=ca_file),
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=stdout if stdout is not None else subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group: the deadline kills helpers too
    )
    try:
        out, err = process.communicate(input=input, timeout=timeout_seconds)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        process.communicate()
        raise git.GitCommandError(
            command, None, f"git timed out after {timeout_seconds:g}s and was killed".encode()
        ) from None
    except BaseException:
        _kill_group(process)
        process.communicate()
        raise
    text_out = (out or b"").decode("utf-8", "replace")
    text_err = (err or b"").decode("utf-8", "replace")
    if process.returncode != 0:
        raise git.GitCommandError(command, process.returncode, text_err, text_out)
    return text_out.removesuffix("\n")


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()


__all__ = [
    "GitAccess",
    "UnsafeGitArgument",
    "check_argument",
    "check_url",
    "display_url",
    "git_process_environment",
    "run_git",
]
