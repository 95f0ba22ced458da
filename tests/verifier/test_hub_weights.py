"""Verifier weights from a Hub repo id, against a local stand-in for the Hub.

``resolve_verifier_weights``, ``load_verifier_tensors`` and ``speculators-kimi
doctor`` take a Hub id as well as a directory; for an id they go through the real
``huggingface_hub`` client (``hf_hub_download``, ``parse_safetensors_file_metadata``
range requests). Here the sharded Kimi-K2.5 zoo member is served by :mod:`hub_server`
(the Hub's resolve protocol on 127.0.0.1) and the client runs in a subprocess,
because ``huggingface_hub`` reads ``HF_ENDPOINT`` / ``HF_HOME`` / ``HF_HUB_OFFLINE``
when it is imported. Nothing of the library or of ``huggingface_hub`` is mocked.

Importing ``speculators`` costs ~10 s of CPU, so there are two subprocesses: an
online run (fresh ``HF_HOME``) that goes through doctor, resolve, load, the local
directory and a broken repo, telling the server where each phase starts
(``/__mark__/<phase>``), and an offline rerun in the same ``HF_HOME`` that imports
while the online run works, then waits for it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

torch = pytest.importorskip("torch")
if TYPE_CHECKING:
    from torch import Tensor
safetensors_torch = pytest.importorskip("safetensors.torch")
pytest.importorskip("huggingface_hub")

from hub_server import COMMIT, HubServer, Request  # noqa: E402
from zoo_builders import Member, kimi_k25_sharded  # noqa: E402

REPO = "tiny-org/kimi-k25-tiny"
BROKEN = "tiny-org/kimi-k25-broken"
INDEX = "model.safetensors.index.json"
EMBED = "language_model.model.embed_tokens.weight"
HEAD = "language_model.lm_head.weight"
NORM = "language_model.model.norm.weight"
EMBED_SHARD = "model-00001-of-00004.safetensors"
HEAD_SHARD = "model-00004-of-00004.safetensors"  # head and final norm
# The broken repo's index still names the head / final-norm shard, which it lacks.
MISSING = HEAD_SHARD
RUN_TIMEOUT = 240
SPEC_FIELDS = (
    "prefix",
    "vocab_size",
    "hidden_size",
    "model_type",
    "embed",
    "head",
    "tied",
    "norm",
    "norm_bias",
    "norm_kind",
    "norm_eps",
    "head_scale",
    "quantization",
    "shards",
)

# The client, run as ``python -c CLIENT <job JSON>`` (see ``hub_runs``). Results
# go to ``job["out"]``: record.json, the pickled Hub spec, loaded tensors.
CLIENT = textwrap.dedent(
    """
    import contextlib, io, json, os, pickle, sys, time, traceback
    import urllib.request
    from dataclasses import asdict, replace
    from functools import partial
    from importlib.metadata import entry_points
    from pathlib import Path

    import torch
    from safetensors.torch import save_file
    from speculators.utils.verifier_weights import (
        load_verifier_tensors,
        resolve_verifier_weights,
    )

    job = json.loads(sys.argv[1])
    out = Path(job["out"])
    out.mkdir(parents=True, exist_ok=True)
    endpoint = os.environ["HF_ENDPOINT"]
    rows = torch.tensor(job["rows"], dtype=torch.bool)
    record = {}

    def mark(label):
        urllib.request.urlopen(f"{endpoint}/__mark__/{label}").read()

    def attempt(name, function):
        try:
            return function()
        except Exception as err:
            record[name] = {
                "types": [cls.__name__ for cls in type(err).__mro__],
                "message": str(err),
                "traceback": traceback.format_exc(),
            }
            return None

    def save(name, tensors):
        named = {"embed": tensors.embed, "head": tensors.head}
        named["norm"] = tensors.norm_weight
        save_file({k: v.contiguous() for k, v in named.items()}, str(out / name))

    if job["go"]:
        deadline = time.monotonic() + job["wait_s"]
        while not Path(job["go"]).exists():
            if time.monotonic() > deadline:
                sys.exit("timed out waiting for the online run")
            time.sleep(0.05)

    if job["mode"] == "online":
        # The function the speculators-kimi console script calls and exits with.
        (script,) = entry_points(group="console_scripts", name="speculators-kimi")
        mark("doctor")
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            code = script.load()(["doctor", job["repo"], "--json"])
        record["doctor"] = {"code": code, "report": json.loads(stdout.getvalue())}

        mark("resolve")
        spec = resolve_verifier_weights(job["repo"])
        mark("load")
        save("hub.safetensors", load_verifier_tensors(spec, head_rows=rows))
        mark("local")
        local = resolve_verifier_weights(job["local"])
        save("local.safetensors", load_verifier_tensors(local, head_rows=rows))
        record["hub_spec"] = asdict(spec)
        record["local_spec"] = asdict(local)
        (out / "hub_spec.pickle").write_bytes(pickle.dumps(spec))

        mark("broken-resolve")
        attempt("broken_resolve", lambda: resolve_verifier_weights(job["broken"]))
        mark("broken-load")
        broken = replace(spec, source=job["broken"])
        attempt("broken_load", lambda: load_verifier_tensors(broken, head_rows=rows))
    else:
        spec = pickle.loads(Path(job["spec"]).read_bytes())
        mark("offline-load")
        save("offline.safetensors", load_verifier_tensors(spec, head_rows=rows))
        mark("offline-resolve")
        resolve = partial(resolve_verifier_weights, job["repo"])
        resolved = attempt("offline_resolve", resolve)
        if resolved is not None:
            record["offline_spec"] = asdict(resolved)
    mark("end-" + job["mode"])
    (out / "record.json").write_text(json.dumps(record))
    """
)


@dataclass
class Run:
    """One client subprocess: where it wrote its results, and how it ended."""

    out: Path
    returncode: int | None
    stdout: str
    stderr: str

    def record(self) -> dict[str, Any]:
        assert self.returncode == 0, (
            f"client exited {self.returncode}\n--- stdout ---\n{self.stdout[-4000:]}"
            f"\n--- stderr ---\n{self.stderr[-8000:]}"
        )
        return json.loads((self.out / "record.json").read_text())

    def tensors(self, name: str) -> dict[str, Tensor]:
        self.record()
        return safetensors_torch.load_file(str(self.out / name))


@dataclass
class HubRuns:
    """Both client runs, the server's log split at their phase markers, the mask."""

    online: Run
    offline: Run
    phases: dict[str, list[Request]]
    rows: Tensor
    hf_home: Path


