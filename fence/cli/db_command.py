"""``fence db``: a backend's fence tables: check them, or empty them."""

from __future__ import annotations

from fence.base.errors import BadInput


def db_arguments(db) -> None:
    """``fence db``'s options."""
    db.add_argument("action", choices=["check", "reset"], help="check: schema version, clock, counts; reset: empty")
    db.add_argument("url", help="memory:, sqlite:///PATH.db or postgresql://USER@HOST:PORT/DBNAME")
    db.set_defaults(handler=cmd_db)


def cmd_db(args) -> int:
    """check: print the schema version, the database's clock and the row counts; reset: empty."""
    from fence.backends import SCHEMA_VERSION, open_store, reset_backend

    if args.action == "reset":
        reset_backend(args.url)
        print(f"{args.url}: fence's tables are empty (schema version {SCHEMA_VERSION})")
        return 0
    if args.url.startswith("sqlite://"):
        from fence.backends import sqlite_path

        path = sqlite_path(args.url)
        if not path.is_file():  # opening it would create it: check is not the command that makes one
            what = "is not a file" if path.exists() else "does not exist"
            raise BadInput(f"{args.url}: the database file {path} {what}; 'fence db reset {args.url}' creates one")
    store = open_store(args.url)
    if store is None:
        print("memory: nothing is stored; the ledger lives and dies with its process")
        return 0
    try:
        counts = ", ".join(f"{table.removeprefix('fence_')} {n}" for table, n in store.counts().items())
        print(f"{args.url}: schema version {SCHEMA_VERSION}, database clock {store.clock():.3f}, {counts}")
    finally:
        store.close()
    return 0
