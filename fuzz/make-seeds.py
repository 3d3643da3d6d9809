#!/usr/bin/env python3
"""Writes the seed corpus of fuzz/corpus/ (run once; the files are committed).

Re-running it rewrites the seeds it knows and leaves other files (e.g. saved crashes) alone.
"""
import json, os, struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")

def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

def rec(t, rid, content=b"", pad=0, version=1):
    return struct.pack(">BBHHBB", version, t, rid, len(content), pad, 0) + content + b"\0" * pad

def nvlen(n):
    return bytes([n]) if n < 128 else struct.pack(">I", n | 0x80000000)

def nv(pairs):
    out = b""
    for k, v in pairs:
        k, v = k.encode() if isinstance(k, str) else k, v.encode() if isinstance(v, str) else v
        out += nvlen(len(k)) + nvlen(len(v)) + k + v
    return out

BEGIN = lambda rid=1, role=1, flags=0: rec(1, rid, struct.pack(">HB5x", role, flags))
PARAMS = [("REQUEST_METHOD", "POST"), ("SCRIPT_NAME", "/upload.php"), ("REQUEST_URI", "/upload.php"),
          ("CONTENT_TYPE", "text/plain"), ("CONTENT_LENGTH", "5"), ("QUERY_STRING", "")]
GET = [("REQUEST_METHOD", "GET"), ("SCRIPT_NAME", "/download.php"),
       ("QUERY_STRING", "fichier=a&token=b"), ("HTTP_CONNECTION", "close")]

def request(rid=1, params=PARAMS, body=b"hello", flags=0):
    return (BEGIN(rid, 1, flags) + rec(4, rid, nv(params)) + rec(4, rid) +
            (rec(5, rid, body) if body else b"") + rec(5, rid))

# record / conn: record streams.
full = request()
for t in ("record", "conn"):
    put(t, "request-post", full)
    put(t, "request-get-keepconn", request(1, GET, b"", 1) + request(2, GET, b"", 0))
    put(t, "get-values", rec(9, 0, nv([("FCGI_MAX_CONNS", ""), ("FCGI_MAX_REQS", ""), ("FCGI_MPXS_CONNS", "")])))
    put(t, "unknown-management", rec(42, 0, b"x" * 8))
    put(t, "padding", BEGIN() + rec(4, 1, nv(GET), pad=7) + rec(4, 1) + rec(5, 1, b"ab", pad=6) + rec(5, 1))
    put(t, "abort", BEGIN() + rec(4, 1, nv(GET)) + rec(2, 1))
    put(t, "second-begin", BEGIN(1) + BEGIN(2) + rec(4, 1, nv(GET)) + rec(4, 1) + rec(5, 1))
    put(t, "authorizer-role", BEGIN(1, 2) + rec(4, 1) + rec(5, 1))
    put(t, "bad-version", rec(5, 1, b"x", version=2))
    put(t, "http-request", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    put(t, "huge-declared-length", BEGIN() + struct.pack(">BBHHBB", 1, 5, 1, 0xFFFF, 0xFF, 0) + b"short")
    put(t, "truncated-header", full[:13])
    put(t, "stdin-before-params-end", BEGIN() + rec(4, 1, nv(GET)) + rec(5, 1, b"x"))
    put(t, "params-4byte-len", BEGIN() + rec(4, 1, b"\x80\x00\x00\x0bSCRIPT_NAMEx") + rec(4, 1) + rec(5, 1))
put("record", "empty", b"")

# params: first byte selects the bound (odd = 64 bytes), then a name-value list.
put("params", "upload", b"\x00" + nv(PARAMS))
put("params", "get", b"\x00" + nv(GET))
put("params", "long-value-small-bound", b"\x01" + nv([("QUERY_STRING", "q" * 200)]))
put("params", "four-byte-lengths", b"\x00\x80\x00\x00\x01\x80\x00\x00\x02Axy")
put("params", "huge-length", b"\x00\xff\xff\xff\xff\x01a")
put("params", "truncated", b"\x00" + nv(GET)[:-3])
put("params", "non-utf8-name", b"\x00" + nv([(b"\xff\xfeNAME", b"\x00v")]))
put("params", "authorization-duplicate", b"\x00" + nv([("HTTP_AUTHORIZATION", "Bearer a"), ("Authorization", "Bearer b")]))

put("params", "lines-upload", b"\x02" + b"\n".join(f"{k}={v}".encode() for k, v in PARAMS))
put("params", "lines-small-bound", b"\x03QUERY_STRING=" + b"q" * 70)

# multipart: first line = Content-Type, then the body.
B = "BOUNDARY"
CT = f"multipart/form-data; boundary={B}\n"
def part(name, filename=None, data="contenu", extra=""):
    s = f"--{B}\r\nContent-Disposition: form-data; name=\"{name}\""
    if filename is not None:
        s += f"; filename=\"{filename}\""
    return s + f"\r\n{extra}\r\n{data}\r\n"
END = f"--{B}--\r\n"
put("multipart", "one-file", CT + part("fichier", "a.txt", extra="Content-Type: text/plain\r\n") + END)
put("multipart", "two-files", CT + part("fichier", "a.txt") + part("fichier", "b.txt") + END)
put("multipart", "other-fields", CT + part("autre", None, "x") + part("fichier", "c d.txt") + part("x", "y") + END)
put("multipart", "text-field-fichier", CT + part("fichier", None, "pas un fichier") + END)
put("multipart", "empty-filename", CT + part("fichier", "") + END)
put("multipart", "traversal-name", CT + part("fichier", "../../etc/passwd") + END)
put("multipart", "reserved-name", CT + part("fichier", ".meta") + END)
put("multipart", "escaped-quotes", CT + f"--{B}\r\nContent-Disposition: form-data; name=\"fichier\"; filename=\"dit \\\"x\\\" \\\\ y\"\r\n\r\nabc\r\n" + END)
put("multipart", "filename-star", CT + f"--{B}\r\nContent-Disposition: form-data; name=fichier; filename=\"x\"; filename*=UTF-8''%C3%A9t%C3%A9.txt\r\n\r\nabc\r\n" + END)
put("multipart", "too-large", CT + part("fichier", "big.bin", "x" * 5000) + END)
put("multipart", "truncated", CT + part("fichier", "a.txt")[:-4])
put("multipart", "no-boundary", "multipart/form-data\n" + part("fichier", "a.txt") + END)
put("multipart", "not-multipart", "application/json\n{\"fichier\": 1}")
put("multipart", "empty-body", CT)
put("multipart", "preamble", CT + "preamble text\r\n" + part("fichier", "p.txt") + END + "epilogue")
put("multipart", "crlf-in-name", CT + f"--{B}\r\nContent-Disposition: form-data; name=\"fichier\"; filename=\"a%0D%0Ab\"\r\n\r\nabc\r\n" + END)
put("multipart", "quoted-boundary", f"multipart/form-data; boundary=\"{B}\"; charset=utf-8\n" + part("fichier", "q.txt") + END)

# names: query strings (and raw names).
for i, q in enumerate([
    "fichier=rapport.pdf&token=abc",
    "fichier=..%2F..%2Fetc%2Fpasswd",
    "fichier=a%00b",
    "fichier=%2e%2e",
    "fichier=.meta&fichier=ok.txt",
    "fichier=" + "a" * 251,
    "fichier=" + "%C3%A9" * 125,
    "fichier=a+b%20c%2Bd",
    "fichier=dit%22x%22%5C.txt",
    "fichier=%E2%80%AEtxt.exe",
    "fichier=%0D%0AContent-Type%3A%20text%2Fhtml",
    "fichier=%ff%fe",
    "fichier",
    "&&fichier=x/&",
    "fichier=%",
    "fichier=%zz",
    "fichier=facture%E2%80%AEfdp.exe",
    "fichier=a%E2%80%AAb%E2%80%ACc",
    "fichier=%E2%81%A6x%E2%81%A9",
    "fichier=l1%E2%80%A8l2%E2%80%A9",
    "fichier=ok%E2%80%AF%E2%81%A5.txt",
]):
    put("names", f"query-{i:02}", q)

# jsonrpc: first line = "<MCP-Protocol-Version> <Mcp-Method> <Mcp-Name>" ("-" = absent), then the body.
def rpc(head, body):
    return head + "\n" + (body if isinstance(body, str) else json.dumps(body))
M26 = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
       "io.modelcontextprotocol/clientCapabilities": {}}
