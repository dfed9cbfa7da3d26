"""A small Hugging Face Hub emulator on 127.0.0.1, for testing through the real client.

Repos live in a folder: `ROOT/ORG/NAME/commits/<40-hex>/<files>` and `ROOT/ORG/NAME/refs/<name>`
(a text file holding a commit). The emulator answers the endpoints `huggingface_hub` calls, in
the Hub's JSON shapes: model info (with `siblings` and `lfs` when `?blobs=true`), paths-info,
tree, and `resolve` (HEAD and GET, with `X-Repo-Commit`, `ETag`, `X-Linked-Etag`,
`X-Linked-Size`; LFS files redirect with 302 to a second "CDN" port). Unknown repos, revisions and
paths get a 404 with `X-Error-Code`; `/api/agent-harnesses` is a 404. Fault modes a test can turn
on: `401`, `500`, `hang` (sleep past the client timeout) and `truncate` (half a body).

Run standalone: `python tests/support/hub_emulator.py --repos DIR --port N`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".onnx", ".msgpack", ".h5")


def is_lfs(path: str) -> bool:
    """Whether the emulated repo stores `path` in LFS (by suffix, as the Hub's .gitattributes)."""
    return path.endswith(LFS_SUFFIXES)


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(data: bytes) -> bytes:
    sha = hashlib.sha256(data).hexdigest()
    spec = "version https://git-lfs.github.com/spec/v1"
    return f"{spec}\noid sha256:{sha}\nsize {len(data)}\n".encode()


def make_repo(
    root: Path, repo: str, files: dict[str, bytes], *, refs: tuple[str, ...] = ("main",)
) -> str:
    """Write one commit of `repo` under `root`, point `refs` at it, and return its 40-hex SHA."""
    manifest = b"".join(
        name.encode() + b"\0" + hashlib.sha256(data).digest()
        for name, data in sorted(files.items())
    )
    commit = hashlib.sha1(repo.encode() + b"\0" + manifest).hexdigest()
    base = root / repo / "commits" / commit
    for name, data in files.items():
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_bytes(data)
    (root / repo / "refs").mkdir(parents=True, exist_ok=True)
    for ref in refs:
        (root / repo / "refs" / ref).write_text(commit)
    return commit


class _Handler(BaseHTTPRequestHandler):
    server: _HubServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        self.server.emulator.requests.append(f"{self.command} {self.path}")

    # --- plumbing -----------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None,
              content_type: str = "application/json") -> None:
        emulator = self.server.emulator
        truncate = emulator.fault_applies("truncate", self.path) and self.command == "GET"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if truncate:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command == "HEAD":
            return
        if truncate:
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)

    def _json(self, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), headers)

    def _error(self, status: int, code: str | None, message: str,
               extra: dict[str, str] | None = None) -> None:
        headers = {"X-Error-Message": message, **(extra or {})}
        if code:
            headers["X-Error-Code"] = code
        self._json(status, {"error": message}, headers)

    def _faulted(self) -> bool:
        emulator = self.server.emulator
        if emulator.fault_applies("hang", self.path):
            time.sleep(emulator.hang_seconds)
        if emulator.fault_applies("401", self.path):
            self._error(401, None, "Invalid credentials in Authorization header")
            return True
        if emulator.fault_applies("500", self.path):
            self._error(500, None, "Internal Error")
            return True
        return False

    # --- verbs --------------------------------------------------------------------------------

    def do_HEAD(self) -> None:  # noqa: N802 - stdlib name
        self._route()

    def do_GET(self) -> None:  # noqa: N802
        self._route()

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self._body = self.rfile.read(length) if length else b""
        self._route()

    def _route(self) -> None:
        if self._faulted():
            return
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        query = parse_qs(url.query)
        emulator = self.server.emulator
        if self.server.is_cdn:
            return self._cdn(parts)
        if parts[:2] == ["api", "agent-harnesses"]:
            return self._error(404, None, "Not Found")
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            repo = "/".join(parts[2:4])
            rest = parts[4:]
            if not emulator.repo_exists(repo):
                return self._error(404, "RepoNotFound", "Repository not found")
            if not rest:
                return self._model_info(repo, "main", query)
            if len(rest) >= 2 and rest[0] == "revision":
                return self._model_info(repo, rest[1], query)
            if len(rest) >= 2 and rest[0] == "paths-info" and self.command == "POST":
                return self._paths_info(repo, rest[1])
            if len(rest) >= 2 and rest[0] == "tree":
                return self._tree(repo, rest[1], "/".join(rest[2:]), query)
            return self._error(404, None, "Not Found")
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]))
        return self._error(404, None, "Not Found")

    # --- endpoints ----------------------------------------------------------------------------

    def _commit_or_404(self, repo: str, revision: str) -> str | None:
        commit = self.server.emulator.resolve(repo, revision)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return commit

    def _model_info(self, repo: str, revision: str, query: dict[str, list[str]]) -> None:
        commit = self._commit_or_404(repo, revision)
        if commit is None:
            return
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        siblings = []
        for path, data in self.server.emulator.files(repo, commit).items():
            sibling: dict[str, object] = {"rfilename": path}
            if blobs:
                stored = lfs_pointer(data) if is_lfs(path) else data
                sibling.update(size=len(data), blobId=git_blob_id(stored))
                if is_lfs(path):
                    sibling["lfs"] = {
                        "sha256": hashlib.sha256(data).hexdigest(),
                        "size": len(data),
                        "pointerSize": len(stored),
                    }
            siblings.append(sibling)
        self._json(200, {
            "_id": hashlib.md5(repo.encode()).hexdigest()[:24],
            "id": repo,
            "modelId": repo,
            "author": repo.split("/")[0],
            "sha": commit,
            "lastModified": "2026-01-01T00:00:00.000Z",
            "private": False,
            "gated": False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "library_name": "transformers",
            "siblings": siblings,
        })

    def _entry(self, path: str, data: bytes) -> dict[str, object]:
        stored = lfs_pointer(data) if is_lfs(path) else data
        entry: dict[str, object] = {
            "type": "file", "oid": git_blob_id(stored), "size": len(data), "path": path,
        }
        if is_lfs(path):
            entry["lfs"] = {
                "oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                "pointerSize": len(stored),
            }
        return entry

    def _paths_info(self, repo: str, revision: str) -> None:
        commit = self._commit_or_404(repo, revision)
        if commit is None:
            return
        form = parse_qs(self._body.decode())
        files = self.server.emulator.files(repo, commit)
        self._json(200, [self._entry(p, files[p]) for p in form.get("paths", []) if p in files])

    def _tree(self, repo: str, revision: str, folder: str, query: dict[str, list[str]]) -> None:
        commit = self._commit_or_404(repo, revision)
        if commit is None:
            return
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        prefix = f"{folder}/" if folder else ""
        entries, dirs = [], set()
        for path, data in self.server.emulator.files(repo, commit).items():
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix):]
            if "/" in rest and not recursive:
                dirs.add(prefix + rest.split("/")[0])
                continue
            entries.append(self._entry(path, data))
        entries += [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d}
                    for d in sorted(dirs)]
        self._json(200, entries)

    def _resolve(self, repo: str, revision: str, path: str) -> None:
        emulator = self.server.emulator
        if not emulator.repo_exists(repo):
            return self._error(404, "RepoNotFound", "Repository not found")
        commit = self._commit_or_404(repo, revision)
        if commit is None:
            return
        files = emulator.files(repo, commit)
        if path not in files:
            return self._error(404, "EntryNotFound", f"{path} does not exist",
                               {"X-Repo-Commit": commit})
        data = files[path]
        headers = {"X-Repo-Commit": commit, "Accept-Ranges": "bytes"}
        if is_lfs(path):
            sha = hashlib.sha256(data).hexdigest()
            emulator.blobs[sha] = data
            headers.update({
                "ETag": f'"{sha}"',
                "X-Linked-Etag": f'"{sha}"',
                "X-Linked-Size": str(len(data)),
                "Location": f"{emulator.cdn_url}/blobs/{sha}",
            })
            return self._send(302, b"", headers, "text/plain")
        headers["ETag"] = f'"{git_blob_id(data)}"'
        self._send(200, emulator.served.get(path, data), headers, "application/octet-stream")

    def _cdn(self, parts: list[str]) -> None:
        data = self.server.emulator.blobs.get(parts[-1]) if parts[:1] == ["blobs"] else None
        if data is None:
            return self._error(404, None, "Not Found")
        self._send(200, data, {"ETag": f'"{parts[-1]}"'}, "application/octet-stream")


