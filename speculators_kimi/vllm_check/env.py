"""The scratch environment the checks run in: vLLM's wheel, no dependencies,
on this interpreter's site-packages."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path

__all__ = [
    "VLLM_DEPS",
    "VLLM_VERSION",
    "VLLM_VERSIONS",
    "default_env",
    "ensure_env",
    "say",
]


#: The vLLM releases the checks run on: the newest (the default) first; the
#: others stay reachable (``--vllm-version``) for users pinned to them.
VLLM_VERSIONS = ("0.34.0", "0.33.0")
VLLM_VERSION = VLLM_VERSIONS[0]
#: What ``vllm.model_executor.models.llama_eagle3`` imports beyond our test venv.
VLLM_DEPS = [
    "apache-tvm-ffi==0.1.15.post2",
    "cachetools==8.0.2",
    "cbor2==6.3.0",
    "cloudpickle==3.1.3",
    # vllm.models.kimi_k3 (K3DSparkForCausalLM's package) imports it at module
    # level; the version vLLM 0.34.0 pins.
    "compressed-tensors==0.17.0",
    "einops==0.8.2",
    "fastapi==0.165.0",
    "llguidance==1.9.1",
    "msgspec==0.23.0",
    "openai-harmony==0.0.8",
    "opentelemetry-api==1.45.2",
    "opentelemetry-sdk==1.45.2",
    "opentelemetry-semantic-conventions==0.66b2",
    "partial-json-parser==0.2.1.1.post7",
    "prometheus-client==0.26.0",
    "py-cpuinfo==9.0.0",
    "pybase64==1.5.1",
    "pyzmq==27.3.0",
    "starlette==1.10.0",
    "uvloop==0.23.0",
    "xgrammar==0.2.9",
]


def default_env(version: str = VLLM_VERSION) -> Path:
    """One scratch environment per vLLM version and base environment: it runs on
    the base's site-packages, so another venv gets its own."""
    base = hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]
    return Path.home() / ".cache" / "speculators-kimi" / f"vllm-{version}-{base}"


def say(msg: str) -> None:
    print(f"[vllm-check] {msg}", file=sys.stderr, flush=True)


def env_python(env: Path) -> Path:
    return env / "bin" / "python"


def ensure_env(env: Path, version: str = VLLM_VERSION) -> Path:
    """The scratch environment's python, with vLLM ``version``, built on first
    use (``.ready`` marks it). Processes asking at once (parallel test workers,
    two checks) wait for one build under a lock beside it, instead of clearing
    each other's half-built environment."""
    import fcntl

    ready = env / ".ready"
    # The pinned deps are part of the stamp: an env built before one was added
    # is rebuilt rather than reused without it.
    stamp = f"{version} {sys.prefix} {' '.join(VLLM_DEPS)}\n"
    if ready.is_file() and ready.read_text() == stamp:
        return env_python(env)
    env.parent.mkdir(parents=True, exist_ok=True)
    with open(env.parent / f".{env.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.is_file() and ready.read_text() == stamp:
            return env_python(env)
        return _build_env(env, version, stamp)


def _build_env(env: Path, version: str, stamp: str) -> Path:
    """Build the scratch environment (see :func:`ensure_env`)."""
    python = env_python(env)
    ready = env / ".ready"
    import site
    import sysconfig

    t0 = time.perf_counter()
    say(f"building {env} (vllm {version} without dependencies)")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--clear", str(env)],
        check=True,
    )
    purelib = Path(
        subprocess.run(
            [
                str(python),
                "-c",
                "import sysconfig; print(sysconfig.get_path('purelib'))",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # addsitedir (not a bare path) so the editable install's .pth files apply.
    ours = [sysconfig.get_path("purelib"), *site.getsitepackages()]
    lines = [f"import site; site.addsitedir({p!r})" for p in dict.fromkeys(ours)]
    (purelib / "speculators_kimi_base.pth").write_text("\n".join(lines) + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    subprocess.run([*pip, "--no-deps", f"vllm=={version}", *VLLM_DEPS], check=True)
    ready.write_text(stamp)
    say(f"built in {time.perf_counter() - t0:.0f} s")
    return python
