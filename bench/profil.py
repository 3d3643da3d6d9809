#!/usr/bin/env python3
"""depot-fichiers — où attendent les processus du programme, pendant SECONDES.

    profil.py SECONDES SORTIE EXÉCUTABLE…     (en root ; perf pour les deux dernières parties)

Pendant SECONDES, pour les processus qui exécutent l'un des EXÉCUTABLES (les copies du programme
d'un banc) :
  1. toutes les 5 ms, l'état, `wchan` et la pile noyau (/proc/<pid>/task/<tid>/stack) de chacun
     de leurs fils ; les piles les plus fréquentes par nom de fil (`depot-fichiers` : le fil des
     requêtes ; `balayage` : le fil de balayage ; `tokio-runtime-w` : le réservoir de fils
     bloquants, qui publie les dépôts), hors attente d'une connexion (`ep_poll`) et sommeil du
     réservoir ou du fil de balayage (`futex_wait`) ;
  2. `perf trace -s` des mêmes processus : chaque appel système, son nombre et son temps
     (total, moyen, maximum), additionnés sur tous les fils ;
  3. `perf record -e sched:sched_switch -g -a` : chaque fois qu'un de ces fils quitte le
     processeur pour attendre (état D ou S), la pile noyau où il attend, et combien de fois.
Écrit le tout dans SORTIE. C'est un outil de banc : il décrit, il ne juge pas. Lancé par
`bench/vieillissement --profil` pendant la première mesure de chaque étape.
"""
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time


def pids_of(exes):
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if os.readlink(f"/proc/{p}/exe") in exes:
                    out.append(p)
            except OSError:
                pass
    return out


def sample(duree, exes):
    """Les piles noyau de chaque fil, toutes les 5 ms."""
    count = collections.Counter()
    per_thread = collections.Counter()
    end = time.time() + duree
    turns = 0
    while time.time() < end:
        turns += 1
        for p in pids_of(exes):
            try:
                tasks = os.listdir(f"/proc/{p}/task")
            except OSError:
                continue
            for t in tasks:
                b = f"/proc/{p}/task/{t}"
                try:
                    comm = open(f"{b}/comm").read().strip()
                    state = open(f"{b}/stat").read().rsplit(")", 1)[1].split()[0]
                    wchan = open(f"{b}/wchan").read().strip()
                    frames = [ln.split()[1].split("+")[0] for ln in open(f"{b}/stack").read().splitlines()]
                except (OSError, IndexError):
                    continue
                per_thread[comm] += 1
                if state == "R":
                    key = (comm, "R (au travail ou prêt)", "")
                else:
                    key = (comm, f"{state} {wchan}", " < ".join(frames[:7]))
                count[key] += 1
        time.sleep(0.005)
    return turns, per_thread, count


IDLE = ("ep_poll", "futex_wait", "do_epoll_wait", "hrtimer_nanosleep", "do_nanosleep")


def main():
    duree, sortie, exes = float(sys.argv[1]), sys.argv[2], set(sys.argv[3:])
    pids = pids_of(exes)
    work = tempfile.mkdtemp(prefix="profil-")
    trace = record = None
    perf = shutil.which("perf")
    if perf and pids:
        # Arrêté par SIGINT au bout de la durée : `-p` suivi d'une commande tracerait la commande.
        trace = subprocess.Popen(
            ["timeout", "-s", "INT", str(duree), perf, "trace", "-s", "-o", f"{work}/trace.txt",
             "-p", ",".join(pids)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        record = subprocess.Popen(
            [perf, "record", "-q", "-e", "sched:sched_switch", "-g", "-a", "-o", f"{work}/perf.data",
             "--", "sleep", str(duree)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    turns, per_thread, count = sample(duree, exes)
    out = [f"# profil.py {duree:g} s, {len(pids)} processus, {turns} tours d'échantillonnage"]
    out.append(f"# échantillons par nom de fil : {dict(per_thread)}")
    out.append("## 1. Piles noyau des fils (échantillons toutes les 5 ms ; hors attente d'une connexion ou d'un travail)")
    for (comm, state, stack), c in count.most_common():
        if any(i in state or i in stack for i in IDLE) and not state.startswith("D"):
            continue
        out.append(f"{c:7d}  {100 * c / max(per_thread[comm], 1):5.1f} %  {comm:<16} {state:<30} {stack}")
        if len(out) > 60:
            break
    if trace:
        trace.wait()
        calls = collections.defaultdict(lambda: [0, 0.0, 0.0])
        for line in open(f"{work}/trace.txt", errors="replace"):
            m = re.match(r"\s+(\w+)\s+(\d+)\s+\d+\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)", line)
            if m:
                c = calls[m.group(1)]
                c[0] += int(m.group(2))
                c[1] += float(m.group(3))
                c[2] = max(c[2], float(m.group(4)))
        out.append("## 2. Appels système (perf trace -s, tous les fils) : nombre, total (ms), moyen (µs), max (ms)")
        for name, (n, total, mx) in sorted(calls.items(), key=lambda kv: -kv[1][1])[:25]:
            out.append(f"  {name:<18} {n:9d} {total:12.1f} {1000 * total / max(n, 1):10.1f} {mx:10.1f}")
    if record:
        record.wait()
        script = subprocess.run([perf, "script", "-i", f"{work}/perf.data", "-F", "comm,tid,event,trace,ip,sym"],
                                capture_output=True, text=True, errors="replace").stdout
        waits = collections.Counter()
        comms = {os.path.basename(e)[:15] for e in exes} | {"balayage", "tokio-runtime-w"}
        block = []
        for line in script.splitlines() + [""]:
            if line.strip():
                block.append(line)
                continue
            if block:
                head = block[0]
                m = re.search(r"prev_comm=(\S+) .*prev_state=(\S+)", head)
                comm = head.split()[0]
                if m and comm in comms and m.group(2) in ("D", "S"):
                    frames = [b.split()[1].split("+")[0] for b in block[1:] if len(b.split()) > 1]
                    frames = [f for f in frames if f not in ("__schedule", "schedule", "__traceiter_sched_switch")]
                    waits[(comm, m.group(2), " < ".join(frames[:7]))] += 1
                block = []
        out.append("## 3. Mises en attente (perf record -e sched:sched_switch -g -a) : fil, état, pile noyau")
        for (comm, st, stack), c in waits.most_common(30):
            out.append(f"{c:7d}  {comm:<16} {st} {stack}")
    shutil.rmtree(work, ignore_errors=True)
    with open(sortie, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
