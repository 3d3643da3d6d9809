#!/usr/bin/env python3
"""depot-fichiers — serveur d'autorisation OAuth de DÉMONSTRATION (apache/demo), bibliothèque
standard seulement.

Écoute sur 127.0.0.1 (port choisi par le système, écrit sur la sortie standard une fois prêt,
qui est alors fermée) et sert :
  POST /introspect  introspection RFC 7662 : le client (HTTP Basic, RFC 6749 §2.3.1) doit être
                    DEMO_OAUTH_CLIENT_ID / DEMO_OAUTH_CLIENT_SECRET ; UN seul jeton porteur,
                    DEMO_OAUTH_JETON, est actif, avec l'audience DEMO_OAUTH_AUDIENCE (l'URL de
                    /mcp.php) et le scope DEMO_OAUTH_SCOPE ; tout autre jeton : {"active": false}.
  GET /.well-known/oauth-authorization-server
                    métadonnées RFC 8414 (issuer, introspection_endpoint, scopes).
Il ne délivre aucun jeton (pas d'autorisation ni de /token) : le jeton de démonstration est tiré
par apache/demo, qui l'affiche.

    DEMO_OAUTH_…=… demo-oauth.py

Les secrets passent par l'environnement (jamais en argument, visible de tous dans ps). S'arrête
sur SIGTERM/SIGINT et tout seul quand son parent (apache/demo) disparaît.
"""

import base64
import hmac
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote_plus

CLIENT_ID = os.environ["DEMO_OAUTH_CLIENT_ID"]
CLIENT_SECRET = os.environ["DEMO_OAUTH_CLIENT_SECRET"]
JETON = os.environ["DEMO_OAUTH_JETON"]
AUDIENCE = os.environ["DEMO_OAUTH_AUDIENCE"]
SCOPE = os.environ["DEMO_OAUTH_SCOPE"]


def client_authentifie(entete):
    """HTTP Basic du client : identifiant et secret encodés en formulaire, puis en Base64."""
    if not entete or not entete.startswith("Basic "):
        return False
    try:
        decode = base64.b64decode(entete[6:].strip(), validate=True).decode()
    except ValueError:
        return False
    ident, _, secret = decode.partition(":")
    return (hmac.compare_digest(unquote_plus(ident), CLIENT_ID)
            and hmac.compare_digest(unquote_plus(secret), CLIENT_SECRET))


class Serveur(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "depot-fichiers-demo-oauth"

    def repondre(self, statut, objet):
        corps = json.dumps(objet).encode()
        self.send_response(statut)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", str(len(corps)))
        self.end_headers()
        self.wfile.write(corps)

    def do_POST(self):  # noqa: N802 (nom imposé par http.server)
        longueur = int(self.headers.get("Content-Length") or 0)
        formulaire = parse_qs(self.rfile.read(longueur).decode("utf-8", "replace"))
        if self.path != "/introspect":
            return self.repondre(404, {"error": "not_found"})
        if not client_authentifie(self.headers.get("Authorization")):
            return self.repondre(401, {"error": "invalid_client"})
        jeton = formulaire.get("token", [""])[0]
        if not jeton:
            return self.repondre(400, {"error": "invalid_request"})
        if not hmac.compare_digest(jeton, JETON):
            return self.repondre(200, {"active": False})
        return self.repondre(200, {
            "active": True,
            "aud": AUDIENCE,
            "scope": SCOPE,
            "token_type": "Bearer",
            "client_id": "client-de-demonstration",
            "sub": "demo",
            "exp": int(time.time()) + 3600,
        })

    def do_GET(self):  # noqa: N802
        if self.path != "/.well-known/oauth-authorization-server":
            return self.repondre(404, {"error": "not_found"})
        issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        return self.repondre(200, {
            "issuer": issuer,
            "introspection_endpoint": issuer + "/introspect",
            "scopes_supported": [SCOPE],
            "response_types_supported": [],
            "grant_types_supported": [],
        })

    def log_message(self, *args):
        pass  # aucun journal : les corps contiennent des jetons


class Serveurs(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # un client (processus depot-fichiers) qui s'en va n'est pas une erreur


def main():
    serveur = Serveurs(("127.0.0.1", 0), Serveur)
    parent = os.getppid()

    def arreter(*_):
        os._exit(0)

    signal.signal(signal.SIGTERM, arreter)
    signal.signal(signal.SIGINT, arreter)

    def surveiller():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=surveiller, daemon=True).start()
    # Par un tube et non par un fichier : lancé sous le compte des enfants d'Apache, il ne doit rien
    # écrire que root (apache/demo) relise ensuite.
    print(serveur.server_address[1], flush=True)
    sys.stdout.close()
    serveur.serve_forever()


if __name__ == "__main__":
    main()
