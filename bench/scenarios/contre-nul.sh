# depot-fichiers — banc d'essai, scénario : le programme contre le répondeur FastCGI nul, dans le
# même Apache, mêmes directives Fcgid (à sourcer ; lib/ d'abord).
#
# Chaque mesure wrk du programme est suivie de la même mesure sur le répondeur nul (entrelacement :
# une machine partagée et bruyante pèse autant sur les deux, le RAPPORT reste comparable). Les
# requêtes de plus de 500 ms sont comptées dans le journal d'accès (%D, en µs) : wrk « corrige »
# l'omission coordonnée et une seule attente de 1 s y gonfle le p99 de centaines d'échantillons
# synthétiques.
#
#   verifier_repondeurs     le nul, le nul + spécification (ou la référence A/B) et le minimal répondent
#   contre_nul CAS …        (lib/mesure.sh) petit, depot, lien
#   mesurer_endurance       ENDURANCE secondes de GET, programme puis nul (endu_*)
#   mesurer_proxy_fcgi      la route mod_proxy_fcgi + --listen, un processus (proxy_prog)
#   rafales_froides         Apache redémarré, 8 clients × 20 GET (froid_prog, froid_nul)
# et les tableaux de ces mesures (tableau_contre_nul, tableau_seulement_rapport, cibles_contre_nul).

verifier_repondeurs() {
    if [ "$REFERENCE" = 1 ]; then
        info "  A/B : à la place du répondeur nul, $DEPOT_BIN_REFERENCE"
        [ "$(curl -s -o /dev/null -w '%{http_code} %{size_download}' "$URL_NUL/download.php?fichier=petit.bin&token=$TOKEN")" = "200 10240" ] \
            || echec "la version de référence ne sert pas petit.bin"
    else
        [ "$(curl -s -o /dev/null -w '%{http_code} %{size_download}' "$URL_NUL/download.php")" = "200 10240" ] \
            || echec "le répondeur nul ne répond pas 200 + 10 Kio"
        cmp -s <(curl -s "$URL_SPEC/download.php?fichier=petit.bin") "$ETAT/travail/petit.bin" \
            || echec "le répondeur nul avec les appels de la spécification ne sert pas petit.bin du dépôt"
        grep -q 'petit.bin' "$ETAT/log/repondeur-spec.log" \
            || echec "le répondeur nul avec les appels de la spécification n'écrit pas son journal"
    fi
    if [ "$SEULEMENT_RAPPORT" = 0 ]; then
        [ "$(curl -s -o /dev/null -w '%{http_code} %{size_download}' "$URL_MINI/download.php")" = "200 10240" ] \
            || echec "le répondeur minimal ne répond pas 200 + 10 Kio"
        cmp -s <(curl -s "$URL_MINI_SPEC/download.php?fichier=petit.bin") "$ETAT/travail/petit.bin" \
            || echec "le répondeur minimal avec les appels de la spécification ne sert pas petit.bin du dépôt"
        # Ses en-têtes sont une copie (SPEC_HEAD, bench/appels-spec.h) : ceux du programme ne
        # doivent pas en avoir changé sans elle, sinon le plancher ne mesure plus le même contrat.
        local programme plancher
        programme="$(entetes_compares "$(dl petit.bin)")"
        plancher="$(entetes_compares "$URL_MINI_SPEC/download.php?fichier=petit.bin")"
        [ "$programme" = "$plancher" ] \
            || echec "les en-têtes du programme ne sont plus ceux de SPEC_HEAD (bench/appels-spec.h) : $(diff <(echo "$programme") <(echo "$plancher") | tr '\n' ' ')"
    fi
}
# Les en-têtes d'un GET, sans ceux qu'Apache ajoute lui-même ni la valeur de l'ETag (propre à
# chaque dépôt), triés : ce que le programme choisit de répondre.
entetes_compares() {
    curl -s -o /dev/null -D - "$1" | tr -d '\r' \
        | grep -Eiv '^(date|server|keep-alive|connection|http/)' | sed -E 's/^(etag): .*/\1: …/I' | grep -v '^$' | sort
}