def _rows(vocab: int) -> Tensor:
    """A draft-vocabulary mask with runs and gaps (3 of every 7 ids, plus the last)."""
    ids = torch.arange(vocab)
    return ((ids % 7 >= 2) & (ids % 7 < 5)) | (ids == vocab - 1)


def _spec_fields(spec: dict[str, Any]) -> dict[str, Any]:
    return {name: spec[name] for name in SPEC_FIELDS}


def _full_downloads(requests: list[Request], repo: str = REPO) -> list[str]:
    return sorted(
        name
        for r in requests
        if r.repo == repo and r.full_download and (name := r.filename) is not None
    )


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> Member:
    """The sharded Kimi-K2.5 zoo member: embedding | layers 0-1 | rest | head+norm."""
    member = kimi_k25_sharded(tmp_path_factory.mktemp("hub") / "kimi-k25")
    weight_map = json.loads((member.path / INDEX).read_text())["weight_map"]
    assert (weight_map[EMBED], weight_map[HEAD], weight_map[NORM]) == (
        EMBED_SHARD,
        HEAD_SHARD,
        HEAD_SHARD,
    )
    unused = set(weight_map.values()) - {EMBED_SHARD, HEAD_SHARD}
    assert len(unused) >= 1, "the checks need a shard that holds none of them"
    return member


