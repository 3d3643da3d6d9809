#!/usr/bin/env python3
"""depot-fichiers — ce que coûtent les téléchargements comptés (banc d'essai).

    comptes.py URL_BASE TOKEN FICHIER [TOURS] [PAR_TOUR]

Entrelace, sur une connexion HTTP/1.1 gardée, des dépôts de FICHIER sans rien demander et avec
`telechargements_max=100` (l'un après l'autre), puis des GET du même fichier libre et compté
(l'un après l'autre ; chaque fichier compté déposé à nouveau quand ses 100 téléchargements sont
dépensés) : TOURS tours (5 par défaut) de PAR_TOUR requêtes (50) de chaque sorte. Écrit sur une ligne les médianes en millisecondes :
« dépôt_libre dépôt_compté get_libre get_compté ». Une réponse inattendue arrête tout.
"""
import http.client
import json
import statistics
import sys
import time
import urllib.parse

BOUNDARY = "----depot-fichiers-banc-comptes"


def multipart(name, data, fields):
    parts = []
    for k, v in fields:
        parts.append(f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode())
    parts.append(
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="fichier"; filename="{name}"\r\n'
        f"Content-Type: application/octet-stream\r\n\r\n".encode() + data + b"\r\n")
    parts.append(f"--{BOUNDARY}--\r\n".encode())
    return b"".join(parts)


class Client:
    def __init__(self, base, token):
        u = urllib.parse.urlsplit(base)
        self.host, self.port, self.token = u.hostname, u.port or 80, token
        self.c = http.client.HTTPConnection(self.host, self.port)

    def send(self, method, path, body=None, headers=None, expect=200):
        for attempt in (0, 1):
            try:
                t = time.perf_counter()
                self.c.request(method, path, body=body, headers=headers or {})
                r = self.c.getresponse()
                data = r.read()
                dt = (time.perf_counter() - t) * 1000
                break
            except (http.client.HTTPException, ConnectionError):
                # Apache closed the kept connection (MaxKeepAliveRequests): a new one.
                self.c.close()
                self.c = http.client.HTTPConnection(self.host, self.port)
                if attempt:
                    raise
        if r.status != expect:
            sys.exit(f"{method} {path}: HTTP {r.status} {data[:200]!r}")
        return dt, data

    def upload(self, name, data, fields):
        body = multipart(name, data, fields)
        dt, reply = self.send("POST", "/upload.php", body, {
            "Authorization": f"Bearer {self.token}",
            "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})
        link = urllib.parse.urlsplit(json.loads(reply)["url_telechargement"])
        return dt, link.path + "?" + link.query


def main():
    base, token, path = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    per = int(sys.argv[5]) if len(sys.argv) > 5 else 50
    with open(path, "rb") as f:
        data = f.read()
    c = Client(base, token)
    up_free, up_counted, get_free, get_counted = [], [], [], []
    _, free_link = c.upload("compte-libre.bin", data, [])
    counted_link, left, n = None, 0, 0
    # Each request of one sort is followed by its twin of the other sort: both meet the same
    # disk, the same writeback and the same sweeps.
    for _ in range(rounds):
        for i in range(per):
            up_free.append(c.upload(f"depot-libre-{i}.bin", data, [])[0])
            up_counted.append(c.upload(f"depot-compte-{i}.bin", data, [("telechargements_max", "100")])[0])
        for _ in range(per):
            dt, got = c.send("GET", free_link)
            get_free.append(dt)
            if got != data:
                sys.exit("GET libre : octets différents")
            if left == 0:
                n += 1
                _, counted_link = c.upload(f"compte-{n}.bin", data, [("telechargements_max", "100")])
                left = 100
            dt, got = c.send("GET", counted_link)
            left -= 1
            get_counted.append(dt)
            if got != data:
                sys.exit("GET compté : octets différents")
    print(" ".join(f"{statistics.median(v):.3f}" for v in (up_free, up_counted, get_free, get_counted)))


if __name__ == "__main__":
    main()