mesurer_endurance() {
    info "Endurance : $ENDURANCE s à 8 connexions, petit téléchargement (programme, puis répondeur nul)"
    local v
    for v in rps p50 p99 d99; do eval "endu_prog_$v=(); endu_nul_$v=()"; done
    wrk_lents endu_prog "$JOURNAL_PROG" "$ENDURANCE" "$(dl petit.bin)"
    wrk_lents endu_nul "$JOURNAL_NUL" "$ENDURANCE" "$URL_NUL/download.php?fichier=petit.bin"
    medianes endu_prog; medianes endu_nul
    R[groupe.prog.apres]="$(pids_depot | wc -l)"; R[groupe.nul.apres]="$(pids_exe "$NUL" | wc -l)"
    info "  programme p99 ${R[endu_prog.p99]} ms, > 500 ms : ${R[endu_prog.lents]} ; nul p99 ${R[endu_nul.p99]} ms, > 500 ms : ${R[endu_nul.lents]}"
}

# La route mod_proxy_fcgi + --listen : UN processus depot-fichiers lancé à part (comme sous
# systemd), aucun groupe à faire grandir ; une requête de trop attend dans la file de la socket.
mesurer_proxy_fcgi() {
    local u="$URL_PROXY/download.php?fichier=petit.bin&token=$TOKEN" i
    info "mod_proxy_fcgi → depot-fichiers --listen tcp:127.0.0.1:$PORT_LISTEN ($URL_PROXY)"
    "${EN_TANT_QUE[@]}" "$BIN" --config "$ETAT/config.toml" --listen "tcp:127.0.0.1:$PORT_LISTEN" \
        >"$ETAT/serveur/log/listen.out" 2>&1 &
    LISTEN_PID=$!
    for _ in $(seq 1 200); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$u")" = 200 ] && break
        sleep 0.05
    done
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$u")" = 200 ] \
        || { cat "$ETAT/serveur/log/listen.out" >&2; echec "la route mod_proxy_fcgi ne répond pas"; }
    proxy_prog_rps=(); proxy_prog_p50=(); proxy_prog_p99=(); proxy_prog_d99=()
    wrk_echauffement "$u"
    for i in $(seq 1 "$REPETITIONS"); do
        wrk_lents proxy_prog "$JOURNAL_PROXY" "$DUREE" "$u"
    done
    medianes proxy_prog
    kill -TERM "$LISTEN_PID" 2>/dev/null || true; wait "$LISTEN_PID" 2>/dev/null || true; LISTEN_PID=""
    info "  proxy_fcgi : ${R[proxy_prog.rps]} req/s, p99 ${R[proxy_prog.p99]} ms, > 500 ms : ${R[proxy_prog.lents]}"
}

rafales_froides() {
    info "Rafales à froid (Apache redémarré : groupe vide ; 8 clients × 20 téléchargements)"
    rafale_froide froid_prog "$JOURNAL_PROG" "$(dl petit.bin)"
    rafale_froide froid_nul "$JOURNAL_NUL" "$URL_NUL/download.php?fichier=petit.bin"
}

