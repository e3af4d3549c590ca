"""The cluster secret: where a process reads it, how one is generated, and
files that must stay private (secrets, TLS keys) written 0600 from the start.

Owns: the `minibroker.cluster.secret` / `minibroker.cluster.secret.file`
properties and their error message. There is no built-in secret: a broker
or controller without one refuses to start, saying how to set one. Must not
know how the secret is used (minibroker.net.sasl derives SCRAM credentials).
"""
from __future__ import annotations

import logging
import os
import secrets
import stat

from minibroker.config import Config, ConfigError

log = logging.getLogger("minibroker.net")

SECRET_KEY = "minibroker.cluster.secret"
SECRET_FILE_KEY = "minibroker.cluster.secret.file"
SECRET_FILE_NAME = "cluster.secret"
MIN_SECRET_CHARS = 16
HOW_TO_SET = (f"set MINIBROKER_CLUSTER_SECRET_FILE=<path of a 0600 file holding the secret> or "
              f"MINIBROKER_CLUSTER_SECRET=<secret> in the environment, or {SECRET_FILE_KEY} / {SECRET_KEY} "
              f"in the properties file (or --set); generate one with: "
              f"python3 -c 'import secrets; print(secrets.token_urlsafe(32))'. "
              f"`minibroker cluster up` generates one per cluster")


def generate_secret() -> str:
    """A new random cluster secret (256 bits, url-safe text)."""
    return secrets.token_urlsafe(32)


def cluster_secret(config: Config) -> str:
    """The secret this process authenticates with: the file named by
    `minibroker.cluster.secret.file` if set, else `minibroker.cluster.secret`.
    Raises ConfigError (naming how to set one) if neither gives a usable secret."""
    path = config.get(SECRET_FILE_KEY, "")
    if path:
        secret = read_secret_file(path)
    else:
        secret = config.get(SECRET_KEY, "")
        if not secret:
            raise ConfigError(f"{SECRET_KEY}: no cluster secret configured (there is no built-in default); "
                              + HOW_TO_SET)
    if len(secret) < MIN_SECRET_CHARS:
        raise ConfigError(f"{SECRET_KEY}: the cluster secret must have at least {MIN_SECRET_CHARS} characters, "
                          f"got {len(secret)}; " + HOW_TO_SET)
    return secret


def read_secret_file(path: str) -> str:
    """The first line of `path`; warns when group or others may read it."""
    try:
        with open(path, encoding="utf-8") as f:
            mode = os.fstat(f.fileno()).st_mode
            secret = f.readline().strip()
    except OSError as exc:
        raise ConfigError(f"{SECRET_FILE_KEY}: cannot read {path}: {exc.strerror}; " + HOW_TO_SET) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("%s: %s is readable by group or others (mode %o); chmod 600 it", SECRET_FILE_KEY, path,
                    stat.S_IMODE(mode))
    if not secret:
        raise ConfigError(f"{SECRET_FILE_KEY}: {path} is empty; " + HOW_TO_SET)
    return secret


def write_private_file(path: str, data: bytes) -> None:
    """Create `path` with mode 0600 (never briefly wider: the mode is given at creation);
    an existing file is replaced atomically by one created the same way."""
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)          # the umask can only narrow the mode; make it exact
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def ensure_secret_file(path: str) -> str:
    """The secret in `path`, generating a new one into a fresh 0600 file if there is none."""
    if not os.path.exists(path):
        write_private_file(path, (generate_secret() + "\n").encode())
    return read_secret_file(path)
