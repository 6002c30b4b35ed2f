"""Images of a server's state for a target's ``dump()``, ``load(image)`` and ``snapshot()``.

Theory of operation
-------------------
The explorer copies a target's ledger by its image (``fence.model.restore``): one
immutable value holding everything the ledger keeps on the server, read back
by ``dump`` and written back, whatever the server held, by ``load``. Two
servers cover the shipped targets and most job systems, so their images are
written once here:

* ``RedisImage`` (``dump_redis``, ``load_redis``, ``RedisDatabase``): every key
  of one Redis database (its db number), with its type and contents (lists,
  hashes, sets, sorted sets, strings) and its TTL. A load is a ``FLUSHDB`` and
  every key written back, in one transaction. Instants a system keeps inside
  hash values (a delayed message's eta) are ``InstantsIn``, kept as ticks ahead
  as a TTL is.
* ``SchemaImage`` (``PostgresTables``): a list of PostgreSQL tables, each as
  JSON rows ordered by id, and their id sequences. A load is one transaction
  that deletes every row, inserts the image's with their ids, and sets every
  sequence as it was. ``PostgresSession`` holds it for a library that runs
  on asyncio, on the library's own connection.

Model time in an image is ticks, never instants (``protocol.ModelTime``): a
stored instant the system compares with its clock (a Redis sorted set of
delivery times, a heartbeat column) is kept as whole ticks before the clock at
the dump, and a load sets it that far before the clock at the load; a Redis TTL
is kept as the whole ticks left (rounded up), and loaded as that many ticks
less half a tick, so that a key expires at the same model tick after a load as
before it. The real seconds that pass between two calls are in no image.
Ids that depend on the path taken (uuid4 tags, worker ids) are kept as they
are: the system answers with them; a ledger's ``snapshot()`` names them by rank.

Both sessions are a ``LibrarySession`` (the library's handles closed with
the session, its workers made once by name, an event loop), and both take
``deciding``: what of a Redis key's contents, or of a table's row, decides
an answer, for the default ``snapshot()``.

The Redis images are in ``fence.targets.redis_image``, the PostgreSQL ones in
``fence.targets.postgres_image``, the session's library side in
``fence.targets.library_session``, the renaming of ids by rank (``ranked_ids``)
in ``fence.targets.taken``; import them from here.
"""

from __future__ import annotations

from fence.targets.library_session import LibrarySession
from fence.targets.postgres_image import PostgresSession, PostgresTables, SchemaImage, literal
from fence.targets.redis_image import MOVE_BACK, RedisDatabase, RedisImage, RedisSession, dump_redis, load_redis
from fence.targets.redis_image import InstantsIn, left_out, scores_zeroed
from fence.targets.taken import UUID, ranked_ids



__all__ = ["MOVE_BACK", "UUID", "LibrarySession", "PostgresSession", "PostgresTables", "RedisDatabase", "RedisImage", "RedisSession",
           "SchemaImage", "dump_redis", "left_out", "literal", "load_redis", "scores_zeroed", "ranked_ids", "InstantsIn"]