# --seulement-rapport : le tableau du petit téléchargement contre le nul (ou la référence A/B).
tableau_seulement_rapport() {
    cpu() { printf '%s / %s / %s' "${R[$1.cpu]}" "${R[$1.cpuapache]}" "${R[$1.cpuwrk]}"; }
    rapport() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
    echo
    echo "depot-fichiers — programme contre répondeur nul ($(date '+%Y-%m-%d %H:%M'), $(nproc) cœurs, charge $(cut -d' ' -f1-3 /proc/loadavg))"
    echo "GET 10 Kio, wrk 8 connexions, $REPETITIONS × ${DUREE} s entrelacées (médianes) ; groupe rempli : ${R[groupe.prog]} et ${R[groupe.nul]} processus$([ "$REFERENCE" = 1 ] || echo " (${R[groupe.spec]} nuls + spécification)")"
    printf '%-44s %16s %16s %8s\n' "" "depot-fichiers" "$([ "$REFERENCE" = 1 ] && echo référence || echo "répondeur nul")" "rapport"
    printf '%-44s %16s %16s %8s\n' "  req/s" "${R[petit_prog.rps]}" "${R[petit_nul.rps]}" \
        "$(rapport "${R[petit_prog.rps]}" "${R[petit_nul.rps]}")"
    printf '%-44s %16s %16s\n' "  latence p50 / p99 (ms, wrk)" "${R[petit_prog.p50]} / ${R[petit_prog.p99]}" \
        "${R[petit_nul.p50]} / ${R[petit_nul.p99]}"
    printf '%-44s %16s %16s\n' "  p99 vu par Apache (ms, journal %D)" "${R[petit_prog.d99]}" "${R[petit_nul.d99]}"
    printf '%-44s %16s %16s\n' "  > 500 ms / requêtes" "${R[petit_prog.lents]}/${R[petit_prog.n]}" "${R[petit_nul.lents]}/${R[petit_nul.n]}"
    printf '%-44s %16s %16s\n' "  CPU par requête (µs) : répondeur / Apache / wrk" "$(cpu petit_prog)" "$(cpu petit_nul)"
    if [ "$REFERENCE" = 0 ]; then
        echo "Répondeur nul + appels système de la spécification (même Apache, même fichier, mesures entrelacées) :"
        printf '%-44s %16s %16s %8s\n' "  req/s ; rapport au répondeur nul" "" "${R[petit_spec.rps]}" \
            "$(rapport "${R[petit_spec.rps]}" "${R[petit_nul.rps]}")"
        printf '%-44s %16s %16s\n' "  CPU par requête (µs) : répondeur / Apache / wrk" "" "$(cpu petit_spec)"
        printf '%-44s %16s %16s %8s\n' "  depot-fichiers / (nul + spécification)" "" "" \
            "$(rapport "${R[petit_prog.rps]}" "${R[petit_spec.rps]}")"
    fi
}

