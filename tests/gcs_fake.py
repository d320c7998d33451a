"""A fake GCS for tests: fsspec's "gs" filesystem kept in memory (what gcsfs answers, the
path etils.epath takes) and a small GCS JSON-API HTTP server over the same objects (what
tensorstore's gcs driver speaks when TENSORSTORE_GCS_HTTP_URL points at it). So orbax's
array writes (tensorstore) and its directory / metadata files (epath) land in one bucket,
through the same code paths as on real GCS."""
import json
import re
import threading
import urllib.parse
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fsspec.implementations.memory import MemoryFileSystem


class FakeGCS(MemoryFileSystem):
  """What gcsfs answers for `gs://bucket/...`, kept in memory (its own store)."""
  protocol = ("gs", "gcs")
  store: dict = {}
  pseudo_dirs = [""]

  def __init__(self, *args, finalize_on_close=True, **kwargs):
    super().__init__(*args, **kwargs)

  @classmethod
  def _strip_protocol(cls, path):
    path = str(path)
    for prefix in ("gs://", "gcs://"):
      if path.startswith(prefix):
        path = path[len(prefix):]
    return MemoryFileSystem._strip_protocol(path)


class Store:
  """Objects kept in an fsspec filesystem `fs` at "bucket/name" (the same objects the
  epath / fsspec side sees); generations derived from content."""

  def __init__(self, fs):
    self.fs = fs
    self.lock = threading.Lock()

  def get(self, key):
    p = "/".join(key)
    if not self.fs.isfile(p):
      return None
    data = self.fs.cat_file(p)
    return _generation(data), data

  def put(self, key, data):
    self.fs.pipe_file("/".join(key), data)
    return _generation(data)

  def delete(self, key):
    self.fs.rm_file("/".join(key))

  def items(self, bucket):
    if not self.fs.exists(bucket):
      return []
    out = []
    for p in sorted(self.fs.find(bucket)):
      p = p.lstrip("/")
      data = self.fs.cat_file(p)
      out.append((p[len(bucket) + 1:], _generation(data), data))
    return out


def _generation(data: bytes) -> int:
  return zlib.crc32(data) + 1 + (len(data) << 32)


def _meta(bucket, name, gen, data):
  return {"kind": "storage#object", "bucket": bucket, "name": name, "generation": str(gen),
          "metageneration": "1", "size": str(len(data)), "id": f"{bucket}/{name}/{gen}"}


def make_handler(store: Store, log=None):
  class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
      if log is not None:
        log.append(a[0] % a[1:])

    def _send(self, code, body=b"", headers=None, ctype="application/json"):
      if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
      self.send_response(code)
      self.send_header("Content-Type", ctype)
      self.send_header("Content-Length", str(len(body)))
      for k, v in (headers or {}).items():
        self.send_header(k, v)
      self.end_headers()
      if self.command != "HEAD":
        self.wfile.write(body)

    def _parse(self):
      u = urllib.parse.urlsplit(self.path)
      q = dict(urllib.parse.parse_qsl(u.query, keep_blank_values=True))
      return u.path, q

    def _precondition(self, q, current):
      gen = current[0] if current else 0
      if "ifGenerationMatch" in q and int(q["ifGenerationMatch"]) != gen:
        return False
      if "ifGenerationNotMatch" in q and int(q["ifGenerationNotMatch"]) == gen:
        return False
      return True

    def do_GET(self):
      path, q = self._parse()
      m = re.fullmatch(r"/storage/v1/b/([^/]+)/o/(.+)", path)
      if m:
        bucket, name = m.group(1), urllib.parse.unquote(m.group(2))
        with store.lock:
          cur = store.get((bucket, name))
        if cur is None:
          return self._send(404, {"error": {"code": 404, "message": "No such object"}})
        if not self._precondition(q, cur):
          return self._send(304 if "ifGenerationNotMatch" in q else 412, b"")
        gen, data = cur
        if q.get("alt") != "media":
          return self._send(200, _meta(bucket, name, gen, data))
        hdr = {"x-goog-generation": str(gen)}
        rng = self.headers.get("Range")
        if rng:
          a, b = rng.split("=")[1].split("-")
          a = int(a)
          b = int(b) if b else len(data) - 1
          if a >= len(data) and len(data):
            return self._send(416, b"")
          part = data[a:b + 1]
          hdr["Content-Range"] = f"bytes {a}-{a + len(part) - 1}/{len(data)}"
          return self._send(206, part, hdr, "application/octet-stream")
        return self._send(200, data, hdr, "application/octet-stream")
      m = re.fullmatch(r"/storage/v1/b/([^/]+)/o", path)
      if m:
        bucket, prefix = m.group(1), q.get("prefix", "")
        start, end = q.get("startOffset", ""), q.get("endOffset")
        with store.lock:
          items = [_meta(bucket, n, g, d) for n, g, d in store.items(bucket)
                   if n.startswith(prefix) and n >= start and (end is None or n < end)]
        return self._send(200, {"kind": "storage#objects", "items": items})
      return self._send(404, {"error": {"code": 404, "message": path}})

    def do_POST(self):
      path, q = self._parse()
      m = re.fullmatch(r"/upload/storage/v1/b/([^/]+)/o", path)
      if not m:
        return self._send(404, {"error": {"code": 404, "message": path}})
      bucket, name = m.group(1), q["name"]
      data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
      with store.lock:
        cur = store.get((bucket, name))
        if not self._precondition(q, cur):
          return self._send(412, {"error": {"code": 412, "message": "precondition"}})
        gen = store.put((bucket, name), data)
      return self._send(200, _meta(bucket, name, gen, data))

    def do_DELETE(self):
      path, q = self._parse()
      m = re.fullmatch(r"/storage/v1/b/([^/]+)/o/(.+)", path)
      if not m:
        return self._send(404, {"error": {"code": 404, "message": path}})
      bucket, name = m.group(1), urllib.parse.unquote(m.group(2))
      with store.lock:
        cur = store.get((bucket, name))
        if cur is None:
          return self._send(404, {"error": {"code": 404, "message": "No such object"}})
        if not self._precondition(q, cur):
          return self._send(412, {"error": {"code": 412, "message": "precondition"}})
        store.delete((bucket, name))
      return self._send(204, b"")

  return H


def serve(store: Store, log=None) -> ThreadingHTTPServer:
  """Serves `store` on a free local port, in a daemon thread (srv.shutdown() stops it)."""
  srv = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(store, log))
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  return srv
