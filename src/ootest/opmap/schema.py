"""The op map index's schema: tables, versions and the packed posting lists.

Note [Op map schema]
Integer ids everywhere, names once. ``edge`` is a WITHOUT ROWID table keyed
(variant, op, mode), so a variant's ops are one range scan; ``edge_by_op``
(op, variant, mode, calls) covers ``tests-for`` without touching the table.
``op.variants`` is each op's posting list (the sorted ids of the variants
calling it, packed uint32s), derived from ``edge`` after every write: the
questions about many ops at once (``missing``, ``enable``, ``affected``)
combine posting lists in memory instead of reading millions of rows.
Edges are the union over every capture ingested; per capture the store keeps,
in ``variant_capture``, how the variant ended and a fingerprint of its op set
(count and sum of 48-bit name hashes: order- and id-independent, so two
databases compare without translating ids). Two captures with different
fingerprints for one variant make it ``varies``; a ``device_branch`` record in
any capture makes it device-dependent; either way answers say "may differ per
device: run it" instead of trusting the recorded ops.

Note [Combining captures]
Within one capture, call counts of a variant's lines add up (a variant may be
written in several lines). A capture is identified by its provenance line;
ingesting the same capture again, or a second capture, keeps the larger count
per edge (so re-ingesting is idempotent and merging shards of one run gives
exactly the rows of one capture of the whole run).

Note [Call dtype signatures]
Schema 2 adds what dtypes each call saw (Note [Call dtypes]): ``sig`` holds each
distinct signature once (``"float32,int64"``: dtype names, distinct, sorted,
comma-joined) and ``call_sig`` (variant, op, sig) says the variant called the
op with it. Like ``edge``, the rows are the union over every capture
ingested or merged. An index of schema 1 is upgraded in place when opened
(the two tables are added, nothing else changes); its variants have no
signatures until captured again, and selection then falls back to the
variant's dtype axis.

Note [Call examples in the index]
Schema 3 keeps the call examples (Note [Call examples]): ``example`` holds each
distinct example once, keyed by ``example_key`` (a hash of the op and the
call's text, the same in every index and replay file), and ``call_example``
(variant, example) says the variant made that call. Union over captures, like
``edge``. An index of schema 1 or 2 is upgraded in place when opened; its
variants have no examples until captured again, and ``ops replay`` has
nothing to replay for them.

Note [Evidence of which code]
Schema 4 adds ``variant_capture.code``: the fingerprint (Note [Variant
fingerprints]) the repository memory gives the variant's code at the capture,
beside the capture's torch version (``capture.torch_version``). The capture
itself stays torch-only and knows no fingerprint: ``ootest ops capture --memory
M.db`` (and the delta capture of an upgrade, Note [Fresh evidence for the
delta]) looks each captured variant up in the memory of the tree it ran, one
dict lookup per variant at ingest, so the join costs nothing at query time.
Evidence recorded from another fingerprint is never certain (``stale: run
it``): it cannot skip a variant or make it mandatory. A record without a code
(an index of schema 1-3, or a capture without ``--memory``) is of unknown
origin: certain as before for a variant whose code did not change, stale for one
an upgrade reports added, modified or moved with a change. An index of schema
1-3 is upgraded in place when opened (the column is added, empty).
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Iterable

SCHEMA_VERSION = 4
MODE_NAMES = ("eager", "compiled")
MODE_SETS = {1: ("eager",), 2: ("compiled",), 3: ("eager", "compiled")}  # by mode bits
# Outcomes after which the recorded ops are the variant's whole op set; any
# other (failed, crashed, skipped, ...) may have stopped before later ops ran.
COMPLETE_OUTCOMES = frozenset({"passed", "xpassed", "xpassed_strict"})
PROVENANCE_KEYS = ("torch_version", "torch_git", "device", "profile", "ootest_version")

# Schema 2 (Note [Call dtype signatures]): an index of schema 1 gets these on open.
SIG_SCHEMA = """
CREATE TABLE IF NOT EXISTS sig(id INTEGER PRIMARY KEY, dtypes TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS call_sig(
  variant INTEGER NOT NULL, op INTEGER NOT NULL, sig INTEGER NOT NULL,
  PRIMARY KEY(variant, op, sig)) WITHOUT ROWID;
"""

# Schema 3 (Note [Call examples in the index]): an index of schema 1 or 2 gets these on open.
EXAMPLE_SCHEMA = """
CREATE TABLE IF NOT EXISTS example(
  id INTEGER PRIMARY KEY, op INTEGER NOT NULL, key TEXT NOT NULL UNIQUE, call TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS call_example(
  variant INTEGER NOT NULL, example INTEGER NOT NULL,
  PRIMARY KEY(variant, example)) WITHOUT ROWID;
"""

# Schema 4 (Note [Evidence of which code]): an index of schema 1-3 gets the column on open.
CODE_COLUMN = "ALTER TABLE variant_capture ADD COLUMN code TEXT"
#: the start of the reason an op set is stale (Note [Evidence of which code])
STALE = "captured from other code"

SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS capture(
  id INTEGER PRIMARY KEY,
  torch_version TEXT NOT NULL, torch_git TEXT NOT NULL, device TEXT NOT NULL,
  profile TEXT NOT NULL, ootest_version TEXT NOT NULL, time REAL NOT NULL,
  source TEXT NOT NULL, ingested REAL NOT NULL,
  UNIQUE(torch_version, torch_git, device, profile, ootest_version, time));
CREATE TABLE IF NOT EXISTS op(
  id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, packet TEXT NOT NULL, h INTEGER NOT NULL,
  variants BLOB NOT NULL DEFAULT x'');
CREATE INDEX IF NOT EXISTS op_by_packet ON op(packet);
CREATE TABLE IF NOT EXISTS variant(
  id INTEGER PRIMARY KEY, variant_id TEXT NOT NULL UNIQUE, nodeid TEXT, file TEXT,
  device_branch INTEGER NOT NULL DEFAULT 0, varies INTEGER NOT NULL DEFAULT 0,
  partial INTEGER NOT NULL DEFAULT 0, why TEXT);
CREATE TABLE IF NOT EXISTS variant_capture(
  variant INTEGER NOT NULL, capture INTEGER NOT NULL, n_ops INTEGER NOT NULL,
  opset INTEGER NOT NULL, outcome TEXT, stopped_on TEXT, error TEXT,
  device_branch INTEGER NOT NULL, code TEXT, PRIMARY KEY(variant, capture)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS edge(
  variant INTEGER NOT NULL, op INTEGER NOT NULL, mode INTEGER NOT NULL, calls INTEGER NOT NULL,
  PRIMARY KEY(variant, op, mode)) WITHOUT ROWID;
"""
    + SIG_SCHEMA
    + EXAMPLE_SCHEMA
)
EDGE_INDEX = "CREATE INDEX IF NOT EXISTS edge_by_op ON edge(op, variant, mode, calls)"


_WORD = "I" if array("I").itemsize == 4 else "L"


def pack_ids(ids: Iterable[int]) -> bytes:
    """Sorted distinct ids as little-endian uint32s (``op.variants``)."""
    a = array(_WORD, sorted(set(ids)))
    if sys.byteorder == "big":
        a.byteswap()
    return a.tobytes()


def unpack_ids(blob: bytes) -> array[int]:
    a = array(_WORD)
    a.frombytes(blob)
    if sys.byteorder == "big":
        a.byteswap()
    return a


def op_hash(name: str) -> int:
    """48 bits of the op name's hash: sums of up to 32,768 fit in SQLite's int64."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=6).digest(), "big")