class _HubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, emulator: HubEmulator, port: int, is_cdn: bool) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.emulator = emulator
        self.is_cdn = is_cdn


class HubEmulator:
    """The emulator: `start()`, then point `HF_ENDPOINT` at `.url`; `set_fault(...)` to break it."""

    def __init__(self, root: Path, port: int = 0) -> None:
        self.root = Path(root)
        self.requests: list[str] = []
        self.blobs: dict[str, bytes] = {}
        self.served: dict[str, bytes] = {}  # a non-LFS path served with other bytes than listed
        self.hang_seconds = 5.0
        self._fault: tuple[str, str | None] | None = None
        self._hub = _HubServer(self, port, is_cdn=False)
        self._cdn = _HubServer(self, 0, is_cdn=True)
        self.url = f"http://127.0.0.1:{self._hub.server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self._cdn.server_address[1]}"
        self._threads: list[threading.Thread] = []

    # faults
    def set_fault(self, mode: str | None, match: str | None = None) -> None:
        """Turn on `401`, `500`, `hang` or `truncate` for paths containing `match` (all if None)."""
        assert mode in (None, "401", "500", "hang", "truncate")
        self._fault = (mode, match) if mode else None

    def fault_applies(self, mode: str, path: str) -> bool:
        if self._fault is None or self._fault[0] != mode:
            return False
        return self._fault[1] is None or self._fault[1] in path

    # repo store
    def repo_exists(self, repo: str) -> bool:
        return (self.root / repo / "commits").is_dir()

    def resolve(self, repo: str, revision: str) -> str | None:
        if (self.root / repo / "commits" / revision).is_dir():
            return revision
        ref = self.root / repo / "refs" / revision
        return ref.read_text().strip() if ref.is_file() else None

    def files(self, repo: str, commit: str) -> dict[str, bytes]:
        base = self.root / repo / "commits" / commit
        return {
            p.relative_to(base).as_posix(): p.read_bytes()
            for p in sorted(base.rglob("*")) if p.is_file()
        }

    # lifecycle
    def start(self) -> HubEmulator:
        for server in (self._hub, self._cdn):
            thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        for server in (self._hub, self._cdn):
            server.shutdown()
            server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repos", type=Path, required=True, help="ROOT/ORG/NAME/{commits,refs}")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    emulator = HubEmulator(args.repos, args.port).start()
    print(f"HF_ENDPOINT={emulator.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        emulator.stop()


if __name__ == "__main__":
    main()
