# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which of the converge's phases a tag selection (``--tags``/``--skip-tags``) runs, and whether that keeps the
fail-closed order.

The converge (provision, roll-forward, rollback, identity, rollout, the CI guard's provision) runs its phases in
one order: ``preflight`` (the identity checks, and what holds the engine's name), ``image``, ``profile``,
``engine``, ``gate`` (the runtime gate, then the release record). Each phase's tasks carry its tag; the lock and
the topology are tagged ``always``. A selection may run phases that change nothing in any combination (preflight,
gate), but a phase that changes a rank (image, profile, engine) runs only after every phase before it, preflight
first, and an engine change only with its gate: anything else would change a pair that was never checked, or
leave one serving ungated. Such a selection is refused before anything runs, with the phases it would run.
"""
from __future__ import annotations

from collections.abc import Iterable

PHASES = ("preflight", "image", "profile", "engine", "gate")
CHANGING = ("image", "profile", "engine")


def _tags(value: object, default: Iterable[str]) -> set[str]:
    if value is None:
        return set(default)
    if isinstance(value, str):
        return {t.strip() for t in value.split(",") if t.strip()}
    return {str(t) for t in value}  # type: ignore[union-attr]


def selected(run_tags: object, skip_tags: object) -> list[str]:
    """The phases, in order, whose tasks the selection runs (Ansible's rule: a task runs when one of its tags is
    asked for, or everything is, and none is skipped)."""
    run, skip = _tags(run_tags, ("all",)), _tags(skip_tags, ())
    if "all" in skip:
        return []
    everything = bool(run & {"all", "tagged"})
    return [p for p in PHASES if (everything or p in run) and p not in skip]


def refusal(run_tags: object, skip_tags: object) -> str | None:
    """Why the selection would break the fail-closed order (None when it keeps it)."""
    chosen = selected(run_tags, skip_tags)
    changing = [p for p in chosen if p in CHANGING]
    if not changing:
        return None
    prefix = list(PHASES[:len(chosen)])
    if chosen == prefix and ("engine" not in chosen or "gate" in chosen):
        return None
    last = PHASES.index(changing[-1])
    missing = [p for p in PHASES[:last + 1] if p not in chosen]
    if "engine" in chosen and "gate" not in chosen:
        missing.append("gate")
    return (f"the tags select the phases {', '.join(chosen)} of {', '.join(PHASES)}, without {', '.join(missing)}: "
            f"a phase that changes a rank ({', '.join(changing)}) runs only after every phase before it, preflight "
            "first, and an engine change only with its gate. Select a prefix of the phases (e.g. --tags "
            "preflight,image), all of them, or only phases that change nothing (preflight, gate)")
