# depot-fichiers — banc d'essai : lignes de tableau et sortie brute d'une passe (à sourcer).

# Une ligne de tableau pour une mesure de lib/mesure.sh (rapport.txt, --seulement-depot, vieillissement).
ligne_wrk() { # LIBELLÉ CLÉ [CLÉ_DE_RÉFÉRENCE] : req/s, rapport à la référence, latences, CPU
    local r="—"
    [ -z "${3:-}" ] || r="$(f2 "$(calc "${R[$2.rps]} / ${R[$3.rps]}")")"
    printf '  %-40s %9s %7s %15s %8s %13s %14s\n' "$1" "$(f1 "${R[$2.rps]}")" "$r" \
        "$(f2 "${R[$2.p50]}") / $(f2 "${R[$2.p99]}")" "$(f2 "${R[$2.d99]}")" "${R[$2.lents]}/${R[$2.n]}" \
        "${R[$2.cpu]}/${R[$2.cpuapache]}/${R[$2.cpuwrk]}"
}
entete_wrk() { # TITRE NOM_DU_RAPPORT
    printf '%-42s %9s %7s %15s %8s %13s %14s\n' "$1" "req/s" "$2" "p50 / p99 wrk" "p99 %D" "> 500 ms/req" "CPU µs r/A/w"
}

# La distribution des durées du petit téléchargement (fichiers travail/durees-petit_*.us écrits par
# wrk_lents), pour latences-petit.tsv et .svg.
# Quantiles q = 1 − 10^(−k/10), k = 0, 1, 2… (0, 20,6 %, 36,9 %, …, 90 %, …, 99 %, …, 99,9 %…) tant
# que 1/(1−q) ne dépasse pas le nombre de requêtes : la courbe porte 1/(1−q) en abscisse
# logarithmique, pour que la queue (99 %, 99,9 %) ait autant de place que la médiane.
colonne_quantiles() { # FICHIER_µs KMAX → KMAX + 1 lignes : la durée (ms) au quantile k, « - » sans assez de requêtes
    sort -n "$1" 2>/dev/null | awk -v K="$2" '{ d[NR] = $1 } END {
        for (k = 0; k <= K; k++) {
            x = 10 ^ (k / 10)
            if (NR == 0 || x > NR) { print "-"; continue }
            r = int(NR * (1 - 1 / x)) + 1; if (r > NR) r = NR
            printf "%.3f\n", d[r] / 1000 } }'
}
latences_petit() { # DOSSIER : DOSSIER/latences-petit.tsv et DOSSIER/latences-petit.svg
    local dossier="$1" c f n k nmax=0 max=() ns=() fichiers=()
    local quand machine
    quand="$(date '+%Y-%m-%d %H:%M')"; machine="$(hostname -s 2>/dev/null || uname -n), $(nproc) cœurs"
    for c in petit_prog petit_nul petit_spec; do
        f="$ETAT/travail/durees-$c.us"; fichiers+=("$f")
        n="$(lignes "$f")"; ns+=("$n")
        [ "$n" -gt "$nmax" ] && nmax="$n"
        max+=("$(sort -n "$f" 2>/dev/null | awk 'END { if (NR) printf "%.3f", $1 / 1000; else printf "-" }')")
    done
    [ "$nmax" -gt 0 ] || echec "aucune durée relevée pour le petit téléchargement"
    k="$(awk -v n="$nmax" 'BEGIN { print int(10 * log(n) / log(10) + 1e-9) }')"
    {
        echo "# GET 10 Kio, wrk 8 connexions, $REPETITIONS × ${DUREE} s entrelacées ; durée de chaque requête vue par Apache (%D, ms)"
        echo "# $quand ; $machine"
        echo "# requêtes : depot-fichiers ${ns[0]}, répondeur nul ${ns[1]}, nul + appels de la spécification ${ns[2]}"
        echo "# maximum (ms) : depot-fichiers ${max[0]}, répondeur nul ${max[1]}, nul + appels de la spécification ${max[2]}"
        echo "# quantile q = 1 - 10^(-k/10) ; x = 1/(1-q) ; « - » : pas assez de requêtes"
        printf '# k\tq_pct\tx\tdepot-fichiers\trepondeur_nul\tnul_plus_specification\n'
        paste <(awk -v K="$k" 'BEGIN { for (i = 0; i <= K; i++) { x = 10 ^ (i / 10); printf "%d\t%.4f\t%.4g\n", i, 100 * (1 - 1 / x), x } }') \
            <(colonne_quantiles "${fichiers[0]}" "$k") <(colonne_quantiles "${fichiers[1]}" "$k") \
            <(colonne_quantiles "${fichiers[2]}" "$k")
    } >"$dossier/latences-petit.tsv"
    gnuplot <<EOF || echec "gnuplot n'a pas tracé $dossier/latences-petit.svg"
set encoding utf8
set terminal svg size 900,540 dynamic noenhanced font "sans,13" background "white"
set output "$dossier/latences-petit.svg"
set title "GET 10 Kio sous le même Apache, wrk 8 connexions : durée vue par Apache (%D)\n$quand ; $machine"
set xlabel "quantile (%)"
set ylabel "durée (ms)"
set logscale xy
set xtics ("0" 1, "50" 2, "90" 10, "99" 100, "99,9" 1000, "99,99" 10000, "99,999" 100000, "99,9999" 1000000)
set grid
set key top left
set datafile missing "-"
plot "$dossier/latences-petit.tsv" using 3:4 with lines linewidth 2 title "depot-fichiers", \
     "" using 3:5 with lines linewidth 2 title "répondeur FastCGI nul", \
     "" using 3:6 with lines linewidth 2 dashtype 2 title "nul + appels système de la spécification"
EOF
    [ -s "$dossier/latences-petit.svg" ] || echec "$dossier/latences-petit.svg vide"
}


