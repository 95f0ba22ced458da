"""The series as git history, and back: `git am` in, `git format-patch` out.

`materialize_git` commits the pinned release (subject ``upstream: NAME VERSION``)
and `git am`s every unit on it: one commit per unit, its subject the unit's name,
its body the unit's PR text; `am` is the one way a unit is applied (the build,
`check`, `status`, `pr` and `test-series`). `export` writes each commit above the
upstream commit back as `upstream_patches/<subject>.patch` and rewrites `series`.
Both are deterministic (fixed identity and dates, no signature, zero commit ids,
full blob ids), so exporting an unchanged history rewrites every file byte for byte.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from .errors import VendorError
from .git import NO_USER_CONFIG, VENDOR_IDENTITY, git
from .pin import PR_SECTIONS, Unit, load_pin, load_series, patches_dir

BASE_SUBJECT_PREFIX = "upstream: "
PR_TEMPLATE = "# {name}\n\n" + "\n\n".join(f"## {s}" for s in PR_SECTIONS) + "\n"
FORMAT_PATCH = [
    "format-patch",
    "--stdout",
    "--keep-subject",
    "--no-stat",
    "--no-signature",
    "--zero-commit",
    "--full-index",
    "--no-renames",
    "--binary",
    "--no-numbered",
    "--encoding=UTF-8",
]
_FAILED = re.compile(r"patch failed: (?P<file>.+?):(?P<line>\d+)")
_HEADER = re.compile(r"^(From|Date): .*(\n[ \t].*)*$", re.M)


def commit_release(tree: Path, subject: str) -> str:
    """Commit everything in ``tree`` as one commit with the fixed identity; its id."""
    git(tree, "add", "-A", "-f")
    git(tree, "commit", "-q", "--allow-empty", "-m", subject, env=VENDOR_IDENTITY)
    return git(tree, "rev-parse", "HEAD").stdout.strip()


def explain_failure(unit: Unit, said: str) -> str:
    """Turn `git am`'s output into: unit, file, hunk (header and position)."""
    lines = [f"unit {unit.name}: {unit.path} does not apply to this upstream tree"]
    hunks = unit.hunks()
    for m in _FAILED.finditer(said):
        file, old = m["file"], int(m["line"])
        h = next((h for h in hunks if h.file == file and h.old_start == old), None)
        if h is not None:
            lines.append(
                f"  file {file}, hunk {h.index} of {h.count} "
                f"(upstream line {old}): {h.header}"
            )
        else:
            lines.append(f"  file {file}, at upstream line {old}")
    for f in re.findall(r"error: (\S+): already exists in (?:index|working)", said):
        lines.append(
            f"  file {f}: the unit adds it, but the upstream tree has it already"
        )
    missing = re.findall(
        r"error: (\S+): (?:No such file or directory|does not exist)", said
    )
    lines.extend(f"  file {f}: not in the upstream tree" for f in missing)
    lines.append("git am said:\n    " + "\n    ".join(said.strip().splitlines()))
    lines.append(
        "Fix: rework the unit on the current upstream "
        "(`tools/vendor materialize --git DIR`, edit, `tools/vendor export DIR`), "
        "or use `tools/vendor rebase` when moving to a new release."
    )
    return "\n".join(lines)


def am(tree: Path, unit: Unit) -> list[str]:
    """`git am` ``unit`` onto the history in ``tree``; return the paths it touches.
    A unit that does not apply is aborted and named with its file and hunk."""
    proc = git(
        tree,
        "am",
        "-q",
        "--keep",
        "--keep-cr",
        "--whitespace=nowarn",
        str(unit.path.resolve()),
        env=VENDOR_IDENTITY | NO_USER_CONFIG,
        check=False,
    )
    if proc.returncode != 0:
        git(tree, "am", "--abort", check=False)
        raise VendorError(explain_failure(unit, proc.stdout + proc.stderr))
    return sorted(unit.files())


