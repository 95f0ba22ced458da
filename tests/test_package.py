"""The release: sdist and wheel from a clean clone, and what each installs."""

from __future__ import annotations

import email.parser
import shlex
import shutil
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from helpers import ROOT, run

sys.path.insert(0, str(ROOT / "tools"))
from vendorlib.build import upstream_console_scripts, upstream_requirements
from vendorlib.pin import load_pin, load_series
from vendorlib.sdist import extract

BIN = Path(sys.executable).parent


def test_static_scripts_are_upstreams():
    """pyproject.toml declares upstream's console scripts as its release does."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for line in upstream_console_scripts(ROOT / ".vendored"):
        name, target = (part.strip() for part in line.split("="))
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


def _fresh_venv(path: Path) -> Path:
    run([sys.executable, "-m", "venv", str(path)])
    py = path / "bin" / "python"
    # The CPU build of torch first, so that the resolver keeps it.
    run([str(py), "-m", "pip", "install", "-q", "torch==2.13.0"], timeout=1200)
    return py


def _smoke(py: Path, work: Path, units: list[str]) -> None:
    """The installed commands, the triton backend and a 2-step CPU training."""
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


@pytest.mark.slow
def test_build_sdist_and_wheel_and_install_each(project_copy, tmp_path):
    dist = tmp_path / "dist"
    # Byte-compiling on (an empty value unsets it): setuptools warns when it is off.
    proc = run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(project_copy)],
        env={"PYTHONDONTWRITEBYTECODE": ""},
        timeout=1200,
    )
    log = proc.stdout + proc.stderr
    assert "warning" not in log.lower(), log
    sdist = next(dist.glob("*.tar.gz"))
    wheel = next(dist.glob("*.whl"))
    run([str(BIN / "twine"), "check", str(sdist), str(wheel)])
    # Nothing generated lands in the source tree.
    assert not list(project_copy.glob("*.egg-info"))
    assert not (project_copy / "speculators_kimi" / "_build_info.py").exists()

    # Requires-Dist: upstream's for the pin, minus the documented drops, plus ours.
    pin = load_pin(project_copy)
    reqs = upstream_requirements(project_copy / ".vendored", pin)
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

    units = [u.name for u in load_series(project_copy)]
    for artifact in (wheel, sdist):
        work = tmp_path / artifact.name.replace(".", "_")
        work.mkdir()
        py = _fresh_venv(work / "venv")
        run([str(py), "-m", "pip", "install", str(artifact)], timeout=1800)
        _smoke(py, work, units)
        shutil.rmtree(work / "venv")
