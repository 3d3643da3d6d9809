#!/usr/bin/env python3
"""depot-fichiers — le prix d'une création de fichier après un effacement de masse, sans le programme.

    python3 bench/inodes-recents.py DOSSIER [N] [ATTENTE]     (défaut : N = 10000, ATTENTE = 70 s)
    sudo bench/inodes-recents.sh                              (les trois disques ci-dessous)

Dans DOSSIER (sur le système de fichiers à juger), mesure le temps moyen d'une création de fichier
(open O_CREAT|O_EXCL, 10 Kio écrits, close ; 2 000 d'affilée, puis effacées) :
  1. avant : N fichiers existent à côté ;
  2. juste après que ces N fichiers ont été effacés (sync fait) ;
  3. ATTENTE secondes plus tard.
Sur ext4 sans journal, le noyau ne réutilise pas un inode libéré depuis moins de 60 s (300 de
plus si son bloc de la table des inodes n'est pas encore écrit) : `recently_deleted()` sous
`find_inode_bit()`, fs/ext4/ialloc.c. Chaque création parcourt alors les inodes tout juste libérés
de son groupe, un par un. Avec un journal, le test n'existe pas. Écrit une ligne par mesure.
"""
import os
import sys
import time


def creations(d, m=2000, taille=10240):
    os.makedirs(d, exist_ok=True)
    data = b"x" * taille
    t0 = time.perf_counter()
    for i in range(m):
        fd = os.open(f"{d}/c{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, data)
        os.close(fd)
    t = (time.perf_counter() - t0) / m * 1e6
    for i in range(m):
        os.unlink(f"{d}/c{i}")
    return t


def main():
    base = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
    attente = int(sys.argv[3]) if len(sys.argv) > 3 else 70
    # Deux dossiers voisins sous un même dossier, comme files/, .meta/ et .tmp/ dans le dépôt :
    # leurs inodes sont pris dans les mêmes groupes (deux dossiers à la racine du système de
    # fichiers seraient répartis dans des groupes différents, l'allocateur Orlov).
    masse, mesure = f"{base}/banc/masse", f"{base}/banc/mesure"
    os.makedirs(masse, exist_ok=True)
    for i in range(n):
        with open(f"{masse}/f{i}", "wb") as f:
            f.write(b"y" * 100)
    os.sync()
    time.sleep(2)
    print(f"avant l'effacement ({n} fichiers à côté)   : {creations(mesure):7.1f} µs par création", flush=True)
    os.sync()
    t0 = time.perf_counter()
    for i in range(n):
        os.unlink(f"{masse}/f{i}")
    os.sync()
    print(f"{n} fichiers effacés en {time.perf_counter() - t0:.1f} s (sync compris)", flush=True)
    print(f"juste après l'effacement                  : {creations(mesure):7.1f} µs par création", flush=True)
    time.sleep(attente)
    print(f"{attente} s plus tard                          : {creations(mesure):7.1f} µs par création", flush=True)
    os.rmdir(masse)
    os.rmdir(mesure)
    os.rmdir(f"{base}/banc")


if __name__ == "__main__":
    main()
