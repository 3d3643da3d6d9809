#!/usr/bin/env python3
"""depot-fichiers — un dépôt avec reprise par un client qui garde sa connexion (banc d'essai).

    reprise.py URL_DEPOT TOKEN FICHIER NOM EMPREINTE_BASE64 [PARTIE_OCTETS]

Crée la reprise (POST avec Upload-Length et Repr-Digest : le SHA-256 du fichier en base64, comme
deposer_reprise le prend), puis envoie le fichier en parties de
PARTIE_OCTETS (8 Mio par défaut), chacune un PATCH sur la même connexion HTTP/1.1, lue du fichier
par blocs de 1 Mio : ce que coûte le serveur, sans le lancement d'un curl par partie. Écrit
« durée_s code durée_de_la_dernière_partie_s » sur la sortie, comme deposer_reprise de
bench/lib/clients.sh. Une réponse inattendue arrête tout (code différent de 200).
"""
import http.client
import json
import os
import sys
import time
import urllib.parse


class Part:
    """Un morceau du fichier, lu par blocs (http.client lit un corps qui a `read`)."""

    def __init__(self, f, length):
        self.f, self.left = f, length

    def read(self, n=-1):
        n = self.left if n < 0 else min(n, self.left)
        b = self.f.read(n)
        self.left -= len(b)
        return b


def main():
    url, token, path, name, digest = sys.argv[1:6]
    part = int(sys.argv[6]) if len(sys.argv) > 6 else 8 << 20
    size = os.path.getsize(path)
    u = urllib.parse.urlsplit(url)
    auth = {"Authorization": f"Bearer {token}"}
    start = time.monotonic()
    c = http.client.HTTPConnection(u.hostname, u.port or 80, blocksize=1 << 20)
    c.request("POST", u.path, headers={**auth, "Upload-Complete": "?0", "Upload-Length": str(size),
              "Repr-Digest": f"sha-256=:{digest}:",
              "Content-Disposition": f'attachment; filename="{name}"', "Content-Length": "0"})
    r = c.getresponse()
    body = r.read()
    if r.status != 201:
        print(f"0 {r.status} 0")
        return
    target = urllib.parse.urlsplit(json.loads(body)["url_reprise"])
    where = target.path + ("?" + target.query if target.query else "")
    offset, last, code = 0, 0.0, 0
    with open(path, "rb") as f:
        while True:
            n = min(part, size - offset)
            complete = offset + n == size
            t = time.monotonic()
            c.request("PATCH", where, body=Part(f, n), headers={
                **auth, "Upload-Offset": str(offset), "Upload-Complete": "?1" if complete else "?0",
                "Content-Type": "application/partial-upload", "Content-Length": str(n)})
            r = c.getresponse()
            r.read()
            code, last = r.status, time.monotonic() - t
            if complete or code != 204:
                break
            offset = int(r.getheader("Upload-Offset"))
            f.seek(offset)
    print(f"{time.monotonic() - start:.6f} {code} {last:.6f}")


main()
