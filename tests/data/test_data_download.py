"""Downloads from a local HTTP server on 127.0.0.1: resume with Range, lock file, offline message."""

import hashlib
import http.server
import json
import threading

import pytest

from prism_rec.data.core import DataError
from prism_rec.data.download import download

PAYLOAD = bytes(range(256)) * 40


class Handler(http.server.BaseHTTPRequestHandler):
    requests: list = []
    payload = PAYLOAD
    cut_at: int | None = None  # send only this many bytes of a full response, then close

    def do_GET(self):
        type(self).requests.append(self.headers.get("Range"))
        if self.path != "/file.bin":
            self.send_error(404)
            return
        data, start = self.payload, 0
        header = self.headers.get("Range")
        if header:
            start = int(header.removeprefix("bytes=").rstrip("-"))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if type(self).cut_at is not None and not header:
            self.wfile.write(body[: type(self).cut_at])
            self.wfile.flush()
            self.connection.shutdown(2)
            return
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    Handler.requests, Handler.cut_at, Handler.payload = [], None, PAYLOAD
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_download_records_and_verifies_lock(server, tmp_path):
    dest, lock = tmp_path / "raw" / "file.bin", tmp_path / "download.lock.json"
    download(f"{server}/file.bin", dest, lock, timeout=5)
    assert dest.read_bytes() == PAYLOAD
    assert json.loads(lock.read_text()) == {"file.bin": {"sha256": hashlib.sha256(PAYLOAD).hexdigest(),
                                                         "size": len(PAYLOAD)}}
    assert list(dest.parent.iterdir()) == [dest]
    download(f"{server}/file.bin", dest, lock, timeout=5)  # present and matching: no request
    assert Handler.requests == [None]
    dest.write_bytes(PAYLOAD[:-1] + b"x")
    with pytest.raises(DataError, match=r"file\.bin: size 10240 / sha256 .* differ from .*download\.lock\.json"):
        download(f"{server}/file.bin", dest, lock, timeout=5)


def test_resume_after_cut(server, tmp_path):
    dest, lock = tmp_path / "file.bin", tmp_path / "lock.json"
    Handler.cut_at = 4000
    with pytest.raises(DataError, match=r"got 4000 of 10240 bytes|cannot download"):
        download(f"{server}/file.bin", dest, lock, timeout=5)
    assert not dest.exists() and (tmp_path / "file.bin.part").stat().st_size == 4000
    Handler.cut_at = None
    download(f"{server}/file.bin", dest, lock, timeout=5)
    assert Handler.requests == [None, "bytes=4000-"]
    assert dest.read_bytes() == PAYLOAD and not (tmp_path / "file.bin.part").exists()


def test_changed_file_against_lock_is_removed(server, tmp_path):
    dest, lock = tmp_path / "file.bin", tmp_path / "lock.json"
    lock.write_text(json.dumps({"file.bin": {"sha256": "0" * 64, "size": len(PAYLOAD)}}))
    with pytest.raises(DataError, match="differ from"):
        download(f"{server}/file.bin", dest, lock, timeout=5)
    assert list(tmp_path.iterdir()) == [lock]


def test_http_error_and_offline(server, tmp_path):
    with pytest.raises(DataError, match=r"missing\.bin: HTTP 404 .*place it at"):
        download(f"{server}/missing.bin", tmp_path / "missing.bin", tmp_path / "lock.json", timeout=5)
    with pytest.raises(DataError, match=r"cannot download .*seems offline.*place it at"):
        download("http://127.0.0.1:9/file.bin", tmp_path / "file.bin", tmp_path / "lock.json", timeout=2)
    assert list(tmp_path.iterdir()) == []
