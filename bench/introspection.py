#!/usr/bin/env python3
"""depot-fichiers — serveur d'introspection OAuth (RFC 7662) minimal pour bench/run.

Écoute sur 127.0.0.1 (port choisi par le système, écrit dans le fichier donné en argument) et
répond « actif » à tout token, avec l'audience donnée : chaque appel à /mcp.php du banc d'essai
fait donc une vraie introspection HTTP, sans que ce serveur-ci limite beaucoup le débit
(HTTP/1.1 avec connexions persistantes, un fil par connexion).

Un token qui commence par « lent- » est introspecté en 1,5 s : une requête /mcp.php qui le porte
garde son processus depot-fichiers plus d'une seconde, ce qui sert à remplir le groupe de
processus de mod_fcgid avant les mesures (voir bench/run).

    introspection.py FICHIER_PORT AUDIENCE

S'arrête tout seul quand son parent (bench/run) disparaît.
"""

import json
import os
import urllib.parse
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Introspection(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Réponse en un seul envoi, sans Nagle : sinon l'attente d'ACK différé (40 ms) fausse tout.
    disable_nagle_algorithm = True
    audience = ""

    def do_POST(self):  # noqa: N802 (nom imposé par http.server)
        n = int(self.headers.get("Content-Length") or 0)
        formulaire = urllib.parse.parse_qs(self.rfile.read(n).decode("utf-8", "replace"))
        if formulaire.get("token", [""])[0].startswith("lent-"):
            time.sleep(1.5)
        corps = json.dumps({
            "active": True,
            "aud": self.audience,
            "scope": "openid fichiers:lire",
            "token_type": "Bearer",
            "exp": int(time.time()) + 3600,
            "client_id": "bench",
            "sub": "bench",
        }).encode()
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(corps)}\r\n\r\n".encode() + corps)

    def log_message(self, *args):
        pass


class Serveur(ThreadingHTTPServer):
    daemon_threads = True
    # File d'attente de 5 par défaut : sous 8 connexions × 20 processus, un SYN refusé est réémis
    # au bout de 1 s, et cette seconde ressemblerait à l'attente de mod_fcgid.
    request_queue_size = 128

    def handle_error(self, request, client_address):
        pass  # un client (processus depot-fichiers) qui s'en va n'est pas une erreur


def main():
    fichier_port, audience = sys.argv[1], sys.argv[2]
    Introspection.audience = audience
    serveur = Serveur(("127.0.0.1", 0), Introspection)
    parent = os.getppid()

    def surveiller():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=surveiller, daemon=True).start()
    with open(fichier_port + ".tmp", "w") as f:
        f.write(str(serveur.server_address[1]))
    os.rename(fichier_port + ".tmp", fichier_port)
    serveur.serve_forever()


if __name__ == "__main__":
    main()
