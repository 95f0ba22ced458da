"""The release: sdist and wheel from a clean clone, and what each installs."""

from __future__ import annotations

import email.parser
import re
import shlex
import shutil
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from helpers import BIN, ROOT, clean_copy, run
from vendorlib.build import upstream_console_scripts, upstream_requirements
from vendorlib.pin import load_pin, load_series
from vendorlib.sdist import extract

from speculators_kimi import console


def test_static_scripts_are_upstreams():
    """Upstream's console scripts are declared, `speculators` through our door.

    The door (speculators_kimi.console) hands over to the entry point the pinned
    release declares; anything else must be declared as upstream declares it.
    """
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    upstream = upstream_console_scripts(ROOT / ".vendored")
    assert upstream, "the pinned release declares no console script"
    for line in upstream:
        name, target = (part.strip() for part in line.split("="))
        if name == "speculators":
            assert scripts[name] == "speculators_kimi.console:main"
            assert target == console.UPSTREAM_ENTRY
        else:
            assert scripts.get(name) == target, f"pyproject.toml: {name} = {target}"


def test_source_checkout_has_build_info_without_a_build():
    """From the repository root the tree's own speculators_kimi imports."""
    proc = run(
        [sys.executable, "-c", "import speculators_kimi as k; print(k.PATCHES)"],
        cwd=ROOT,
    )
    assert all(u.name in proc.stdout for u in load_series(ROOT))
    assert not (ROOT / "speculators_kimi" / "_build_info.py").exists()


def _requires_dist(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(zf.read(name).decode())
    return meta.get_all("Requires-Dist") or []


def _smoke(py: Path, work: Path, units: list[str]) -> None:
    """The installed commands, the triton backend and a 2-step CPU training."""
    work.mkdir(parents=True, exist_ok=True)
    bin_dir = py.parent
    run([str(bin_dir / "speculators"), "--help"])
    version = run([str(bin_dir / "speculators-kimi"), "--version"]).stdout
    assert all(f"  {u}" in version for u in units), version
    backends = run(
        [
            str(py),
            "-c",
            "import importlib.metadata as m; print([e.value for e in "
            "m.entry_points(group='speculators.attention_backends')])",
        ],
        cwd=work,
    ).stdout
    assert "speculators_kimi.kernels.backend:TritonBackend" in backends
    cmd = run(
        [str(py), "-m", "speculators_kimi.tiny_verifier", str(work / "tiny")],
        cwd=work,
        timeout=600,
    ).stdout.strip()
    argv = shlex.split(cmd)
    argv[0] = str(bin_dir / argv[0])
    argv[argv.index("--max-steps") + 1] = "2"
    out = run(argv, cwd=work, timeout=900)
    assert "train/loss=" in out.stdout + out.stderr
    assert (work / "tiny" / "run" / "checkpoints" / "0" / "model.safetensors").is_file()


#: What pip writes per install, beside the files a distribution installs.
PER_INSTALL = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}


def _installed_files(py: Path) -> dict[str, str]:
    """Each file the installed speculators-kimi (and its speculators) put in place,
    with the hash pip recorded: byte-compiled files and pip's own records aside."""
    listing = run(
        [
            str(py),
            "-c",
            "import importlib.metadata as md\n"
            "for f in md.distribution('speculators-kimi').files:\n"
            "    print(f, f.hash.value if f.hash else '-')",
        ]
    ).stdout.splitlines()
    files = dict(line.rsplit(" ", 1) for line in listing)
    return {
        path: digest
        for path, digest in files.items()
        if "__pycache__" not in path and Path(path).name not in PER_INSTALL
    }


