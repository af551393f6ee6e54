"""Autotuning: pick the fastest of a few candidate configurations (tile sizes, stages) by timing each on
the device, once per problem class, and remember the choice on disk.

The choice is a small JSON record in the kernel cache's folder (:mod:`kcompiler.runtime.cache`: the
same ``$KC_CACHE_DIR`` / ``~/.cache/kcompiler``, the same ``<key[:2]>/<key>.json`` naming, written
through a temporary file and renamed into place). The key covers what the caller says the problem
class is (for ops.matmul: the shape bucket, dtypes, layout, target, arch and device name), the
candidates themselves and the kernel's source, so that a new candidate list or an edited kernel tunes
again. A record is written only after every candidate has been tried: a tuning that fails or is
interrupted leaves no entry, and the next call tunes from the start.

``KC_TUNE=0`` (or ``off``, ``false``, ``no``) turns tuning off: :func:`autotune` then returns the
default without timing (a cached choice is still used).

This module is the mechanism (a problem, candidates, a timing function); :func:`kcompiler.autotune`
(:mod:`kcompiler.runtime.tuning`) applies it to a user's kernel.
"""
from __future__ import annotations

import math
import os
from typing import Any, Callable, Sequence

from .cache import CACHE, KernelCache, make_key
from .. import progress

#: Bumped when the record's format or the meaning of its key changes.
_VERSION = 1


class CandidateRejected(Exception):
    """Raised by a timing function for a candidate that cannot run here (it does not compile for
    this target, needs more shared memory or registers than the device has): the candidate is
    skipped, and tuning goes on with the others."""


class TuningFailed(RuntimeError):
    """Every candidate was rejected: nothing was chosen, and nothing was written to the cache."""


def tuning_enabled() -> bool:
    """Whether ``KC_TUNE`` allows timing (default: yes)."""
    return os.environ.get("KC_TUNE", "1").strip().lower() not in ("0", "off", "false", "no")


def tuning_key(problem: dict[str, Any], candidates: Sequence[dict[str, Any]]) -> str:
    """The cache key of a tuning record: sha256 of the problem class and the candidate list."""
    return make_key("tuning", _VERSION, problem, list(candidates))


def cached_choice(problem: dict[str, Any], candidates: Sequence[dict[str, Any]],
                  cache: KernelCache | None = None) -> dict[str, Any] | None:
    """The choice recorded for ``problem`` and ``candidates``, or None (not tuned yet, or a record
    that does not name one of the candidates: a damaged or foreign file counts as a miss)."""
    cache = CACHE if cache is None else cache
    rec = cache.get_json(tuning_key(problem, candidates))
    if not isinstance(rec, dict):
        return None
    choice = rec.get("choice")
    return dict(choice) if isinstance(choice, dict) and choice in [dict(c) for c in candidates] else None


def autotune(problem: dict[str, Any], candidates: Sequence[dict[str, Any]],
             time_fn: Callable[[dict[str, Any]], float], *, default: dict[str, Any] | None = None,
             enabled: bool | None = None, cache: KernelCache | None = None, unit: str = "",
             label: str | None = None) -> dict[str, Any]:
    """The candidate to use for ``problem``: the cached choice; else, when tuning is ``enabled``
    (default: :func:`tuning_enabled`), the one ``time_fn`` measures fastest, recorded in ``cache``
    (default: the process's :data:`~kcompiler.runtime.cache.CACHE`); else ``default`` (default: the
    first candidate).

    ``problem``: a JSON-able description of the problem class (what the choice depends on).
    ``candidates``: JSON-able dicts (tile sizes, ...). ``time_fn(candidate)``: its run time in any
    unit (smaller is better; ``unit`` names it in the progress lines, kcompiler.progress); it raises
    :class:`CandidateRejected` for a candidate that cannot run. ``label``: what the progress lines
    call the problem (default: ``problem`` on one line).
    Any other exception (or an interrupt) propagates and nothing is recorded. Raises
    :class:`TuningFailed` when every candidate is rejected, ValueError for an empty list."""
    cands = [dict(c) for c in candidates]
    if not cands:
        raise ValueError("autotune: no candidates")
    fallback = dict(default) if default is not None else cands[0]
    cache = CACHE if cache is None else cache
    hit = cached_choice(problem, cands, cache)
    if hit is not None:
        return hit
    if not (tuning_enabled() if enabled is None else enabled):
        return fallback

    times: list[float | None] = []
    with progress.step(f"autotuning {label or _brief(problem)}: timing {len(cands)} candidates"):
        for i, c in enumerate(cands, 1):
            try:
                t = float(time_fn(dict(c)))
            except CandidateRejected as e:
                progress.note(f"candidate {i}/{len(cands)} {_brief(c)}: rejected ({str(e).splitlines()[0][:120]})")
                times.append(None)
                continue
            if not math.isfinite(t) or t < 0:
                raise ValueError(f"autotune: time_fn returned {t} for {c}")
            progress.note(f"candidate {i}/{len(cands)} {_brief(c)}: {t:.4g}{' ' * bool(unit)}{unit}")
            times.append(t)
        ok = [(t, k) for k, t in enumerate(times) if t is not None]
        if not ok:
            raise TuningFailed(f"autotune: every candidate was rejected for {problem}")
        best = cands[min(ok)[1]]
        progress.note(f"chose {_brief(best)}")
    cache.put_json(tuning_key(problem, cands), {"problem": problem, "candidates": cands, "times": times,
                                                "choice": best})
    return dict(best)


def _brief(d: dict[str, Any]) -> str:
    """A problem or a candidate on one line: ``BM=128 BN=64``."""
    return " ".join(f"{k}={v}" for k, v in d.items())


__all__ = ["CandidateRejected", "TuningFailed", "autotune", "cached_choice", "tuning_enabled", "tuning_key"]
