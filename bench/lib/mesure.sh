# depot-fichiers — banc d'essai : les mesures wrk, entrelacées, et leurs médianes (à sourcer).
#
# Chaque mesure est une passe de `wrk -t2 -c8 --latency` (DUREE secondes ; ECHAUFFEMENT secondes
# d'échauffement, sauté par la passe rapide, RAPIDE=1), répétée REPETITIONS fois ; plusieurs cibles
# mesurées tour à tour (entrelacées) pour que la charge de la machine pèse autant sur chacune. Pour
# chacune : req/s, p50/p99 de wrk, p99 vu par Apache (%D du journal d'accès), requêtes de plus de
# 500 ms, temps CPU par requête de chaque classe de processus. Les médianes vont dans le tableau
# associatif R (R[CLÉ.rps], R[CLÉ.p99]…), que le script déclare (declare -A R).

# wrk_mesure URL [SCRIPT_LUA] [LIBELLÉ] → « req/s p50_ms p99_ms erreurs requêtes » ; la sortie
# brute de wrk s'ajoute à $ETAT/travail/wrk.txt sous une ligne « ### LIBELLÉ » (affichée si des
# erreurs apparaissent ; gardée dans bench/runs/ par une passe complète).
wrk_mesure() {
    local args=(-t2 -c8 -d"${DUREE}s" --latency)
    [ -n "${2:-}" ] && args+=(-s "$2")
    printf '### %s (%s)\n' "${3:-$1}" "$(date '+%H:%M:%S')" >>"$ETAT/travail/wrk.txt"
    # Temps CPU de wrk (utilisateur + système, en s) dans wrk.cpu, pour le coût par requête.
    /usr/bin/time -o "$ETAT/travail/wrk.cpu" -f '%U %S' wrk "${args[@]}" "$1" | tee -a "$ETAT/travail/wrk.txt" | awk '
        function ms(v) {
            if (v ~ /us$/) return substr(v, 1, length(v)-2) / 1000
            if (v ~ /ms$/) return substr(v, 1, length(v)-2) + 0
            if (v ~ /s$/)  return substr(v, 1, length(v)-1) * 1000
            return v + 0 }
        /^ +50%/ { p50 = ms($2) }  /^ +99%/ { p99 = ms($2) }
        /Non-2xx/ { err += $NF }
        /Socket errors/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+,?$/) err += $i + 0 }
        / requests in / { total = $1 }
        /^Requests\/sec:/ { rps = $2 }
        END { printf "%s %s %s %d %d\n", rps, p50, p99, err, total }'
}
# Quelques erreurs isolées (délai de wrk dépassé quand mod_fcgid dort 1 s faute de processus libre)
# sont signalées ; au-delà de 1 % des requêtes, le banc s'arrête : c'est le montage qui est cassé.
erreurs_wrk() { # LIBELLÉ ERREURS TOTAL
    [ "$2" = 0 ] && return 0
    info "  attention : $1 : $2 erreur(s) sur $3 requêtes (détail : wrk.txt ci-dessous)"
    grep -E 'Non-2xx|Socket errors' "$ETAT/travail/wrk.txt" | sort | uniq -c >&2 || true
    [ $(( $2 * 100 )) -le "$3" ] || echec "$1 : trop d'erreurs ($2 sur $3)"
}
wrk_echauffement() { wrk -t2 -c8 -d"${ECHAUFFEMENT}s" ${2:+-s "$2"} "$1" >/dev/null; }

# Temps CPU (utime + stime de /proc/<pid>/stat, en tops de 1/100 s) consommé par chaque classe de
# processus : « programme répondeurs apache » (programme : les deux copies, bloc livré et hôte
# générique ; répondeurs : les répondeurs nuls, minimal et le php-fpm de CE banc, comptés ensemble :
# un seul hôte est mesuré à la fois ; apache = le processus de CET Apache et ses fils : ses fils
# d'exécution, le gestionnaire de mod_fcgid). Relevé avant et après une mesure wrk, divisé par le
# nombre de requêtes : le coût CPU par requête, que le bruit de la machine déplace moins que les
# req/s. wrk mesure le sien lui-même (rusage de son processus, lu par /usr/bin/time).
cpu_classes() {
    local p exe prog=0 nul=0 ap=0 t pp
    for p in /proc/[0-9]*; do
        exe="$(readlink "$p/exe" 2>/dev/null)" || continue
        case "$exe" in
            "$BIN" | "$BIN_GEN" | "$NUL" | "$SPEC" | "$MINI" | "$MINI_SPEC" | "$APACHE2") ;;
            "$PHP_FPM") [ -n "$PHP_PID" ] || continue ;;
            *) continue ;;
        esac
        read -r t pp < <(awk '{ sub(/^.*\) /, ""); print $12 + $13, $2 }' "$p/stat" 2>/dev/null) || continue
        case "$exe" in
            "$BIN" | "$BIN_GEN") prog=$((prog + t)) ;;
            "$NUL" | "$SPEC" | "$MINI" | "$MINI_SPEC") nul=$((nul + t)) ;;
            "$PHP_FPM") if [ "${p#/proc/}" = "$PHP_PID" ] || [ "$pp" = "$PHP_PID" ]; then nul=$((nul + t)); fi ;;
            *) if [ "${p#/proc/}" = "$APACHE_PID" ] || [ "$pp" = "$APACHE_PID" ]; then ap=$((ap + t)); fi ;;
        esac
    done
    echo "$prog $nul $ap"
}