def _pip_cache() -> str:
    """pip's own cache folder: kept across every install here (only the upstream
    sdist's download is forced, through ``XDG_CACHE_HOME``)."""
    return run([sys.executable, "-m", "pip", "cache", "dir"]).stdout.strip()


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> dict[str, Path]:
    """The one packaging build of the run: sdist and wheel from a clean copy."""
    tmp = tmp_path_factory.mktemp("release")
    project = clean_copy(tmp / "project")
    dist = tmp / "dist"
    # Byte-compiling on (an empty value unsets it): setuptools warns when it is off.
    proc = run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(project)],
        env={"PYTHONDONTWRITEBYTECODE": ""},
        timeout=1200,
    )
    return {
        "project": project,
        "log": proc.stdout + proc.stderr,
        "sdist": next(dist.glob("*.tar.gz")),
        "wheel": next(dist.glob("*.whl")),
    }


@pytest.mark.slow
def test_build_sdist_and_wheel(release, tmp_path):
    project, sdist, wheel = release["project"], release["sdist"], release["wheel"]
    # A warning as setuptools, pip and Python print one ("warning: ...",
    # "SetuptoolsDeprecationWarning: ..."), not a file name holding the word.
    assert not re.search(r"warning:", release["log"], re.IGNORECASE), release["log"]
    run([str(BIN / "twine"), "check", str(sdist), str(wheel)])
    # Nothing generated lands in the source tree.
    assert not list(project.glob("*.egg-info"))
    assert not (project / "speculators_kimi" / "_build_info.py").exists()

    # Requires-Dist: upstream's for the pin, minus the documented drops, plus ours.
    pin = load_pin(project)
    reqs = upstream_requirements(project / ".vendored", pin)
    requires = _requires_dist(wheel)
    base = [r for r in requires if "extra ==" not in r]
    assert base == [*reqs.base, 'triton; sys_platform == "linux"', "accelerate>=1.0"]
    for extra, names in reqs.extras.items():
        for req in names:
            assert any(
                r.startswith(req) and f'extra == "{extra}"' in r for r in requires
            ), (extra, req)
    assert not any(d in " ".join(base) for d in pin.drop_requires)

    # A wheel from the sdist needs no network and no git: PATH holds only python,
    # the download cache is empty and the index unreachable.
    src = extract(sdist, tmp_path / "unpacked")
    offline = {
        "HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(tmp_path / "empty-cache"),
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PATH": str(BIN),
    }
    assert shutil.which("git", path=offline["PATH"]) is None
    built = run(
        [str(BIN / "python"), "-m", "build", "--no-isolation", "--wheel"]
        + ["--outdir", str(tmp_path / "offline"), str(src)],
        env=offline,
        timeout=1200,
    )
    assert "Successfully built" in built.stdout
    assert not (tmp_path / "empty-cache").exists(), "the build downloaded something"


