"""`tools/vendor pr UNIT`: an upstream-ready bundle for one unit.

The bundle holds `git format-patch` commits (DCO-signed by the configured git
identity) on a fresh extraction of the pinned release, or on the tip of a local
upstream clone (`--upstream-git`, three-way cherry-picks), `PR_BODY.md` (from the
unit's PR text, the human-review box unticked), `LINT.txt` (upstream's linters with
its own settings) and `COMMANDS.md` (the git/gh commands that open the PR). Units the
given one depends on (it does not apply without them) come first, in series order.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
import tomllib
from pathlib import Path

from .errors import VendorError
from .git import git
from .gitwork import am, materialize_git
from .lint import FAIL, PASS, SKIPPED, LintResult, lint
from .pin import (
    Pin,
    Unit,
    load_pin,
    load_series,
    patches_dir,
    pinned_tree,
    pr_sections,
)
from .status import check_unit, upstream_tip

HUMAN_REVIEW_BOX = "- [ ] A human has reviewed the code"
BUNDLE_MARK = "PR_BODY.md"


def identity(cwd: Path) -> tuple[str, str]:
    """The git identity for the Signed-off-by line; a clear error when there is none."""

    def config(key: str) -> str:
        return git(cwd, "config", key, check=False).stdout.strip()

    name = os.environ.get("GIT_AUTHOR_NAME") or config("user.name")
    email = os.environ.get("GIT_AUTHOR_EMAIL") or config("user.email")
    if not name or not email:
        raise VendorError(
            "no git identity for the DCO Signed-off-by line. Set it with\n"
            '  git config --global user.name "Your Name"\n'
            "  git config --global user.email you@example.com\n"
            "(or GIT_AUTHOR_NAME/GIT_AUTHOR_EMAIL); upstream requires signed-off "
            "commits"
        )
    return name, email


def _git(tree: Path, ident: tuple[str, str], *args: str, check: bool = True) -> str:
    """git in ``tree`` as the user ``ident`` (name, email) signs off."""
    env = {
        "GIT_AUTHOR_NAME": ident[0],
        "GIT_COMMITTER_NAME": ident[0],
        "GIT_AUTHOR_EMAIL": ident[1],
        "GIT_COMMITTER_EMAIL": ident[1],
    }
    return git(tree, *args, env=env, check=check).stdout


def dependency_chain(units: list[Unit], target: Unit, pristine: Path) -> list[Unit]:
    """``target`` preceded by the earlier units whose files it touches, directly or
    through each other (series order); none if it applies to the release alone."""
    idx = units.index(target)
    if check_unit(target, pristine) is None:
        return [target]
    need = {target}
    grown = True
    while grown:
        grown = False
        files = set().union(*(u.files() for u in need))
        for u in units[:idx]:
            if u not in need and u.files().keys() & files:
                need.add(u)
                grown = True
    return [u for u in units[: idx + 1] if u in need]


def commit_signed(
    work: Path, ident: tuple[str, str], chain: list[Unit], every: list[Unit]
) -> list[Unit]:
    """`git am` the chain onto ``work``'s release, each commit re-authored as
    ``ident``, titled by its PR text and signed off; when the chain does not
    apply, ``every`` unit up to the target instead. Returns the units committed."""
    base = git(work, "rev-parse", "HEAD").stdout.strip()
    sign = ["--signoff", "--message"]
    try:
        for u in chain:
            am(work, u)
            title = pr_sections(u.message())[0] or u.name
            _git(work, ident, "commit", "-q", "--amend", "--reset-author", *sign, title)
    except VendorError:
        if chain == every:
            raise
        git(work, "reset", "-q", "--hard", base)
        return commit_signed(work, ident, every, every)
    return chain


def pr_body(unit: Unit, chain: list[Unit], lint_ok: bool) -> str:
    title, sec = pr_sections(unit.message())
    mapping = [("Purpose", "Problem"), ("Description", "Change"), ("Tests", "Tests")]
    parts = [f"<!-- {title} -->\n"]
    for head, src in mapping:
        parts.append(f"## {head}\n\n{sec.pop(src, '') or '(to be written)'}\n")
    deps = [u.name for u in chain if u is not unit]
    related = "None."
    if deps:
        related = (
            "This change builds on earlier changes that are included as the first "
            f"commits of this PR, in order: {', '.join(deps)}."
        )
    parts.insert(3, f"## Related Issue\n\n{related}\n")
    for head, body in sec.items():
        parts.append(f"## {head}\n\n{body}\n")
    parts.append(
        "## Checklist\n\n"
        "- [ ] Tests added or updated, and `pytest tests/unit` passes\n"
        f"- [{'x' if lint_ok else ' '}] `ruff check`, `ruff format --check` and "
        "`mypy` pass on the changed files\n"
        "- [x] Every commit is signed off (DCO)\n"
        f"{HUMAN_REVIEW_BOX} (leave unticked until a person has read every line)\n"
    )
    return "\n".join(parts)


def _homepage(root: Path) -> str:
    data = tomllib.loads((patches_dir(root) / "UPSTREAM.toml").read_text())
    return str(data.get("upstream", {}).get("homepage", "")).rstrip("/")


def commands(root: Path, unit: Unit, out: Path, title: str, base: str) -> str:
    home = _homepage(root) or "https://github.com/vllm-project/speculators"
    slug = "/".join(home.split("/")[-2:])
    branch = f"kimi/{unit.name}"
    q = shlex.quote
    return f"""# Open the upstream PR for {unit.name}

The patches in this folder are based on {base}.

