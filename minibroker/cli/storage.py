"""`minibroker storage`: offline tools for a stopped broker's log dirs
(as Kafka's `kafka-storage.sh` works on a stopped node's log dirs)."""
from __future__ import annotations

import click

from minibroker.storage.migrate import MigrationError, migrate_data_dir


@click.group()
def storage() -> None:
    """Offline tools for a stopped broker's log dirs."""


@storage.command()
@click.option("--log-dir", "log_dirs", multiple=True, required=True, metavar="DIR",
              help="A log dir (log.dirs) of a stopped broker (repeatable).")
def migrate(log_dirs: tuple[str, ...]) -> None:
    """Convert minibroker 0.1 data (msgpack records) to Kafka's record format, in place.

    Offsets, leader epochs and timestamps are kept; the next start rebuilds the
    indexes. Run it only while the broker owning DIR is stopped; running it
    again is harmless."""
    for d in log_dirs:
        try:
            click.echo(migrate_data_dir(d).summary())
        except (MigrationError, OSError) as exc:
            raise click.ClickException(str(exc)) from None
