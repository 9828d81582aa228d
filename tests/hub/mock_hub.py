#!/usr/bin/env python3
"""A stand-in for the Hugging Face hub (tests/hub/e2e_hub.sh): the URL layout
and headers pagoda's downloader (src/model/hub.c) relies on, served from fake
repos described by ROOT/<org>/<name>/repo.json:

  {"revisions": {"main": "<40 hex>", "v1.0": "<40 hex>"},   # branch/tag -> commit
   "files": {"config.json": "/abs/source/path", ...},       # one commit's files
   "token": "hf_x",            # gated: 401 unless "Authorization: Bearer hf_x"
   "corrupt": ["model.safetensors"],   # served with one byte flipped
   "interrupt": {"model.safetensors": 2},  # the first N CDN GETs close mid-body
   "slow": {"model.safetensors": 1.5},     # CDN bodies spread over that many seconds
   "no_range": true}                       # the CDN ignores Range (200, whole body)

  GET  /api/models/{org}/{name}/revision/{rev}  -> {"id", "sha", "siblings"}
  HEAD|GET /{org}/{name}/resolve/{rev}/{file}   -> small files: 200 with ETag
       (git blob sha1), X-Repo-Commit; LFS files (*.safetensors, *.gguf): 302 to
       http://localhost:PORT/cdn/<sha256> (another host name than the API's
       127.0.0.1, as the CDN is) with X-Linked-Etag (sha256) and X-Linked-Size
  GET|HEAD /cdn/<sha256>                         -> the blob, Range supported
  errors carry X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound,
  GatedRepo) and X-Error-Message, as the hub's do.

Every request is logged to --log as one line: METHOD PATH range=R auth=yes|no.
usage: mock_hub.py --root DIR --port-file FILE --log FILE
"""
import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LFS_SUFFIXES = (".safetensors", ".gguf")
STATE_LOCK = threading.Lock()
INTERRUPTS = {}  # (repo, file) -> remaining cut transfers


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, repo_id, desc):
        self.id = repo_id
        self.revisions = desc.get("revisions", {})
        self.token = desc.get("token")
        self.corrupt = set(desc.get("corrupt", []))
        self.slow = desc.get("slow", {})
        self.no_range = desc.get("no_range", False)
        self.files = {}
        for name, src in desc["files"].items():
            with open(src, "rb") as f:
                data = f.read()
            lfs = name.endswith(LFS_SUFFIXES)
            sha = hashlib.sha256(data).hexdigest() if lfs else git_blob_sha1(data)
            served = data
            if name in self.corrupt:
                b = bytearray(data)
                b[len(b) // 2] ^= 0xFF
                served = bytes(b)
            self.files[name] = {"data": served, "lfs": lfs, "etag": sha, "size": len(data)}
        for name, n in desc.get("interrupt", {}).items():
            INTERRUPTS[(repo_id, name)] = n

    def commit(self, rev):
        if rev in self.revisions:
            return self.revisions[rev]
        if rev in self.revisions.values():
            return rev
        return None


def load_repos(root):
    repos = {}
    for org in sorted(os.listdir(root)):
        for name in sorted(os.listdir(os.path.join(root, org))):
            with open(os.path.join(root, org, name, "repo.json")) as f:
                repos[org + "/" + name] = Repo(org + "/" + name, json.load(f))
    return repos


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    repos = {}
    log_path = None
    cdn = {}  # sha256 -> (repo id, file name)

    def log_message(self, fmt, *args):  # quiet: the request log is our own
        pass

    def log_request_line(self):
        auth = "yes" if self.headers.get("Authorization") else "no"
        rng = self.headers.get("Range") or "-"
        with STATE_LOCK, open(self.log_path, "a") as f:
            f.write("%s %s range=%s auth=%s\n" % (self.command, self.path, rng, auth))

    def send_plain(self, code, headers, body=b""):
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, code, error_code, message):
        body = json.dumps({"error": message}).encode()
        self.send_plain(code, {"X-Error-Code": error_code, "X-Error-Message": message,
                               "Content-Type": "application/json"}, body)

    def find_repo(self, repo_id):
        """The repo, or None after answering with the hub's error."""
        repo = self.repos.get(repo_id)
        if repo is None:
            # the hub answers 401 for unknown repos to anonymous users; with the
            # X-Error-Code the client can still tell
            self.error(404, "RepoNotFound", "Repository not found")
            return None
        if repo.token:
            auth = self.headers.get("Authorization", "")
            if auth != "Bearer " + repo.token:
                self.error(401, "GatedRepo", "Access to model %s is restricted. You must have "
                           "access to it and be authenticated to access it." % repo_id)
                return None
        return repo

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        self.log_request_line()
        path = urllib.parse.urlsplit(self.path).path
        parts = path.split("/")
        if len(parts) >= 7 and parts[1] == "api" and parts[2] == "models" and parts[5] == "revision":
            return self.api_revision(parts[3] + "/" + parts[4],
                                     urllib.parse.unquote("/".join(parts[6:])))
        if len(parts) >= 6 and parts[3] == "resolve":
            return self.resolve(parts[1] + "/" + parts[2], urllib.parse.unquote(parts[4]),
                                urllib.parse.unquote("/".join(parts[5:])))
        if len(parts) == 3 and parts[1] == "cdn":
            return self.serve_cdn(parts[2])
        self.error(404, "NotFound", "no such route")

    def find_commit(self, repo_id, rev):
        """(repo, commit), or (None, None) after answering with the hub's error."""
        repo = self.find_repo(repo_id)
        commit = repo.commit(rev) if repo else None
        if repo and commit is None:
            self.error(404, "RevisionNotFound", "Invalid rev id: " + rev)
        return (repo, commit) if commit else (None, None)

    def api_revision(self, repo_id, rev):
        repo, commit = self.find_commit(repo_id, rev)
        if repo is None:
            return
        body = json.dumps({"id": repo_id, "sha": commit,
                           "siblings": [{"rfilename": n} for n in sorted(repo.files)]}).encode()
        self.send_plain(200, {"Content-Type": "application/json"}, body)

    def resolve(self, repo_id, rev, name):
        repo, commit = self.find_commit(repo_id, rev)
        if repo is None:
            return
        f = repo.files.get(name)
        if f is None:
            return self.error(404, "EntryNotFound", "Entry not found")
        if f["lfs"]:
            Handler.cdn[f["etag"]] = (repo_id, name)
            port = self.server.server_address[1]
            self.send_plain(302, {"X-Repo-Commit": commit, "X-Linked-Etag": '"%s"' % f["etag"],
                                  "X-Linked-Size": str(f["size"]), "ETag": '"%s"' % f["etag"],
                                  "Location": "http://localhost:%d/cdn/%s" % (port, f["etag"])})
            return
        self.send_plain(200, {"X-Repo-Commit": commit, "ETag": '"%s"' % f["etag"],
                              "Content-Type": "application/octet-stream"}, f["data"])

    def serve_cdn(self, sha):
        if sha not in Handler.cdn:
            return self.send_plain(404, {}, b"no such blob")
        repo_id, name = Handler.cdn[sha]
        data = self.repos[repo_id].files[name]["data"]
        start = 0
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-") and not self.repos[repo_id].no_range:
            start = int(rng[6:-1])
            if start >= len(data):
                return self.send_plain(416, {"Content-Range": "bytes */%d" % len(data)})
        body = data[start:]
        self.send_response(206 if start else 200)
        self.send_header("ETag", '"%s"' % sha)
        self.send_header("Content-Length", str(len(body)))
        if start:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))
        self.end_headers()
        if self.command == "HEAD":
            return
        with STATE_LOCK:
            left = INTERRUPTS.get((repo_id, name), 0)
            if left:
                INTERRUPTS[(repo_id, name)] = left - 1
        if left:  # half of what was asked, then the connection drops
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        seconds = self.repos[repo_id].slow.get(name, 0)
        if seconds:  # twenty pieces, evenly spaced
            step = max(1, -(-len(body) // 20))
            for i in range(0, len(body), step):
                self.wfile.write(body[i:i + step])
                self.wfile.flush()
                time.sleep(seconds / 20)
            return
        self.wfile.write(body)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    a = ap.parse_args()
    Handler.repos = load_repos(a.root)
    Handler.log_path = a.log
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    with open(a.port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.rename(a.port_file + ".tmp", a.port_file)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
