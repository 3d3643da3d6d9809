#!/usr/bin/env python3
"""Real-client check of /mcp.php with the official MCP Python SDK (`mcp` 2.x).

Connects to URL with a bearer token in three modes — "auto" (server/discover probe, modern),
"legacy" (initialize handshake) and "2026-07-28" (pinned, no probe) — and in each one:
lists the tools (exactly `recuperer_fichier`), calls it in mode "lien" and "base64" on a file
that is already deposited (downloading the link and decoding the base64 to compare them with the
local copy), and calls it on a missing file (legacy: JSON-RPC error -32000;
modern: an isError result). Exits 0 when every check passes, 1 otherwise.

Usage (see README.md):
    python check_client.py --url https://HOST/mcp.php --token "$ACCESS_TOKEN" \
        --file NAME [--expect-bytes-from LOCAL_PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import sys

import httpx

from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

EXPECTED_VERSION = {"auto": "2026-07-28", "2026-07-28": "2026-07-28", "legacy": "2025-11-25"}
failures: list[str] = []


def check(cond: bool, what: str) -> None:
    print(("  ok   " if cond else "  FAIL ") + what)
    if not cond:
        failures.append(what)


async def run_mode(mode: str, url: str, token: str, name: str, expected: bytes | None) -> None:
    print(f"== mode {mode}")
    headers = {"Authorization": f"Bearer {token}"}
    async with create_mcp_http_client(headers=headers) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            check(client.protocol_version == EXPECTED_VERSION[mode],
                  f"protocol version {client.protocol_version!r} == {EXPECTED_VERSION[mode]!r}")
            tools = await client.list_tools()
            names = [t.name for t in tools.tools]
            check(names == ["recuperer_fichier"], f"tools/list = {names}")
            tool = tools.tools[0]
            check("Récupère un fichier" in (tool.description or ""), "French description")
            check(tool.input_schema.get("required") == ["nom_fichier"], "inputSchema.required")

            r = await client.call_tool("recuperer_fichier", {"nom_fichier": name, "mode": "lien"})
            sc = r.structured_content or {}
            check(not r.is_error, "lien: not isError")
            check(sc.get("nom") == name, f"lien: nom == {name!r}")
            check("/download.php?fichier=" in str(sc.get("url_telechargement", "")), "lien: url_telechargement")
            check(isinstance(sc.get("taille_octets"), int), "lien: taille_octets")
            check(any(c.type == "resource_link" for c in r.content), "lien: resource_link block")
            link = str(sc.get("url_telechargement", ""))
            if link and expected is not None:
                async with httpx.AsyncClient() as plain:
                    got = await plain.get(link)
                check(got.status_code == 200, f"lien: GET -> {got.status_code}")
                check(got.content == expected, "lien: the link downloads identical bytes")

            r = await client.call_tool("recuperer_fichier", {"nom_fichier": name, "mode": "base64"})
            sc = r.structured_content or {}
            check(not r.is_error, "base64: not isError")
            raw = base64.b64decode(sc.get("contenu_base64", ""))
            check(len(raw) == sc.get("taille_octets"), "base64: size matches content")
            if expected is not None:
                check(raw == expected, "base64: identical bytes")

            missing = "fichier-qui-n-existe-pas.bin"
            try:
                r = await client.call_tool("recuperer_fichier", {"nom_fichier": missing})
                check(mode != "legacy" and r.is_error, "missing file: isError result (modern)")
            except MCPError as e:
                check(mode == "legacy" and e.code == -32000, f"missing file: JSON-RPC {e.code} (legacy)")


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True, help="https://HOST/mcp.php")
    p.add_argument("--token", required=True, help="OAuth access token accepted by the introspection endpoint")
    p.add_argument("--file", required=True, help="name of a file already deposited with upload.php")
    p.add_argument("--expect-bytes-from", help="local copy of the file, to compare the base64 content")
    p.add_argument("--modes", default="auto,legacy,2026-07-28")
    a = p.parse_args()
    expected = open(a.expect_bytes_from, "rb").read() if a.expect_bytes_from else None
    for mode in a.modes.split(","):
        try:
            await run_mode(mode, a.url, a.token, a.file, expected)
        except Exception as e:  # noqa: BLE001 - report and go on with the next mode
            check(False, f"mode {mode}: {type(e).__name__}: {e}")
    print("RESULT:", "OK" if not failures else f"{len(failures)} failure(s)")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
