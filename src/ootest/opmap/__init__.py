"""The op map: which aten ops each test variant calls on the device (docs/opmap.md).

Captured once on a reference device, stored in one SQLite index, queried for
any backend without importing torch.
"""

from ootest.opmap.answers import IngestReport
from ootest.opmap.names import OpName, SupportSet, parse_op
from ootest.opmap.store import DEFAULT_DB, OpStore

__all__ = ["DEFAULT_DB", "IngestReport", "OpName", "OpStore", "SupportSet", "parse_op"]
