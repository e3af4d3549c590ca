"""What every CLI command shares: where the cluster is, running a coroutine,
and turning errors into Kafka-named messages and exit codes."""
from __future__ import annotations

import asyncio
import functools
import json
import os
import socket
import sys
from typing import Any, TypeVar
from collections.abc import Awaitable, Callable

import click

from minibroker.client.config import COMMAND_CONFIG_ENV, command_config, parse_bootstrap
from minibroker.config import ConfigError
from minibroker.errors import ErrorCode, KafkaError
from minibroker.testing.cluster import ClusterError, default_data_dir, state_path

T = TypeVar("T")
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def resolve_bootstrap(explicit: str | None) -> str:
    """--bootstrap-server, else $MINIBROKER_BOOTSTRAP, else the local cluster's state file, else 127.0.0.1:9092.
    Bootstrapping from the state file of a `cluster up --tls` cluster also takes its client
    settings (DATA_DIR/tls/client.properties) unless --command-config names others."""
    if explicit:
        return explicit
    env = os.environ.get("MINIBROKER_BOOTSTRAP")
    if env:
        return env
    try:
        with open(state_path(default_data_dir()), encoding="utf-8") as f:
            state = json.load(f)
        bootstrap = state["bootstrap"]
    except (OSError, ValueError, KeyError):
        return DEFAULT_BOOTSTRAP
    layout = state.get("layout") or {}
    if layout.get("tls") and not os.environ.get(COMMAND_CONFIG_ENV):
        os.environ[COMMAND_CONFIG_ENV] = os.path.join(layout.get("data_dir", ""), "tls", "client.properties")
    return bootstrap


BOOTSTRAP_CONNECT_TIMEOUT_S = 2.0


def reachable_bootstrap(explicit: str | None) -> str:
    """`resolve_bootstrap`, failing fast (KafkaError NETWORK_EXCEPTION naming each address and
    why, e.g. "Connection refused") when no bootstrap address accepts a TCP connection within
    BOOTSTRAP_CONNECT_TIMEOUT_S. Without it a client keeps reconnecting until its API timeout."""
    from concurrent.futures import ThreadPoolExecutor

    bootstrap = resolve_bootstrap(explicit)
    try:
        addrs = parse_bootstrap(bootstrap)
    except ConfigError as exc:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"bootstrap servers {bootstrap!r}: {exc}") from None

    def probe(addr: tuple[str, int]) -> str | None:
        try:
            socket.create_connection(addr, timeout=BOOTSTRAP_CONNECT_TIMEOUT_S).close()
            return None
        except OSError as exc:
            return f"{addr[0]}:{addr[1]}: {exc.strerror or exc or 'timed out'}"
    with ThreadPoolExecutor(max_workers=min(8, len(addrs) or 1)) as pool:
        errors = list(pool.map(probe, addrs))
    if addrs and all(errors):
        raise KafkaError(ErrorCode.NETWORK_EXCEPTION, "cannot connect to any bootstrap server ("
                         + "; ".join(e for e in errors if e) + ")")
    return bootstrap


def bootstrap_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--command-config", metavar="FILE", expose_value=False, callback=_command_config,
                      help="Client properties file with Kafka's names (security.protocol=SSL, "
                           "ssl.truststore.location=ca.pem, ...) [default: $MINIBROKER_COMMAND_CONFIG].")(fn)
    return click.option("--bootstrap-server", "bootstrap_server", metavar="HOST:PORT[,HOST:PORT]",
                        help="Broker(s) to bootstrap from [default: $MINIBROKER_BOOTSTRAP, else the local "
                             "cluster's state file, else 127.0.0.1:9092].")(fn)


def _command_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """--command-config FILE: every client this command builds reads its security settings
    (through $MINIBROKER_COMMAND_CONFIG, which the client library honours)."""
    if not value:
        return
    try:
        command_config(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc).removeprefix("--command-config: "), ctx, param) from None
    os.environ[COMMAND_CONFIG_ENV] = os.path.abspath(value)


def run_async(coro: Awaitable[T]) -> T:
    from minibroker.memory import tune_allocator
    tune_allocator()          # the CLI is one of minibroker's own programs (its bench included)
    try:
        import uvloop
        return uvloop.run(coro)  # type: ignore[arg-type]
    except ImportError:  # pragma: no cover
        return asyncio.run(coro)  # type: ignore[arg-type]


def parse_ids(text: str, option: str) -> list[int]:
    """A comma-separated broker id list (`--broker-list 1,2,3`); ValueError names the option."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{option} {text!r}: expected broker ids such as 1,2,3") from None


def fail(message: str, code: int = 1) -> None:
    click.echo(message, err=True)
    sys.exit(code)


def parse_file(path: str, parse: Callable[[str], T]) -> T:
    """`parse` of the file's text (a tool's JSON file); a file that cannot be read, or that `parse` refuses
    (ValueError), ends the command with the reason."""
    try:
        with open(path, encoding="utf-8") as f:
            return parse(f.read())
    except OSError as exc:
        fail(f"Error: cannot read {path}: {exc.strerror}")
    except ValueError as exc:
        fail(f"Error: {path}: {exc}")
    raise AssertionError("unreachable")


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """KafkaError / ConfigError / ClusterError become a one-line message and exit status 1."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KafkaError as exc:
            fail(f"Error: {exc}")
        except (ConfigError, ClusterError) as exc:
            fail(f"Error: {exc}")
        except KeyboardInterrupt:
            sys.exit(130)
    return wrapper


def parse_kv(pairs: tuple[str, ...], what: str, *, strip_values: bool = True) -> dict[str, str]:
    """KEY=VALUE pairs; `strip_values=False` keeps a value's spaces, as Kafka's
    parseKeyValueArgs does for --property (key.separator=' | ')."""
    out: dict[str, str] = {}
    for p in pairs:
        if "=" not in p:
            raise click.BadParameter(f"{p!r}: expected key=value", param_hint=what)
        k, v = p.split("=", 1)
        out[k.strip()] = v.strip() if strip_values else v
    return out
