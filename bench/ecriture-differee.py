#!/usr/bin/env python3
"""depot-fichiers — une publication pendant l'écriture différée du noyau, sans le programme.

    python3 bench/ecriture-differee.py [DOSSIER] [FICHIERS] [SECONDES]

Ce que voit un dépôt quand des téléchargements touchent (mtime, l'horloge du « dernier
téléchargement ») des fichiers pris au hasard parmi FICHIERS (par défaut 10⁶) : chaque `utime`
salit le bloc de la table des inodes de son fichier, le noyau les écrit toutes les 30 s
(`vm.dirty_expire_centisecs`), et un `fsync` qui tombe pendant cette écriture attend derrière elle.

Crée FICHIERS fichiers vides dans DOSSIER/fichiers (par défaut un dossier sous /var/tmp, sur
disque ; un DOSSIER donné est gardé, et ses fichiers resservent au passage suivant), `sync`, puis pendant SECONDES
(75) : un fil touche 25 000 fichiers par seconde pendant les 40 premières, et la boucle principale
publie (10 Kio et une fiche de 129 octets, renommés, comme src/store/publish.rs) toutes les 10 ms
en alternant trois ordres des synchronisations :
  - « lancement commun » : `sync_file_range(SYNC_FILE_RANGE_WRITE)` du fichier et de la fiche, puis
    les quatre `fsync` à la suite (l'ordre du programme) ;
  - « l'un après l'autre » : les quatre `fsync` à la suite ;
  - « par paires » : `fsync` du fichier et de la fiche en même temps (un second fil), puis ceux des
    deux dossiers de même.
Affiche chaque publication de plus de 15 ms avec son départ, puis par ordre : médiane, p99, max,
nombre au-delà de 15 et de 30 ms et leur durée cumulée.
"""
import ctypes
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

_LIBC = ctypes.CDLL("libc.so.6", use_errno=True)
_LIBC.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
SYNC_FILE_RANGE_WRITE = 2
ORDRES = ("lancement commun", "l'un après l'autre", "par paires")
TOUCHES_PAR_S = 25000
SECONDES_DE_TOUCHES = 40


def toucher(dossier, n, fin):
    fd = os.open(dossier, os.O_RDONLY | os.O_DIRECTORY)
    debut = time.time()
    faits = 0
    while time.time() < fin:
        for _ in range(1000):
            os.utime(f"f-{random.randrange(n):07d}", dir_fd=fd)
        faits += 1000
        retard = faits / TOUCHES_PAR_S - (time.time() - debut)
        if retard > 0:
            time.sleep(retard)
    os.close(fd)


def main():
    garde = len(sys.argv) > 1
    racine = sys.argv[1] if garde else tempfile.mkdtemp(dir="/var/tmp")
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    secondes = float(sys.argv[3]) if len(sys.argv) > 3 else 75
    fichiers = os.path.join(racine, "fichiers")
    os.makedirs(fichiers, exist_ok=True)
    complet = os.path.join(racine, f"complet-{n}")
    if not os.path.exists(complet):
        for i in range(n):
            os.close(os.open(os.path.join(fichiers, f"f-{i:07d}"), os.O_WRONLY | os.O_CREAT, 0o600))
        open(complet, "w").close()
    depot = os.path.join(racine, "depot")
    shutil.rmtree(depot, ignore_errors=True)
    meta = os.path.join(depot, ".meta")
    tmp = os.path.join(depot, ".tmp")
    os.makedirs(meta)
    os.makedirs(tmp)
    os.sync()
    dossiers = [os.open(d, os.O_RDONLY | os.O_DIRECTORY) for d in (depot, meta)]
    pool = ThreadPoolExecutor(1)

    def paire(a, b):
        autre = pool.submit(os.fsync, b)
        os.fsync(a)
        autre.result()

    debut = time.time()
    fil = threading.Thread(target=toucher, args=(fichiers, n, debut + SECONDES_DE_TOUCHES))
    fil.start()
    durees = {o: [] for o in ORDRES}
    i = 0
    while time.time() - debut < secondes:
        ordre = ORDRES[i % 3]
        a = time.perf_counter()
        partie = os.path.join(tmp, f"{i}.part")
        fiche_partie = os.path.join(tmp, f"{i}.meta.part")
        f = os.open(partie, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        s = os.open(fiche_partie, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(f, b"x" * 10240)
        os.write(s, b"{" + b"y" * 127 + b"}")
        if ordre == "lancement commun":
            _LIBC.sync_file_range(f, 0, 0, SYNC_FILE_RANGE_WRITE)
            _LIBC.sync_file_range(s, 0, 0, SYNC_FILE_RANGE_WRITE)
        if ordre == "par paires":
            paire(f, s)
        else:
            os.fsync(f)
            os.fsync(s)
        nom = f"banc-{i % 32}.bin"
        os.rename(fiche_partie, os.path.join(meta, nom + ".json"))
        os.rename(partie, os.path.join(depot, nom))
        os.close(f)
        os.close(s)
        if ordre == "par paires":
            paire(*dossiers)
        else:
            for d in dossiers:
                os.fsync(d)
        ms = (time.perf_counter() - a) * 1000
        durees[ordre].append(ms)
        if ms > 15:
            print(f"  {ordre:18} : {ms:6.1f} ms à +{time.time() - debut:.2f} s", flush=True)
        i += 1
        time.sleep(0.01)
    fil.join()
    for ordre, x in durees.items():
        x.sort()
        lents = [y for y in x if y > 15]
        print(
            f"{ordre:18} : {len(x)} publications, médiane {x[len(x) // 2]:.2f} ms, "
            f"p99 {x[int(len(x) * 0.99)]:.2f} ms, max {x[-1]:.1f} ms, "
            f"> 15 ms : {len(lents)}, > 30 ms : {sum(1 for y in x if y > 30)}, "
            f"cumul > 15 ms : {sum(lents):.0f} ms"
        )
    for d in dossiers:
        os.close(d)
    pool.shutdown()
    if not garde:
        shutil.rmtree(racine)


if __name__ == "__main__":
    main()
