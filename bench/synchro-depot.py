#!/usr/bin/env python3
"""depot-fichiers — ce que coûtent les synchronisations d'une publication, une par une.

    python3 bench/synchro-depot.py [DOSSIER] [TOURS]

Rejoue, dans DOSSIER (par défaut un dossier temporaire sous /var/tmp, donc sur disque), les
appels d'une publication de 10 Kio (src/store/publish.rs) : fichier et fiche (129 octets) écrits,
leur écriture sur disque lancée ensemble (`sync_file_range`), `fsync` de l'un puis de l'autre, les
deux renommages (fiche dans .meta/, fichier à sa place, 32 noms qui tournent comme dans bench/run),
puis `fsync` du dossier du fichier et de celui de la fiche. Trois suites, deux fois chacune :
  - « actuelle » : celle du programme, ci-dessus ;
  - « fichier d'abord » : le fichier synchronisé avant que la fiche soit écrite, puis la fiche
    (l'ordre d'avant : l'écriture de la fiche ne part qu'à son propre `fsync`) ;
  - « sans fsync » : la conception PHP (ni synchronisation ni sync_file_range).
Affiche la durée moyenne de chaque synchronisation et de la publication entière (µs), une
publication après l'autre. Des chiffres de latence, pas de débit : sous 8 dépôts simultanés, un
ext4 avec journal (jbd2) regroupe en plus les validations de plusieurs processus.
"""
import ctypes
import os
import shutil
import sys
import tempfile
import time


_LIBC = ctypes.CDLL("libc.so.6", use_errno=True)
_LIBC.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
SYNC_FILE_RANGE_WRITE = 2


def tour(racine, meta, i, suite, t):
    nom = f"banc-{i % 32}.bin"
    partie = os.path.join(racine, ".tmp", f"{i}.part")
    fiche_partie = os.path.join(racine, ".tmp", f"{i}.meta.part")
    f = os.open(partie, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    s = os.open(fiche_partie, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(f, b"x" * 10240)
    if suite == "fichier d'abord":
        a = time.perf_counter()
        os.fsync(f)
        t["fichier"] += time.perf_counter() - a
    os.write(s, b"{" + b"y" * 127 + b"}")
    if suite == "actuelle":
        _LIBC.sync_file_range(f, 0, 0, SYNC_FILE_RANGE_WRITE)
        _LIBC.sync_file_range(s, 0, 0, SYNC_FILE_RANGE_WRITE)
        a = time.perf_counter()
        os.fsync(f)
        t["fichier"] += time.perf_counter() - a
    if suite != "sans fsync":
        a = time.perf_counter()
        os.fsync(s)
        t["fiche"] += time.perf_counter() - a
    os.rename(fiche_partie, os.path.join(meta, nom + ".json"))
    os.rename(partie, os.path.join(racine, nom))
    os.close(f)
    os.close(s)
    if suite != "sans fsync":
        for cle, dossier in (("dossier", racine), ("dossier .meta", meta)):
            d = os.open(dossier, os.O_RDONLY | os.O_DIRECTORY)
            a = time.perf_counter()
            os.fsync(d)
            t[cle] += time.perf_counter() - a
            os.close(d)


def main():
    temporaire = len(sys.argv) < 2
    racine = tempfile.mkdtemp(dir="/var/tmp") if temporaire else sys.argv[1]
    tours = int(sys.argv[2]) if len(sys.argv) > 2 else 500
    meta = os.path.join(racine, ".meta")
    os.makedirs(meta, exist_ok=True)
    os.makedirs(os.path.join(racine, ".tmp"), exist_ok=True)
    for suite in ("actuelle", "fichier d'abord", "sans fsync") * 2:
        t = dict.fromkeys(("fichier", "fiche", "dossier", "dossier .meta"), 0.0)
        debut = time.perf_counter()
        for i in range(tours):
            tour(racine, meta, i, suite, t)
        total = (time.perf_counter() - debut) / tours * 1e6
        detail = "".join(f"fsync {k} {v / tours * 1e6:.0f} ; " for k, v in t.items() if v)
        print(f"{suite:16} : {detail}publication entière {total:.0f} µs")
    print(f"({tours} publications de 10 Kio par ligne, dans {racine})")
    if temporaire:
        shutil.rmtree(racine)


if __name__ == "__main__":
    main()
