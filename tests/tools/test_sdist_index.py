"""The upstream sdist comes from the index pip is configured with: a mirror in
pip.conf, with credentials, as pip itself would use it."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from vendorlib.errors import VendorError
from vendorlib.sdist import download, index_file, index_url

NAME, FILE, PAYLOAD = "speculators", "speculators-0.9.0.tar.gz", b"sdist bytes"
USER, PASSWORD = "ci", "s3cret"


@pytest.fixture
def mirror() -> Iterator[tuple[str, list[str]]]:
    """A PEP 691 index serving one file, only with basic auth; yields its base
    URL and the paths it answered."""
    answered: list[str] = []
    expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/elsewhere/"):  # another host: no credentials
                answered.append(f"{self.path} {self.headers.get('Authorization')}")
                self.send_response(200)
                self.send_header("Content-Length", str(len(PAYLOAD)))
                self.end_headers()
                self.wfile.write(PAYLOAD)
                return
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.end_headers()
                return
            answered.append(self.path)
            if self.path == f"/files/moved-{FILE}":
                port = server.server_port
                self.send_response(302)
                self.send_header("Location", f"http://localhost:{port}/elsewhere/")
                self.end_headers()
                return
            if self.path == f"/simple/{NAME}/":
                sha = hashlib.sha256(PAYLOAD).hexdigest()
                entry = {"filename": FILE, "url": f"/files/{FILE}"}
                body = json.dumps({"files": [entry | {"hashes": {"sha256": sha}}]})
                data = body.encode()
            else:
                data = PAYLOAD
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_port}", answered
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def pip_home(tmp_path, monkeypatch) -> Path:
    """No pip configuration but the test's own."""
    for var in ("PIP_INDEX_URL", "PIP_CERT", "PIP_CONFIG_FILE", "VIRTUAL_ENV"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "etc"))
    return tmp_path / "home"


def test_index_url_follows_pip(pip_home, monkeypatch, tmp_path):
    user_conf = pip_home / ".config" / "pip" / "pip.conf"
    user_conf.parent.mkdir(parents=True)
    user_conf.write_text("[global]\nindex-url = https://mirror.example/simple\n")
    assert index_url() == "https://mirror.example/simple"
    user_conf.write_text(
        "[global]\nindex-url = https://a.example/simple\n"
        "[install]\nindex-url = https://b.example/simple\n"
    )
    assert index_url() == "https://b.example/simple"
    chosen = tmp_path / "chosen.conf"
    chosen.write_text("[global]\nindex-url = https://c.example/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(chosen))
    assert index_url() == "https://c.example/simple"
    monkeypatch.setenv("PIP_INDEX_URL", "https://d.example/simple")
    assert index_url() == "https://d.example/simple"


def test_a_mirror_with_credentials_in_pip_conf(pip_home, mirror, tmp_path):
    host, answered = mirror
    conf = pip_home / ".config" / "pip" / "pip.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(f"[global]\nindex-url = http://{USER}:{PASSWORD}@{host}/simple\n")

    url, sha = index_file(NAME, FILE, "hint")
    assert sha == hashlib.sha256(PAYLOAD).hexdigest()
    download(url, tmp_path / FILE)
    assert (tmp_path / FILE).read_bytes() == PAYLOAD
    assert answered == [f"/simple/{NAME}/", f"/files/{FILE}"]
    # A redirect to another host gets no credentials.
    download(url.replace(FILE, f"moved-{FILE}"), tmp_path / "moved")
    assert answered[-1] == "/elsewhere/ None"

    conf.write_text(f"[global]\nindex-url = http://{USER}:wrong@{host}/simple\n")
    with pytest.raises(VendorError) as err:
        index_file(NAME, FILE, "hint")
    assert "401" in str(err.value)
    assert "wrong" not in str(err.value)  # the password is not printed
