"""A local stand-in for the Hugging Face Hub's file-resolve endpoint.

Serves directories as model repos at ``/{repo_id}/resolve/{revision}/{filename}``
(HEAD and GET, single-range GETs answered 206) with the headers the real
``huggingface_hub`` client needs: ``X-Repo-Commit`` (a 40-hex commit), ``ETag``
(the sha256 of the content, as the Hub gives for LFS files), ``Content-Length``
and ``Accept-Ranges``. A missing file answers 404 with ``X-Error-Code:
EntryNotFound``, an unknown repo 404 ``RepoNotFound``, an unknown revision 404
``RevisionNotFound``, like the Hub. Every request is logged, so tests can assert
which files were fetched and how. ``GET /__mark__/<label>`` logs a marker a client
can send between the phases of one run.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import unquote, urlsplit

from local_server import LocalServer

__all__ = ["COMMIT", "HubServer", "Request"]

COMMIT = hashlib.sha1(b"tiny-org hub fixture").hexdigest()
MARK = "MARK"
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


@dataclass(frozen=True)
class Request:
    """One request as the server saw and answered it."""

    method: str
    path: str
    repo: str | None = None
    filename: str | None = None
    range: str | None = None
    status: int = 0
    body_bytes: int = 0

    @property
    def full_download(self) -> bool:
        """A GET of a whole file (no Range header) that was answered 200."""
        return self.method == "GET" and self.range is None and self.status == 200


class HubServer(LocalServer):
    """A threaded HTTP server on 127.0.0.1 (a free port) serving repo directories.

    Use as a context manager; ``endpoint`` is the value for ``HF_ENDPOINT``.
    """

    def __init__(self, repos: dict[str, Path], commit: str = COMMIT):
        self.repos = {repo: Path(path) for repo, path in repos.items()}
        self.commit = commit
        self.log: list[Request] = []
        self._lock = threading.Lock()
        self._etags: dict[Path, str] = {}
        super().__init__(_handler(self))

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def record(self, request: Request) -> None:
        with self._lock:
            self.log.append(request)

    def etag(self, path: Path) -> str:
        with self._lock:
            if path not in self._etags:
                self._etags[path] = hashlib.sha256(path.read_bytes()).hexdigest()
            return self._etags[path]

    def phases(self) -> dict[str, list[Request]]:
        """The log split at markers: ``{label: requests after it}`` ("" first)."""
        with self._lock:
            log = list(self.log)
        phases: dict[str, list[Request]] = {"": []}
        current = ""
        for request in log:
            if request.method == MARK:
                current = request.path
                phases[current] = []
            else:
                phases[current].append(request)
        return phases


def _handler(server: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # (path, repo, filename, range) of the resolve request being answered.
        _entry: tuple[str, str | None, str | None, str | None] | None = None

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the structured log is ``server.log``."""

        def do_HEAD(self) -> None:
            self._serve(body=False)

        def do_GET(self) -> None:
            path = unquote(urlsplit(self.path).path)
            if path.startswith("/__mark__/"):
                server.record(Request(MARK, path.removeprefix("/__mark__/")))
                self._reply(200, {}, b"")
                return
            self._serve(body=True)

        def _reply(
            self,
            status: int,
            headers: dict[str, str],
            body: bytes,
            *,
            send_body: bool = True,
            length: int | None = None,
        ) -> None:
            # Logged before the reply goes out: a client that reacts to it (say, by
            # marking its next phase) can never be logged ahead of it.
            if self._entry is not None:
                sent = len(body) if send_body else 0
                server.record(Request(self.command, *self._entry, status, sent))
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header(
                "Content-Length", str(len(body) if length is None else length)
            )
            self.end_headers()
            if send_body and body:
                self.wfile.write(body)

        def _error(self, code: str, message: str, *, body: bool) -> None:
            headers = {
                "X-Error-Code": code,
                "X-Error-Message": message,
                "Content-Type": "application/json",
            }
            if code != "RepoNotFound":
                headers["X-Repo-Commit"] = server.commit
            payload = json.dumps({"error": message}).encode()
            self._reply(404, headers, payload, send_body=body)

        def _serve(self, *, body: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            byte_range = self.headers.get("Range")
            match = _RESOLVE.match(path)
            repo = match["repo"] if match else None
            filename = match["file"] if match else None
            self._entry = (path, repo, filename, byte_range)
            if match is None or repo not in server.repos:
                self._error("RepoNotFound", "Repository not found", body=body)
            elif match["rev"] not in ("main", server.commit):
                self._error("RevisionNotFound", "Invalid rev id", body=body)
            else:
                root = server.repos[repo].resolve()
                file = (root / match["file"]).resolve()
                if not file.is_file() or root not in file.parents:
                    self._error("EntryNotFound", "Entry not found", body=body)
                else:
                    self._file(file, byte_range, body=body)
            self._entry = None

        def _file(self, file: Path, byte_range: str | None, *, body: bool) -> None:
            size = file.stat().st_size
            headers = {
                "X-Repo-Commit": server.commit,
                "ETag": f'"{server.etag(file)}"',
                "Accept-Ranges": "bytes",
                "Content-Type": "application/octet-stream",
            }
            start, end, status = 0, size - 1, 200
            if byte_range is not None:
                parsed = _RANGE.match(byte_range.strip())
                if parsed is None or parsed.groups() == ("", ""):
                    return self._unsatisfiable(headers, size)
                first, last = parsed.groups()
                if first == "":  # suffix range: the last N bytes
                    start = max(size - int(last), 0)
                else:
                    start = int(first)
                    end = min(int(last), size - 1) if last else size - 1
                if start >= size or start > end:
                    return self._unsatisfiable(headers, size)
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
                status = 206
            with file.open("rb") as handle:
                handle.seek(start)
                data = handle.read(end - start + 1) if body else b""
            self._reply(status, headers, data, send_body=body, length=end - start + 1)

        def _unsatisfiable(self, headers: dict[str, str], size: int) -> None:
            headers = {**headers, "Content-Range": f"bytes */{size}"}
            self._reply(416, headers, b"")

    return Handler