# wrk_lents CLÉ JOURNAL DURÉE URL [LUA] : une mesure wrk, résultats accumulés dans les tableaux
# nommés CLÉ_rps, CLÉ_p50, CLÉ_p99 et R[CLÉ.lents], R[CLÉ.n], R[CLÉ.max], R[CLÉ.err], R[CLÉ.tot].
wrk_lents() {
    local cle="$1" journal="$2" d0 a b c e f l n m q p0 n0 a0 p1 n1 a1 w
    d0="$(lignes "$journal")"
    read -r p0 n0 a0 < <(cpu_classes)
    read -r a b c e f < <(DUREE="$3" wrk_mesure "$4" "${5:-}" "$cle")
    read -r p1 n1 a1 < <(cpu_classes)
    read -r l n m q < <(lents_depuis "$journal" "$d0")
    # Les durées de chaque requête du petit téléchargement, pour sa distribution (latences-petit.tsv).
    case "$cle" in petit_*) durees_depuis "$journal" "$d0" >>"$ETAT/travail/durees-$cle.us" ;; esac
    w="$(awk '{ print $1 + $2; exit }' "$ETAT/travail/wrk.cpu" 2>/dev/null || echo 0)"
    # µs de CPU par requête : tops × 10 000 / requêtes (le programme ou un nul, selon le cas)
    read -r p0 n0 a0 < <(awk -v p=$((p1 - p0 + n1 - n0)) -v a=$((a1 - a0)) -v w="$w" -v f="$f" \
        'BEGIN { if (!f) f = 1; printf "%.0f %.0f %.0f\n", p * 10000 / f, a * 10000 / f, w * 1000000 / f }')
    eval "${cle}_rps+=(\"\$a\"); ${cle}_p50+=(\"\$b\"); ${cle}_p99+=(\"\$c\"); ${cle}_d99+=(\"\$q\")"
    eval "${cle}_cpu+=(\"\$p0\"); ${cle}_cpuapache+=(\"\$n0\"); ${cle}_cpuwrk+=(\"\$a0\")"
    R[$cle.lents]=$((${R[$cle.lents]:-0} + l)); R[$cle.n]=$((${R[$cle.n]:-0} + n))
    R[$cle.err]=$((${R[$cle.err]:-0} + e)); R[$cle.tot]=$((${R[$cle.tot]:-0} + f))
    awk -v m="$m" -v o="${R[$cle.max]:-0}" 'BEGIN { exit !(m > o) }' && R[$cle.max]="$m"
    return 0
}
medianes() { # CLÉ : médianes des tableaux accumulés par wrk_lents
    local cle="$1" v
    for v in rps p50 p99 d99 cpu cpuapache cpuwrk; do eval "R[\$cle.\$v]=\"\$(mediane \"\${${cle}_$v[@]}\")\""; done
    erreurs_wrk "$cle" "${R[$cle.err]}" "${R[$cle.tot]}"
}
contre_nul() { # CAS URL_PROGRAMME URL_NUL [LUA] : mesures entrelacées programme / répondeur nul
    local cas="$1" i
    local v
    for v in rps p50 p99 d99; do eval "${cas}_prog_$v=(); ${cas}_nul_$v=()"; done
    # Échauffement (la passe rapide s'en passe : le groupe vient d'être rempli).
    # Le petit téléchargement se mesure aussi contre le nul qui fait les appels de la spécification.
    local spec=""
    [ "$cas" = petit ] && [ "$REFERENCE" = 0 ] && spec="$URL_SPEC/download.php?fichier=petit.bin"
    for v in rps p50 p99 d99; do eval "${cas}_spec_$v=()"; done
    [ "$RAPIDE" = 1 ] || { wrk_echauffement "$2" "${4:-}"; wrk_echauffement "$3" "${4:-}"; }
    [ "$RAPIDE" = 1 ] || [ -z "$spec" ] || wrk_echauffement "$spec"
    for i in $(seq 1 "$REPETITIONS"); do
        wrk_lents "${cas}_prog" "$JOURNAL_PROG" "$DUREE" "$2" "${4:-}"
        wrk_lents "${cas}_nul" "$JOURNAL_NUL" "$DUREE" "$3" "${4:-}"
        [ -z "$spec" ] || wrk_lents "${cas}_spec" "$JOURNAL_SPEC" "$DUREE" "$spec"
    done
    medianes "${cas}_prog"; medianes "${cas}_nul"
    [ -z "$spec" ] || medianes "${cas}_spec"
    info "  $cas : ${R[${cas}_prog.rps]} req/s contre ${R[${cas}_nul.rps]} (nul)${spec:+ et ${R[${cas}_spec.rps]} (nul + spécification)} ; > 500 ms : ${R[${cas}_prog.lents]} / ${R[${cas}_nul.lents]}"
}

# entrelacees LUA CLÉ JOURNAL URL [CLÉ JOURNAL URL…] : pour chaque répétition, une mesure wrk de
# chaque cible, dans l'ordre donné (LUA vide : un GET) ; médianes dans R[CLÉ.*] (voir wrk_lents).
entrelacees() {
    local lua="$1" i j v
    shift
    local c=("$@")
    for ((j = 0; j < ${#c[@]}; j += 3)); do
        for v in rps p50 p99 d99 cpu cpuapache cpuwrk; do eval "${c[j]}_$v=()"; done
    done
    [ "$RAPIDE" = 1 ] || for ((j = 0; j < ${#c[@]}; j += 3)); do wrk_echauffement "${c[j + 2]}" "$lua"; done
    for i in $(seq 1 "$REPETITIONS"); do
        for ((j = 0; j < ${#c[@]}; j += 3)); do wrk_lents "${c[j]}" "${c[j + 1]}" "$DUREE" "${c[j + 2]}" "$lua"; done
    done
    for ((j = 0; j < ${#c[@]}; j += 3)); do medianes "${c[j]}"; done
}