@pytest.fixture(scope="module")
def hub(zoo: Member, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    """The checkpoint as REPO, and as BROKEN without the head/norm shard."""
    broken = tmp_path_factory.mktemp("hub-broken") / "kimi-k25"
    shutil.copytree(zoo.path, broken)
    (broken / MISSING).unlink()
    with HubServer({REPO: zoo.path, BROKEN: broken}) as server:
        yield server


def _client_env(hub: HubServer, hf_home: Path) -> dict[str, str]:
    """This environment minus any Hugging Face settings, pointed at ``hub``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))
    }
    env.update(
        HF_ENDPOINT=hub.endpoint,
        HF_HOME=str(hf_home),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_XET="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
    )
    return env


def _start(job: dict[str, Any], env: dict[str, str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CLIENT, json.dumps(job)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen, out: Path) -> Run:
    try:
        stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    return Run(out, proc.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def hub_runs(
    zoo: Member, hub: HubServer, tmp_path_factory: pytest.TempPathFactory
) -> HubRuns:
    """The online run (fresh HF_HOME), then the offline rerun in the same HF_HOME."""
    work = tmp_path_factory.mktemp("hub-runs")  # cwd: REPO is no local directory
    env = _client_env(hub, work / "hf-home")
    rows = _rows(int(zoo.embed.shape[0]))
    go = work / "online-done"
    job = {
        "repo": REPO,
        "broken": BROKEN,
        "local": str(zoo.path),
        "rows": rows.tolist(),
        "wait_s": RUN_TIMEOUT,
        "spec": str(work / "online" / "hub_spec.pickle"),
    }
    offline_job = {
        **job,
        "mode": "offline",
        "out": str(work / "offline"),
        "go": str(go),
    }
    online_job = {**job, "mode": "online", "out": str(work / "online"), "go": None}
    offline_proc = _start(offline_job, {**env, "HF_HUB_OFFLINE": "1"}, work)
    try:
        online = _finish(_start(online_job, env, work), work / "online")
    finally:
        go.touch()
        offline = _finish(offline_proc, work / "offline")
    return HubRuns(online, offline, hub.phases(), rows, work / "hf-home")


def _fetch(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_server_speaks_resolve_protocol(hub: HubServer, zoo: Member) -> None:
    """The stand-in answers as the Hub does (what the client relies on)."""
    url = f"{hub.endpoint}/{REPO}/resolve/main/{EMBED_SHARD}"
    data = (zoo.path / EMBED_SHARD).read_bytes()
    status, headers, body = _fetch(url)
    assert (status, body, headers["X-Repo-Commit"]) == (200, data, COMMIT)
    assert headers["Content-Length"] == str(len(data)) and headers["ETag"]
    status, headers, body = _fetch(url, Range="bytes=8-15")
    assert (status, body) == (206, data[8:16])
    assert headers["Content-Range"] == f"bytes 8-15/{len(data)}"
    assert _fetch(url, Range="bytes=-4")[2] == data[-4:]
    assert _fetch(url, Range=f"bytes={len(data)}-")[0] == 416
    status, headers, _ = _fetch(f"{hub.endpoint}/{REPO}/resolve/main/nope.bin")
    assert (status, headers["X-Error-Code"]) == (404, "EntryNotFound")
    assert headers["X-Repo-Commit"] == COMMIT
    status, headers, _ = _fetch(f"{hub.endpoint}/{REPO}/resolve/v9/config.json")
    assert (status, headers["X-Error-Code"]) == (404, "RevisionNotFound")
    status, headers, _ = _fetch(f"{hub.endpoint}/tiny-org/none/resolve/main/x")
    assert (status, headers["X-Error-Code"]) == (404, "RepoNotFound")


def test_hub_resolution_matches_local(hub_runs: HubRuns) -> None:
    """A repo id resolves to the same keys, shapes and shards as the directory."""
    record = hub_runs.online.record()
    hub_spec, local_spec = record["hub_spec"], record["local_spec"]
    assert hub_spec["source"] == REPO
    assert _spec_fields(hub_spec) == _spec_fields(local_spec)
    assert hub_spec["prefix"] == "language_model.model"
    assert (hub_spec["embed"]["key"], hub_spec["embed"]["shard"]) == (
        EMBED,
        EMBED_SHARD,
    )
    assert (hub_spec["head"]["key"], hub_spec["head"]["shard"]) == (HEAD, HEAD_SHARD)
    assert (hub_spec["norm"]["key"], hub_spec["norm"]["shard"]) == (NORM, HEAD_SHARD)
    assert hub_spec["tied"] is False
    assert hub_spec["shards"] == [EMBED_SHARD, HEAD_SHARD]


def test_hub_tensors_bit_equal_local(hub_runs: HubRuns, zoo: Member) -> None:
    """Tensors downloaded from the Hub equal the local reads, bit for bit."""
    hub = hub_runs.online.tensors("hub.safetensors")
    local = hub_runs.online.tensors("local.safetensors")
    assert hub.keys() == local.keys() == {"embed", "head", "norm"}
    for name in hub:
        assert hub[name].dtype == local[name].dtype, name
        assert torch.equal(hub[name], local[name]), name
    # Only the draft-vocabulary rows of the head, and the verifier's own tensors.
    assert hub["head"].shape == (int(hub_runs.rows.sum()), zoo.head.shape[1])
    assert torch.equal(hub["head"], zoo.head[hub_runs.rows])
    assert torch.equal(hub["embed"], zoo.embed)
    norm: Any = zoo.norm
    assert torch.equal(hub["norm"], norm.weight.detach())


def test_hub_downloads_only_needed_shards(hub_runs: HubRuns, zoo: Member) -> None:
    """Whole files: config, index, the embed and head/norm shards, each once.

    Shard headers are read with range requests (nothing is cached yet when
    resolving), and only those of the shards holding a candidate: a shard holding
    none of the three tensors is never requested at all.
    """
    hub_runs.online.record()
    phases = hub_runs.phases
    online = [r for label in ("doctor", "resolve", "load") for r in phases[label]]
    # doctor plans the draft as training builds it, whose verifier config asks
    # the repo's revision (transformers' resolve_revision): metadata, no file
    assert all(r.repo == REPO or r.path == f"/api/models/{REPO}" for r in online), (
        "only URLs of the repo"
    )
    assert _full_downloads(online) == sorted(
        ["config.json", INDEX, EMBED_SHARD, HEAD_SHARD]
    )
    resolve_downloads = _full_downloads(phases["resolve"])
    assert not [f for f in resolve_downloads if f.endswith(".safetensors")]
    assert _full_downloads(phases["load"]) == [EMBED_SHARD, HEAD_SHARD]
    ranged = {r.filename for r in phases["resolve"] if r.range and r.status == 206}
    assert {EMBED_SHARD, HEAD_SHARD} <= ranged
    shards = set(json.loads((zoo.path / INDEX).read_text())["weight_map"].values())
    for shard in shards - {EMBED_SHARD, HEAD_SHARD}:
        assert not [r for r in online if r.filename == shard], shard
    assert not phases["local"], "a local directory makes no request"


def test_cache_layout(hub_runs: HubRuns, zoo: Member) -> None:
    """The standard hub cache: refs/main -> commit, snapshot links to etag blobs.

    It holds exactly the downloaded files: no shard that was only range-read.
    """
    hub_runs.online.record()
    repo = hub_runs.hf_home / "hub" / f"models--{REPO.replace('/', '--')}"
    assert (repo / "refs" / "main").read_text() == COMMIT
    snapshot = repo / "snapshots" / COMMIT
    files = sorted(path.name for path in snapshot.iterdir())
    assert files == sorted(["config.json", INDEX, EMBED_SHARD, HEAD_SHARD])
    for name in files:
        data = (zoo.path / name).read_bytes()
        blob = (snapshot / name).resolve()
        assert blob.parent == (repo / "blobs").resolve()
        assert blob.name == hashlib.sha256(data).hexdigest()
        assert blob.read_bytes() == data


def test_offline_load_from_cache(hub_runs: HubRuns) -> None:
    """HF_HUB_OFFLINE=1 in the same HF_HOME loads the same tensors, no request."""
    offline = hub_runs.offline.tensors("offline.safetensors")
    online = hub_runs.online.tensors("hub.safetensors")
    for name in online:
        assert torch.equal(offline[name], online[name]), name
    assert not hub_runs.phases["offline-load"]


def test_offline_resolve_from_cache(hub_runs: HubRuns) -> None:
    """HF_HUB_OFFLINE=1 resolves a cached repo id as online, with no request."""
    record = hub_runs.offline.record()
    assert not hub_runs.phases["offline-resolve"]
    assert "offline_resolve" not in record, record["offline_resolve"]["traceback"]
    online = hub_runs.online.record()["hub_spec"]
    assert _spec_fields(record["offline_spec"]) == _spec_fields(online)


def test_doctor_reports_hub_keys(hub_runs: HubRuns) -> None:
    """``doctor <repo id> --json`` succeeds from headers alone: no shard download."""
    record = hub_runs.online.record()
    code, report = record["doctor"]["code"], record["doctor"]["report"]
    assert code == 0, report["problems"]
    assert report["ok"] and report["verifier"] == REPO
    assert report["text_config"]["found_at"] == "text_config"
    weights, local = report["weights"], record["local_spec"]
    assert _spec_fields(weights) == _spec_fields(local)
    assert weights["overrides"]["verifier_head_key"] == HEAD
    doctor = hub_runs.phases["doctor"]
    assert not [f for f in _full_downloads(doctor) if f.endswith(".safetensors")]


@pytest.mark.parametrize("phase", ["broken_resolve", "broken_load"])
def test_missing_shard_error_names_it(hub_runs: HubRuns, phase: str) -> None:
    """A shard the index names but the Hub lacks (404) is named in the error.

    Resolution already fails (it reads every shard's header); loading with a spec
    resolved before the shard went away fails on its download.
    """
    error = hub_runs.online.record()[phase]
    assert MISSING in error["message"] and BROKEN in error["message"]
    requests = hub_runs.phases[phase.replace("_", "-")]
    assert MISSING in {r.filename for r in requests if r.status == 404}


@pytest.mark.parametrize("phase", ["broken_resolve", "broken_load"])
def test_missing_shard_is_verifier_weights_error(hub_runs: HubRuns, phase: str) -> None:
    """The documented error type, with the local path's re-download hint."""
    error = hub_runs.online.record()[phase]
    assert "VerifierWeightsError" in error["types"], error["types"]
    assert "weight map" in error["message"] and MISSING in error["message"]