def _link_dependencies(wheel: Path, py: Path, links: Path) -> list[str]:
    """The wheel's dependency closure, as this run's environment installed it
    (pip resolved the same Requires-Dist from the index for ``pip install -e``),
    made visible to the fresh venv ``py`` through one ``.pth`` folder of links:
    only those distributions, not the test extras nor our editable install, so a
    dependency the wheel forgets to declare still fails the smoke run. Returns
    the distributions linked."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    todo = [(Requirement(r), {""}) for r in _requires_dist(wheel)]
    dists: dict[str, metadata.Distribution] = {}
    while todo:
        req, extras = todo.pop()
        if req.marker and not any(req.marker.evaluate({"extra": e}) for e in extras):
            continue
        name = canonicalize_name(req.name)
        if name not in dists:
            dists[name] = metadata.distribution(req.name)
            wanted = {"", *req.extras}
            todo += [(Requirement(r), wanted) for r in dists[name].requires or []]
    links.mkdir()
    for dist in dists.values():
        site = Path(str(dist.locate_file("")))
        for top in {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}:
            if not (links / top).exists() and (site / top).exists():
                (links / top).symlink_to(site / top)
    purelib = run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    ).stdout.strip()
    (Path(purelib) / "wheel-dependencies.pth").write_text(f"{links}\n")
    return sorted(dists)


@pytest.mark.slow
def test_wheel_sdist_and_clean_clone_install_into_one_fresh_venv(release, tmp_path):
    """One fresh venv: the wheel, then the sdist, then ``pip install`` of a clean
    clone (the upstream sdist downloaded from the index), each installed in turn.
    The wheel's dependencies are this environment's, linked in
    (`_link_dependencies`; ``pip check`` holds them to the wheel's Requires-Dist),
    not installed a second time. The wheel's install is smoke-tested; the sdist
    and the clone must install the very same files (hashes as pip recorded them)."""
    units = [u.name for u in load_series(release["project"])]
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    linked = _link_dependencies(release["wheel"], py, tmp_path / "dependencies")
    assert {"torch", "transformers", "triton"} <= set(linked), linked
    assert not {"pytest", "speculators-kimi"} & set(linked), linked
    pip = [str(py), "-m", "pip", "install", "--no-compile", "--cache-dir", _pip_cache()]
    # venv's own setuptools would shadow the linked one (torch requires a newer).
    run([str(py), "-m", "pip", "uninstall", "-q", "-y", "setuptools"])
    run([*pip, "--no-deps", str(release["wheel"])], timeout=1800)
    check = run([str(py), "-m", "pip", "check"])
    assert "No broken requirements found" in check.stdout, check.stdout
    _smoke(py, tmp_path / "wheel", units)
    from_wheel = _installed_files(py)
    assert any(p.startswith("speculators/") for p in from_wheel), from_wheel
    # The same release from its sdist (the dependencies are in place already).
    reinstall = [*pip, "--force-reinstall", "--no-deps"]
    run([*reinstall, str(release["sdist"])], timeout=1800)
    assert _installed_files(py) == from_wheel, "the sdist installs other files"

    # `pip install .` from a clean clone (not the one `release` built in: that
    # holds the materialized tree): the upstream sdist comes from the index.
    project = clean_copy(tmp_path / "clone")
    cache = tmp_path / "cache"
    proc = run(
        [*reinstall, str(project)], env={"XDG_CACHE_HOME": str(cache)}, timeout=1800
    )
    assert "Successfully installed" in proc.stdout
    assert (cache / "speculators-kimi/sdists/speculators-0.9.0.tar.gz").is_file()
    assert _installed_files(py) == from_wheel, "the clean clone installs other files"
    check = run(
        [
            str(py),
            "-c",
            (
                "import importlib.metadata as md, speculators, speculators_kimi, "
                "speculators.version as v\n"
                "print(speculators.__file__)\n"
                "print(v.version, speculators_kimi.UPSTREAM_VERSION)\n"
                "print(','.join(speculators_kimi.PATCHES))\n"
                "files = md.distribution('speculators-kimi').files\n"
                "notice = [f for f in files if f.name == 'NOTICE'][0]\n"
                "print(notice.read_text())\n"
            ),
        ],
        cwd=tmp_path,
    )
    lines = check.stdout.splitlines()
    assert lines[0].startswith(str(venv)), "speculators must come from the new venv"
    assert lines[1] == "0.9.0 0.9.0"
    assert lines[2] == ",".join(units)
    assert "speculators 0.9.0" in check.stdout
    for name in units:
        assert f"  - {name}" in check.stdout
    version = run([str(venv / "bin" / "speculators-kimi"), "--version"]).stdout
    assert "upstream speculators 0.9.0" in version
    # Python run from the repository root: speculators_kimi is the tree's (its build
    # info read from upstream_patches/), speculators still the installed one.
    here = run(
        [
            str(py),
            "-c",
            "import speculators, speculators_kimi as k\n"
            "print(speculators.__file__)\nprint(','.join(k.PATCHES))",
        ],
        cwd=project,
    ).stdout.splitlines()
    assert here[0].startswith(str(venv)), here
    assert here[1] == ",".join(units)
    assert not list(project.glob("*.egg-info")), "egg-info in the source tree"
