"""A cache of pipeline stages: each finished stage is reused while its inputs
are unchanged, and redone (with every stage after it) when they change.

Each finished stage leaves a marker in ``OUT/.stages`` that records its inputs:
the settings it depends on and the fingerprint of the stage before it. A rerun
reuses a stage whose inputs are unchanged and redoes one whose inputs changed,
together with every stage after it (their outputs are removed first, so old and
new results never mix). An interrupted stage that is run again with unchanged
inputs continues where it stopped; with changed inputs it starts over.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

__all__ = ["STAGES_DIRNAME", "Stage", "StageCache", "changes", "digest"]

#: The directory under a cache's ``out`` that records its stages.
STAGES_DIRNAME = ".stages"


def digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def changes(old: Any, new: Any, key: str = "") -> list[str]:
    """``key old -> new`` for each setting that differs (nested keys dotted)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in [*new, *(k for k in old if k not in new)]:
            sub = f"{key}.{k}" if key else k
            if k == "upstream" and not key:
                if old.get(k) != new.get(k):
                    stage = str(new.get(k) or old.get(k)).split(":", 1)[0]
                    out.append(f"{stage} result changed")
            elif k not in old or k not in new:
                was, now = (repr(d[k]) if k in d else "unset" for d in (old, new))
                out.append(f"{sub} {was} -> {now}")
            else:
                out += changes(old[k], new[k], sub)
        return out
    return [] if old == new else [f"{key or 'inputs'} {old!r} -> {new!r}"]


@dataclass
class Stage:
    """One stage: what it depends on, what it writes, how it runs."""

    name: str
    inputs: dict[str, Any]  # the settings that affect its result
    outputs: tuple[Path, ...]  # removed when it is redone
    fn: Callable[[], dict[str, Any] | None]


class StageCache:
    """Runs stages in order, reusing those whose recorded inputs are unchanged.

    ``.stages/NAME`` (written when a stage finishes) holds its ``inputs`` (its
    settings plus ``upstream``, the previous stage's fingerprint), its
    ``result`` and its ``fingerprint``; ``.stages/NAME.started`` holds the
    inputs of a run that has not finished (yet).
    """

    def __init__(
        self, out: Path, stages: Sequence[Stage], say: Callable[[str], None]
    ) -> None:
        self.say = say
        self.dir = out / STAGES_DIRNAME
        self.dir.mkdir(parents=True, exist_ok=True)
        self.stages = list(stages)
        self.planned = {st.name for st in self.stages}

    def _read(self, file: str) -> dict[str, Any] | None:
        path = self.dir / file
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text())
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, file: str, data: dict[str, Any]) -> None:
        tmp = self.dir / f".{file}.tmp"
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.replace(self.dir / file)

    def _leftovers(self, stage: Stage) -> bool:
        files = (self.dir / stage.name, self.dir / f"{stage.name}.started")
        return any(p.exists() for p in (*files, *stage.outputs))

    def _discard(self, stages: Sequence[Stage]) -> None:
        for stage in stages:
            (self.dir / stage.name).unlink(missing_ok=True)
            (self.dir / f"{stage.name}.started").unlink(missing_ok=True)
            for path in stage.outputs:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)

    def _redo_note(self, stages: Sequence[Stage]) -> str:
        now = [st.name for st in stages if st.name in self.planned]
        later = [
            st.name
            for st in stages
            if st.name not in self.planned and self._leftovers(st)
        ]
        note = f"redoing {', '.join(now)}"
        return note + (f"; discarding {', '.join(later)}" if later else "")

    def _inputs(self, index: int) -> dict[str, Any]:
        inputs = dict(self.stages[index].inputs)
        if index > 0:
            before = self.stages[index - 1]
            marker = self._read(before.name) or {}
            inputs["upstream"] = f"{before.name}:{marker.get('fingerprint')}"
        return json.loads(json.dumps(inputs))  # as it reads back from a marker

    def run(self, name: str) -> dict[str, Any]:
        """Reuse stage ``name`` if its inputs are unchanged, else (re)do it."""
        index = next(i for i, st in enumerate(self.stages) if st.name == name)
        stage, after = self.stages[index], self.stages[index + 1 :]
        inputs = self._inputs(index)
        marker = self._read(name)
        started = self._read(f"{name}.started")
        if marker is not None:
            if marker.get("inputs") == inputs:
                self.say(f"stage {name}: done before, reusing")
                return dict(marker.get("result") or {})
            if "inputs" not in marker:
                why = "no recorded inputs: made by an older demo"
            else:
                why = "; ".join(changes(marker["inputs"], inputs))
            self.say(
                f"{name}: inputs changed ({why}); {self._redo_note([stage, *after])}"
            )
            self._discard([stage, *after])
        elif started is not None and started.get("inputs") == inputs:
            self.say(f"stage {name}: resuming an unfinished run (inputs unchanged)")
            self._discard(after)
        elif started is not None:
            why = "; ".join(changes(started.get("inputs") or {}, inputs))
            self.say(
                f"{name}: inputs changed since an unfinished run ({why}); "
                f"{self._redo_note([stage, *after])}"
            )
            self._discard([stage, *after])
        else:
            if self._leftovers(stage):
                self.say(
                    f"{name}: outputs without recorded inputs; "
                    f"{self._redo_note([stage, *after])}"
                )
            self._discard([stage, *after])
        self.say(f"stage {name}: running")
        self._write(f"{name}.started", {"inputs": inputs})
        t0 = time.perf_counter()
        result = stage.fn() or {}
        seconds = round(time.perf_counter() - t0, 1)
        record = {
            "inputs": inputs,
            "result": result,
            "fingerprint": digest({"stage": name, "inputs": inputs, "result": result}),
            "seconds": seconds,
        }
        self._write(name, record)
        (self.dir / f"{name}.started").unlink(missing_ok=True)
        self.say(f"stage {name}: finished in {seconds} s")
        return dict(result)

    def run_all(self, last: str) -> dict[str, dict[str, Any]]:
        """Run (or reuse) the stages up to ``last``; their results by name."""
        names = [st.name for st in self.stages]
        self.planned = set(names[: names.index(last) + 1])
        return {name: self.run(name) for name in names if name in self.planned}
