"""The demo's stage cache on three file-writing stages (in-process, no model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from speculators_kimi.stage_cache import Stage, StageCache, changes


def _pipeline(out: Path, settings: dict, ran: list[str], said: list[str]):
    def stage(name: str, fail: bool = False):
        def fn() -> dict:
            ran.append(name)
            (out / name).write_text(f"{name} {settings}\n")
            if fail:
                raise RuntimeError(f"{name} interrupted")
            return {"n": len(ran)}

        return fn

    return StageCache(
        out,
        [
            Stage("a", {"x": settings["x"]}, (out / "a",), stage("a")),
            Stage("b", {"y": settings["y"]}, (out / "b",), stage("b")),
            Stage("c", {}, (out / "c",), stage("c", settings.get("fail", False))),
        ],
        say=said.append,
    )


def test_unchanged_stages_are_reused_and_a_change_redoes_the_rest(tmp_path):
    ran: list[str] = []
    said: list[str] = []
    _pipeline(tmp_path, {"x": 1, "y": 1}, ran, said).run_all("c")
    assert ran == ["a", "b", "c"]

    ran.clear()
    _pipeline(tmp_path, {"x": 1, "y": 1}, ran, said).run_all("c")
    assert ran == []
    assert said[-1] == "stage c: done before, reusing"

    ran.clear()
    said.clear()
    _pipeline(tmp_path, {"x": 1, "y": 2}, ran, said).run_all("c")
    assert ran == ["b", "c"]
    assert "b: inputs changed (y 1 -> 2); redoing b, c" in said
    assert (tmp_path / "c").read_text() == "c {'x': 1, 'y': 2}\n"


def test_an_interrupted_stage_resumes_and_later_outputs_are_discarded(tmp_path):
    ran: list[str] = []
    said: list[str] = []
    _pipeline(tmp_path, {"x": 1, "y": 1}, ran, said).run_all("c")
    ran.clear()
    with pytest.raises(RuntimeError):
        _pipeline(tmp_path, {"x": 2, "y": 1, "fail": True}, ran, said).run_all("c")
    assert ran == ["a", "b", "c"]
    assert (tmp_path / ".stages" / "c.started").is_file()

    ran.clear()
    said.clear()
    _pipeline(tmp_path, {"x": 2, "y": 1}, ran, said).run_all("c")
    assert ran == ["c"]
    assert "stage c: resuming an unfinished run (inputs unchanged)" in said

    # Stopping before c (as the demo without training does) leaves c's outputs
    # alone until b changes; then they are discarded, not mixed.
    ran.clear()
    said.clear()
    _pipeline(tmp_path, {"x": 2, "y": 3}, ran, said).run_all("b")
    assert ran == ["b"]
    assert "b: inputs changed (y 1 -> 3); redoing b; discarding c" in said
    assert not (tmp_path / "c").exists()


def test_changes_names_nested_settings():
    assert changes({"a": {"b": 1}, "c": 2}, {"a": {"b": 2}, "d": 3}) == [
        "a.b 1 -> 2",
        "d unset -> 3",
        "c 2 -> unset",
    ]