def materialize_git(
    root: Path,
    tree: Path,
    units: list[Unit] | None = None,
    each: Callable[[Unit, list[str]], object] | None = None,
) -> str:
    """Make ``tree`` (holding the extracted release) a git history of the units
    (``each`` called after each with the paths it touches); return the upstream
    commit's id. Messages keep `#` lines (commit.cleanup)."""
    pin = load_pin(root)
    git(tree, "init", "-q", "-b", "main")
    git(tree, "config", "commit.cleanup", "scissors")
    base = commit_release(tree, f"{BASE_SUBJECT_PREFIX}{pin.name} {pin.version}")
    for unit in load_series(root) if units is None else units:
        touched = am(tree, unit)
        if each is not None:
            each(unit, touched)
    return base


def unit_commits(tree: Path) -> list[tuple[str, str]]:
    """(sha, subject) of each unit commit above the upstream base commit."""
    log = git(tree, "log", "--reverse", "--format=%H %s", "HEAD").stdout.splitlines()
    starts = [
        i
        for i, ln in enumerate(log)
        if ln.split(" ", 1)[1].startswith(BASE_SUBJECT_PREFIX)
    ]
    if not starts:
        raise VendorError(
            f"{tree}: no upstream commit (subject starting {BASE_SUBJECT_PREFIX!r}); "
            "make the history with `tools/vendor materialize --git DIR`"
        )
    out = []
    for line in log[starts[-1] + 1 :]:
        sha, subject = line.split(" ", 1)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", subject):
            raise VendorError(
                f"{tree}: commit {sha[:12]} subject {subject!r} is not a unit name; "
                "each commit's subject must be its unit's name "
                "(e.g. 0002-nested-config); squash fixups into their unit first"
            )
        out.append((sha, subject))
    return out


def format_patch(tree: Path, sha: str, name: str) -> str:
    """One commit as its unit file; a missing PR text gets the template."""
    text = git(tree, *FORMAT_PATCH, "-1", sha, env=NO_USER_CONFIG).stdout
    head, _, rest = text.partition("\n\n")
    fixed = {
        "From": f"{VENDOR_IDENTITY['GIT_AUTHOR_NAME']} "
        f"<{VENDOR_IDENTITY['GIT_AUTHOR_EMAIL']}>",
        "Date": "Sat, 1 Jan 2000 00:00:00 +0000",
    }
    head = _HEADER.sub(lambda m: f"{m[1]}: {fixed[m[1]]}", head)
    if not rest.partition("diff --git ")[0].strip():  # no message body yet
        rest = PR_TEMPLATE.format(name=name) + "\n" + rest.lstrip("\n")
    return f"{head}\n\n{rest}"


def _check_settled(tree: Path) -> None:
    """Refuse a work tree whose history is not what it will be: a rebase or am
    stopped midway (HEAD holds only the units before the stop, and export would
    delete the rest) or changes not yet committed (export reads commits only)."""
    for state in ("rebase-merge", "rebase-apply"):
        path = git(tree, "rev-parse", "--git-path", state).stdout.strip()
        if (tree / path).exists():
            raise VendorError(
                f"{tree}: a git rebase (or am) is stopped midway, and HEAD holds "
                "only the units before the stop; finish it (git rebase --continue) "
                "or abort it (git rebase --abort), then export"
            )
    changed = git(tree, "status", "--porcelain").stdout.splitlines()
    if changed:
        shown = ", ".join(line[3:] for line in changed[:5])
        more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        raise VendorError(
            f"{tree}: uncommitted changes ({shown}{more}); export reads the "
            "commits only: commit them into their unit (git commit --fixup "
            "<unit's commit>, then git rebase -i --autosquash) or stash them"
        )


def export(root: Path, tree: Path) -> list[str]:
    """Rewrite `upstream_patches/` (unit files and series) from the history in
    ``tree``; unit files no commit names any more are removed."""
    _check_settled(tree)
    pdir = patches_dir(root)
    commits = unit_commits(tree)
    names = [name for _, name in commits]
    if len(set(names)) != len(names):
        raise VendorError(f"{tree}: two commits carry the same unit name: {names}")
    texts = {name: format_patch(tree, sha, name) for sha, name in commits}
    for old in pdir.glob("*.patch"):
        if old.stem not in texts:
            old.unlink()
    for name, text in texts.items():
        (pdir / f"{name}.patch").write_text(text)
    (pdir / "series").write_text("".join(f"{n}\n" for n in names))
    return names
