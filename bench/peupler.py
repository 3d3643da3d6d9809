#!/usr/bin/env python3
"""depot-fichiers — remplit le dépôt de N petits fichiers vivants pour bench/run.

    peupler.py DOSSIER_FICHIERS N [PRÉFIXE]

Écrit directement la disposition du dépôt (src/store/mod.rs) : `<nom>` (10 octets) et son
compagnon `.meta/<nom>.json`, sans fsync (l'API du dépôt fait deux fsync par fichier : 10 000
dépôts prendraient plusieurs minutes). bench/run vérifie ensuite qu'un de ces fichiers se
télécharge bien (200), donc que le format est celui que le programme accepte.
"""

import json
import os
import sys
import time


def main():
    racine, n = sys.argv[1], int(sys.argv[2])
    prefixe = sys.argv[3] if len(sys.argv) > 3 else "autre"
    meta = os.path.join(racine, ".meta")
    os.makedirs(meta, mode=0o700, exist_ok=True)
    maintenant = int(time.time())
    contenu = b"0123456789"
    for i in range(n):
        nom = f"{prefixe}-{i:05d}.bin"
        chemin = os.path.join(racine, nom)
        if os.path.exists(chemin):
            continue
        with open(os.path.join(meta, nom + ".json"), "w") as f:
            json.dump({"nom_original": nom, "depot_timestamp": maintenant,
                       "taille_octets": len(contenu)}, f)
        fd = os.open(chemin, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, contenu)
        os.close(fd)


if __name__ == "__main__":
    main()