put("jsonrpc", "initialize", rpc("- - -", {"jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}}))
put("jsonrpc", "initialized", rpc("2025-06-18 - -", {"jsonrpc": "2.0", "method": "notifications/initialized"}))
put("jsonrpc", "ping", rpc("2025-11-25 - -", {"jsonrpc": "2.0", "id": "p", "method": "ping"}))
put("jsonrpc", "tools-list", rpc("2025-06-18 - -", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
put("jsonrpc", "call-lien", rpc("2025-06-18 - -", {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
    "params": {"name": "recuperer_fichier", "arguments": {"nom_fichier": "a.txt"}}}))
put("jsonrpc", "call-base64", rpc("2025-03-26 - -", {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
    "params": {"name": "recuperer_fichier", "arguments": {"nom_fichier": "a.txt", "mode": "base64"}}}))
put("jsonrpc", "call-bad-name", rpc("2025-06-18 - -", {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
    "params": {"name": "recuperer_fichier", "arguments": {"nom_fichier": "../.."}}}))
put("jsonrpc", "batch", rpc("- - -", [{"jsonrpc": "2.0", "id": 1, "method": "ping"},
    {"jsonrpc": "2.0", "method": "notifications/x"}, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]))
put("jsonrpc", "discover", rpc("2026-07-28 server/discover -", {"jsonrpc": "2.0", "id": 6,
    "method": "server/discover", "params": {"_meta": M26}}))
put("jsonrpc", "modern-call", rpc("2026-07-28 tools/call recuperer_fichier", {"jsonrpc": "2.0", "id": 7,
    "method": "tools/call", "params": {"_meta": M26, "name": "recuperer_fichier",
    "arguments": {"nom_fichier": "b.bin", "mode": "base64"}}}))
put("jsonrpc", "modern-list", rpc("2026-07-28 tools/list -", {"jsonrpc": "2.0", "id": 8,
    "method": "tools/list", "params": {"_meta": M26}}))
put("jsonrpc", "unknown-method", rpc("- - -", {"jsonrpc": "2.0", "id": 9, "method": "resources/list"}))
put("jsonrpc", "unknown-version", rpc("1999-01-01 - -", {"jsonrpc": "2.0", "id": 10, "method": "ping"}))
put("jsonrpc", "nested", rpc("- - -", "[" * 120 + "]" * 120))
put("jsonrpc", "response-object", rpc("- - -", {"jsonrpc": "2.0", "id": 11, "result": {}}))
put("jsonrpc", "scalars", rpc("- - -", "[1, \"x\", null, true, {}]"))
put("jsonrpc", "not-json", rpc("- - -", "{\"jsonrpc\": 2.0,"))
