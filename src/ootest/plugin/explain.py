"""A config decision with the selection decision behind it (Note [Decisions people can see])."""

from __future__ import annotations

from ootest.config.decide import Decision
from ootest.record.decisions import (
    GENERATED_TAG,
    NOT_DECIDED,
    NOT_MADE_FOR,
    Sidecar,
    reason_code,
)

__all__ = ["explain"]


def explain(d: Decision, variant_id: str, sidecar: Sidecar | None) -> Decision:
    """``d`` with the reason code and evidence ``sidecar`` gives ``variant_id``,
    when nothing a person wrote decides it (see the Note); ``d`` itself otherwise.

    Pure but for the sidecar's one lazy read."""
    if d.bucket == "listed":
        own = d.reason != f"listed as {d.mode}"  # the entry's reason: or description:
        if own or GENERATED_TAG not in d.tags:
            return d  # a person's entry, or one with its own words
    elif d.bucket != "unlisted":
        return d  # capability, excluded, forced, selector: the config's own reason
    if sidecar is None:
        return d
    got = sidecar.get(variant_id)
    if got is not None and got.mode == d.mode:
        return d._replace(reason=got.reason, code=reason_code(got.reason), evidence=got.evidence)
    why = (
        f"not in {sidecar.name}"
        if got is None
        else (f"{sidecar.name} decided {got.mode}: {got.reason}")
    )
    if d.bucket == "listed":
        # a generated entry the sidecar does not back for this variant: its mode
        # holds, but no decision is shown that was made for another variant
        return d._replace(reason=f"{NOT_MADE_FOR} ({why}; listed as {d.mode})")
    return d._replace(reason=f"{NOT_DECIDED} ({why}; unlisted_test_mode: {d.mode})")