# Le tableau « Contre le répondeur FastCGI nul » d'une passe complète.
tableau_contre_nul() {
    local k lib
    printf '%-44s %16s %16s %8s\n' "Contre le répondeur FastCGI nul (wrk 8 conn.)" "depot-fichiers" "répondeur nul" "rapport"
    echo "  (même Apache, mêmes directives Fcgid, mesures entrelacées ; groupe rempli avant : ${R[groupe.prog]}, ${R[groupe.nul]} et ${R[groupe.spec]} processus,"
    echo "   max $GROUPE_MAX, par $GROUPE_MAX requêtes lentes en parallèle, deux fois ; « > 500 ms » compté dans le journal d'accès, %D)"
    for k in petit depot lien endu; do
        case "$k" in
            petit) lib="GET 10 Kio ($REPETITIONS × ${DUREE} s)" ;;
            depot) lib="dépôt 10 Kio, multipart ($REPETITIONS × ${DUREE} s)" ;;
            lien) lib="MCP tools/call mode=lien ($REPETITIONS × ${DUREE} s)" ;;
            endu) lib="endurance GET 10 Kio (${ENDURANCE} s)" ;;
        esac
        printf '%-44s %16s %16s %8s\n' "  $lib : req/s" "$(f1 "${R[${k}_prog.rps]}")" "$(f1 "${R[${k}_nul.rps]}")" \
            "$(f2 "$(calc "${R[${k}_prog.rps]} / ${R[${k}_nul.rps]}")")"
        printf '%-44s %16s %16s\n' "      latence p50 / p99 (ms, wrk)" "$(f2 "${R[${k}_prog.p50]}") / $(f2 "${R[${k}_prog.p99]}")" \
            "$(f2 "${R[${k}_nul.p50]}") / $(f2 "${R[${k}_nul.p99]}")"
        printf '%-44s %16s %16s\n' "      p99 vu par Apache (ms, journal %D)" "$(f2 "${R[${k}_prog.d99]}")" "$(f2 "${R[${k}_nul.d99]}")"
        printf '%-44s %16s %16s\n' "      > 500 ms / requêtes (max ms)" \
            "${R[${k}_prog.lents]}/${R[${k}_prog.n]} ($(f1 "${R[${k}_prog.max]}"))" "${R[${k}_nul.lents]}/${R[${k}_nul.n]} ($(f1 "${R[${k}_nul.max]}"))"
        printf '%-44s %16s %16s\n' "      CPU/requête (µs) : répondeur/Apache/wrk" \
            "${R[${k}_prog.cpu]}/${R[${k}_prog.cpuapache]}/${R[${k}_prog.cpuwrk]}" "${R[${k}_nul.cpu]}/${R[${k}_nul.cpuapache]}/${R[${k}_nul.cpuwrk]}"
    done
    printf '%-44s %16s %16s %8s\n' "  GET 10 Kio, nul + spécification : req/s" "" "$(f1 "${R[petit_spec.rps]}")" \
        "$(f2 "$(calc "${R[petit_spec.rps]} / ${R[petit_nul.rps]}")")"
    printf '%-44s %16s %16s\n' "      CPU/requête (µs) : répondeur/Apache/wrk" "" \
        "${R[petit_spec.cpu]}/${R[petit_spec.cpuapache]}/${R[petit_spec.cpuwrk]}"
    printf '%-44s %16s %16s %8s\n' "  GET 10 Kio : depot-fichiers / (nul + spécification)" "" "" \
        "$(f2 "$(calc "${R[petit_prog.rps]} / ${R[petit_spec.rps]}")")"
    printf '%-44s %16s\n' "  groupe après l'endurance (processus)" "${R[groupe.prog.apres]} / ${R[groupe.nul.apres]}"
    printf '%-44s %16s %16s\n' "  rafale à froid 8 × 20 : > 500 ms (max ms)" \
        "${R[froid_prog.lents]}/${R[froid_prog.n]} ($(f1 "${R[froid_prog.max]}"))" "${R[froid_nul.lents]}/${R[froid_nul.n]} ($(f1 "${R[froid_nul.max]}"))"
    printf '%-44s %16s\n' "  mod_proxy_fcgi + --listen (1 processus) : req/s" "$(f1 "${R[proxy_prog.rps]}")"
    printf '%-44s %16s\n' "      latence p50 / p99 (ms, wrk)" "$(f2 "${R[proxy_prog.p50]}") / $(f2 "${R[proxy_prog.p99]}")"
    printf '%-44s %16s\n' "      p99 vu par Apache (ms, journal %D)" "$(f2 "${R[proxy_prog.d99]}")"
    printf '%-44s %16s\n' "      > 500 ms / requêtes (max ms)" "${R[proxy_prog.lents]}/${R[proxy_prog.n]} ($(f1 "${R[proxy_prog.max]}"))"
}

# Les lignes « Cibles » du petit téléchargement contre le nul et de l'endurance.
cibles_contre_nul() {
    local rnul k lib
    rnul="$(calc "${R[petit_prog.rps]} / ${R[petit_nul.rps]}")"
    printf '  %-58s %10s   %s\n' "GET 10 Kio ≥ 0,75 × répondeur nul" "$(f2 "$rnul")" "$(ok "$rnul" 0.75 '>=')"
    printf '  %-58s %10s\n' "  … où le répondeur nul + appels de la spécification est à" "$(f2 "$(calc "${R[petit_spec.rps]} / ${R[petit_nul.rps]}")")"
    cibles_depot
    for k in prog nul; do
        lib="programme"; [ "$k" = nul ] && lib="répondeur nul"
        printf '  %-58s %10s   %s\n' "endurance ${ENDURANCE} s, $lib : 0 requête > 500 ms" "${R[endu_$k.lents]}" "$(ok "${R[endu_$k.lents]}" 0 '==')"
        printf '  %-58s %7s ms   %s\n' "endurance ${ENDURANCE} s, $lib : p99 < 25 ms (wrk)" "$(f2 "${R[endu_$k.p99]}")" "$(ok "${R[endu_$k.p99]}" 25 '<')"
        printf '  %-58s %7s ms   %s\n' "  … p99 vu par Apache (%D)" "$(f2 "${R[endu_$k.d99]}")" "$(ok "${R[endu_$k.d99]}" 25 '<')"
    done
}