# garder_passe DOSSIER : la sortie brute d'une passe de bench/run dans DOSSIER (bench/runs/…) :
# rapport.txt, wrk.txt (token masqué) et machine.txt ; rendue au propriétaire du dépôt quand la
# passe tourne sous sudo.
garder_passe() {
    cp "$ETAT/travail/rapport.txt" "$1/rapport.txt"
    # Le token d'accès de cette passe figure dans les URL de wrk : masqué.
    sed -e "s/$TOKEN/<token>/g" "$ETAT/travail/wrk.txt" >"$1/wrk.txt"
    ecrire_machine_txt "$1/machine.txt"
    # Lancé par sudo : le dossier revient au propriétaire du dépôt.
    [ "$(id -u)" -ne 0 ] || chown -R --reference="$RACINE" "$1" 2>/dev/null || true
}

# ecrire_machine_txt FICHIER [LIGNES…] : dates et charge, commande, source, machine, versions
# d'Apache, de mod_fcgid, de wrk et de php-fpm ; LIGNES en plus.
ecrire_machine_txt() {
    local f="$1" l
    shift
    {
        echo "début : $DEBUT (charge $CHARGE_DEBUT) ; fin : $(date '+%Y-%m-%d %H:%M:%S %z') (charge $(cut -d' ' -f1-3 /proc/loadavg))"
        echo "commande : bench/$(basename "$0") $OPTIONS${DEPOT_BENCH_APACHE_EXTRA:+ ; DEPOT_BENCH_APACHE_EXTRA=$DEPOT_BENCH_APACHE_EXTRA}"
        machine_txt
        echo "dossier d'état : $(df -T "$ETAT" | awk 'NR == 2 { print $2 }') ($ETAT ; $(findmnt -no SOURCE,OPTIONS -T "$ETAT" 2>/dev/null))"
        echo "apache2 : $("$APACHE2" -v 2>/dev/null | awk -F': ' 'NR == 1 { print $2 }') ; libapache2-mod-fcgid $(dpkg-query -W -f='${Version}' libapache2-mod-fcgid 2>/dev/null) ; $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2)"
        [ -z "${PHP_FPM:-}" ] || echo "php-fpm : $PHP_FPM ($PHP_VERSION, $(dpkg-query -W -f='${Version}' "$(basename "$PHP_FPM" | sed 's/^php-fpm/php/')-fpm" 2>/dev/null))"
        for l in "$@"; do echo "$l"; done
    } >"$f"
}