```sh
git clone {home}.git speculators-upstream
cd speculators-upstream
git checkout -b {branch} origin/main
git am -3 {q(str(out.resolve()))}/*.patch
PYTHONPATH=src python -m pytest tests/unit
git remote add fork git@github.com:<your-github-user>/{slug.split("/")[-1]}.git
git push -u fork {branch}
gh pr create --repo {slug} --base main --head <your-github-user>:{branch} \\
  --draft --title {q(title)} --body-file {q(str((out / "PR_BODY.md").resolve()))}
```

Before marking the PR ready: a person reviews every line and ticks the
"A human has reviewed the code" box; LINT.txt shows the linters' result.
"""


def _prepare_out(out: Path) -> None:
    if out.exists() and any(out.iterdir()):
        if not (out / BUNDLE_MARK).is_file():
            raise VendorError(f"{out}: exists, is not empty and holds no PR bundle")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def _onto_tip(
    upstream_git: Path,
    tip: str,
    work: Path,
    chain: list[Unit],
    ident: tuple[str, str],
    tmp: Path,
    unit_name: str,
) -> Path:
    """A clone of ``upstream_git`` at ``tip`` with the chain's commits from
    ``work`` cherry-picked onto it (three-way); a conflict names the unit and its
    files."""
    repo = tmp / "clone"
    _git(tmp, ident, "clone", "-q", str(upstream_git.resolve()), str(repo))
    _git(repo, ident, "checkout", "-q", "-b", f"kimi/{unit_name}", tip)
    _git(repo, ident, "fetch", "-q", str(work), "main:kimi-pin")
    committer = {"GIT_COMMITTER_NAME": ident[0], "GIT_COMMITTER_EMAIL": ident[1]}
    picks = f"kimi-pin~{len(chain)}..kimi-pin"
    proc = git(repo, "cherry-pick", picks, env=committer, check=False)
    if proc.returncode != 0:
        u = chain[int(_git(repo, ident, "rev-list", "--count", f"{tip}..HEAD"))]
        files = _git(repo, ident, "diff", "--name-only", "--diff-filter=U").split()
        _git(repo, ident, "cherry-pick", "--abort", check=False)
        raise VendorError(
            f"unit {u.name} does not merge onto the upstream tip "
            f"{tip[:12]}: conflicts in {', '.join(files) or '?'}\n"
            f"{proc.stderr.strip()}\nFix: rebase the series first "
            "(`tools/vendor rebase`), or resolve by hand."
        )
    return repo


def _lint_changed(
    repo: Path,
    ident: tuple[str, str],
    base: str,
    base_tree: Path,
    out: Path,
    pin: Pin,
    *,
    mypy: bool,
) -> list[LintResult]:
    """Upstream's linters on the files changed since ``base``, written to
    ``out/LINT.txt`` with the overall verdict."""
    changed = _git(repo, ident, "diff", "--name-only", base, "HEAD").split()
    py = [f for f in changed if f.endswith(".py")]
    results = lint(repo, py, base_tree, mypy=mypy)
    if not mypy:
        results.append(LintResult("mypy --check-untyped-defs", SKIPPED, "--no-mypy"))
    if all(r.status == PASS for r in results):
        overall = "pass"
    elif any(r.status == FAIL for r in results):
        overall = "FAIL"
    else:
        overall = "incomplete (a linter was skipped or is missing)"
    (out / "LINT.txt").write_text(
        f"Upstream linters ({pin.name} pyproject.toml settings) on the changed "
        f"files: {', '.join(py) or 'none'}\n"
        f"overall: {overall}\n\n" + "\n".join(r.render() for r in results)
    )
    return results


def build_bundle(
    root: Path,
    unit_name: str,
    out: Path | None = None,
    upstream_git: Path | None = None,
    sdist: Path | None = None,
    mypy: bool = True,
) -> int:
    pin = load_pin(root)
    units = load_series(root)
    target = next((u for u in units if u.name == unit_name), None)
    if target is None:
        raise VendorError(
            f"no unit {unit_name!r} in the series; units: "
            + ", ".join(u.name for u in units)
        )
    ident = identity(root)
    out = out or root / "build" / "pr" / unit_name
    title = pr_sections(target.message())[0] or unit_name
    with tempfile.TemporaryDirectory() as tmp:
        pristine = pinned_tree(root, Path(tmp) / "pristine", sdist)
        work = pinned_tree(root, Path(tmp) / "work", sdist)
        materialize_git(root, work, [])
        every = units[: units.index(target) + 1]
        chain = commit_signed(
            work, ident, dependency_chain(units, target, pristine), every
        )
        repo, base_tree = work, pristine
        base_desc = f"the {pin.name} {pin.version} release (sdist {pin.sdist})"
        if upstream_git is not None:
            base_tree = Path(tmp) / "tip"
            tip = upstream_tip(upstream_git, base_tree)
            repo = _onto_tip(
                upstream_git, tip, work, chain, ident, Path(tmp), unit_name
            )
            base = tip
            base_desc = f"upstream commit {tip} (the tip of {upstream_git})"
        else:
            base = _git(repo, ident, "rev-list", "--max-parents=0", "HEAD").strip()
        _prepare_out(out)
        _git(
            repo, ident, "format-patch", "-q", "-o", str(out.resolve()), f"{base}..HEAD"
        )
        results = _lint_changed(repo, ident, base, base_tree, out, pin, mypy=mypy)
        lint_ok = all(r.status == PASS for r in results)
    (out / "PR_BODY.md").write_text(pr_body(target, chain, lint_ok))
    (out / "COMMANDS.md").write_text(commands(root, target, out, title, base_desc))
    deps = [u.name for u in chain if u is not target]
    print(f"PR bundle for {unit_name} in {out}")
    if deps:
        print(f"  depends on earlier units (included first): {', '.join(deps)}")
    print(f"  {len(chain)} commit(s), signed off by {ident[0]} <{ident[1]}>")
    for r in results:
        print(f"  {r.tool}: {r.status}")
    return 0
