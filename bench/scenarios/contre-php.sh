# depot-fichiers — banc d'essai, scénario : le programme contre la conception PHP du cahier des
# charges et contre le répondeur FastCGI minimal, dans le même Apache (à sourcer ; lib/ d'abord).
#
#   depot_contre_php             dépôt de 10 Kio à 8 connexions, 32 noms tournants par fil wrk :
#                                bloc livré (up_prog), PHP (up_php), hôte générique (up_gen)
#   telechargements_contre_php   GET 10 Kio (dphp_*) puis CENT_MIO Mio par curl (cent_*)
#   contre_minimal               GET 10 Kio, programme (mini_prog) / répondeur minimal (mini_mini),
#                                et le minimal + appels de la spécification (mini_spec)
# et les tableaux et cibles de ces mesures.

# Le dépôt de 10 Kio à 8 connexions, 32 noms tournants par fil wrk : programme sous le bloc livré,
# conception PHP, programme sous l'hôte mod_fcgid générique, entrelacés.
depot_contre_php() {
    info "Dépôt 10 Kio à 8 connexions (32 noms par fil wrk) : bloc livré ($URL), PHP ($URL_PHP), hôte générique ($URL_GEN)"
    # A/B (DEPOT_BIN_REFERENCE) : la version de référence, sous le même bloc livré (l'hôte du
    # répondeur nul), entrelacée aussi (up_ref).
    local ref=()
    [ "${REFERENCE:-0}" = 0 ] || ref=(up_ref "$JOURNAL_NUL" "$URL_NUL/upload.php")
    entrelacees "$ETAT/travail/depot-tournant.lua" \
        up_prog "$JOURNAL_PROG" "$URL/upload.php" \
        "${ref[@]}" \
        up_php "$JOURNAL_PHP" "$URL_PHP/upload.php" \
        up_gen "$JOURNAL_GEN" "$URL_GEN/upload.php"
    R[up.gen.apres]="$(pids_exe "$BIN_GEN" | wc -l)"
    # Au moins une fiche des noms tournants, pas une fiche précise : dans la conception PHP, un
    # balayage concurrent peut effacer un fichier déposé avant que sa fiche soit écrite (sa course,
    # décrite dans bench/php/config.php.modele), et le dernier dépôt d'un nom peut s'y perdre.
    compgen -G "$ETAT/php/files/.meta/banc-*.bin.json" >/dev/null \
        || echec "PHP : le dépôt tournant n'a écrit aucune fiche banc-*.bin.json"
    info "  req/s : bloc livré ${R[up_prog.rps]}, PHP ${R[up_php.rps]}, hôte générique ${R[up_gen.rps]} ; p99 wrk (ms) : ${R[up_prog.p99]}, ${R[up_php.p99]}, ${R[up_gen.p99]}"
}
# Les téléchargements contre PHP : GET 10 Kio (wrk), puis 100 Mio (curl, une connexion).
telechargements_contre_php() {
    R[php.fichiers]="$(find "$ETAT/php/files" -mindepth 1 -maxdepth 1 -type f | wc -l)"
    info "GET 10 Kio contre PHP (wrk, 8 connexions ; ${R[php.fichiers]} fichiers dans son dépôt)"
    entrelacees "" dphp_prog "$JOURNAL_PROG" "$(dl petit.bin)" dphp_php "$JOURNAL_PHP" "$(dl petit.bin "$URL_PHP")"
    info "  req/s : programme ${R[dphp_prog.rps]}, PHP ${R[dphp_php.rps]}"
    info "Téléchargement de $CENT_MIO Mio contre PHP (curl, $REPETITIONS fois chacun, entrelacés)"
    cmp -s <(curl -s "$(dl cent.bin)") "$ETAT/travail/cent.bin" || echec "cent.bin téléchargé différent"
    cmp -s <(curl -s "$(dl cent.bin "$URL_PHP")") "$ETAT/travail/cent.bin" || echec "PHP : cent.bin téléchargé différent"
    local i t code prog=() php=()
    for i in $(seq 1 "$REPETITIONS"); do
        read -r t code < <(telecharger "$(dl cent.bin)")
        [ "$code" = 200 ] || echec "téléchargement de cent.bin : HTTP $code"
        prog+=("$t")
        read -r t code < <(telecharger "$(dl cent.bin "$URL_PHP")")
        [ "$code" = 200 ] || echec "PHP : téléchargement de cent.bin : HTTP $code"
        php+=("$t")
    done
    R[cent_prog.t]="$(mediane "${prog[@]}")"; R[cent_php.t]="$(mediane "${php[@]}")"
    info "  $CENT_MIO Mio : programme ${R[cent_prog.t]} s, PHP ${R[cent_php.t]} s"
}
# Le petit téléchargement contre le répondeur minimal (même bloc commun), entrelacés.
contre_minimal() {
    info "GET 10 Kio contre le répondeur FastCGI minimal (même Apache, même bloc Fcgid ; $URL_MINI)"
    entrelacees "" mini_prog "$JOURNAL_PROG" "$(dl petit.bin)" mini_mini "$JOURNAL_MINI" "$URL_MINI/download.php?fichier=petit.bin" \
        mini_spec "$JOURNAL_MINI_SPEC" "$URL_MINI_SPEC/download.php?fichier=petit.bin"
    info "  req/s : programme ${R[mini_prog.rps]}, répondeur minimal ${R[mini_mini.rps]}, minimal + spécification ${R[mini_spec.rps]}"
}


tableau_depot() {
    entete_wrk "Dépôt 10 Kio, 8 conn., 32 noms par fil wrk" "× PHP"
    echo "  (même Apache, entrelacés ; PHP : php-fpm, pm = static, 16 processus, par mod_proxy_fcgi ; hôte"
    echo "   générique : mod_fcgid sans réglage, FcgidMaxProcessesPerClass 16, groupe rempli : ${R[groupe.gen]} processus ;"
    echo "   ms ; CPU par requête : répondeur / Apache / wrk)"
    ligne_wrk "depot-fichiers, bloc livré" up_prog up_php
    ligne_wrk "depot-fichiers, hôte mod_fcgid générique" up_gen up_php
    ligne_wrk "conception PHP (php-fpm)" up_php
    if [ "${REFERENCE:-0}" = 1 ]; then
        ligne_wrk "référence (DEPOT_BIN_REFERENCE), bloc livré" up_ref up_php
        printf '  %-40s %9s %7s\n' "depot-fichiers / référence" "" "$(f2 "$(calc "${R[up_prog.rps]} / ${R[up_ref.rps]}")")"
    fi
}
tableau_telechargements_php() {
    entete_wrk "GET 10 Kio, 8 conn., contre PHP" "× PHP"
    echo "  (PHP balaie tout son dépôt à chaque requête : ${R[php.fichiers]} fichiers à ce moment)"
    ligne_wrk "depot-fichiers, bloc livré" dphp_prog dphp_php
    ligne_wrk "conception PHP (php-fpm)" dphp_php
    printf '%-42s %9s %7s %15s\n' "Téléchargement $CENT_MIO Mio, curl (médiane)" "durée (s)" "× PHP" "débit (Mio/s)"
    printf '  %-40s %9s %7s %15s\n' "depot-fichiers, bloc livré" "$(f3 "${R[cent_prog.t]}")" \
        "$(f2 "$(calc "${R[cent_php.t]} / ${R[cent_prog.t]}")")" "$(debit "$CENT_MIO" "${R[cent_prog.t]}")"
    printf '  %-40s %9s %7s %15s\n' "conception PHP (php-fpm)" "$(f3 "${R[cent_php.t]}")" "—" "$(debit "$CENT_MIO" "${R[cent_php.t]}")"
}
tableau_minimal() {
    entete_wrk "GET 10 Kio, 8 conn., contre le minimal" "rapport"
    echo "  (répondeur minimal : une lecture, une réponse écrite d'un seul write ; même bloc Fcgid ; groupe"
    echo "   rempli : ${R[groupe.mini]} processus ; minimal + spécification : les mêmes, plus les appels système"
    echo "   et les en-têtes d'un téléchargement selon la spécification, bench/appels-spec.h ; ${R[groupe.minispec]} processus)"
    ligne_wrk "depot-fichiers" mini_prog mini_mini
    ligne_wrk "répondeur FastCGI minimal" mini_mini
    ligne_wrk "minimal + spécification" mini_spec mini_mini
    printf '  %-40s %9s %7s\n' "depot-fichiers / minimal + spécification" "" "$(f2 "$(calc "${R[mini_prog.rps]} / ${R[mini_spec.rps]}")")"
}
cibles_depot() { # les lignes « Cibles » de ces mesures
    local k lib r v
    for k in prog gen; do
        lib="bloc livré"; [ "$k" = gen ] && lib="hôte mod_fcgid générique"
        r="$(calc "${R[up_$k.rps]} / ${R[up_php.rps]}")"
        v="$(ok "$r" 1 '>=')"
        [ "$(ok "${R[up_$k.p99]}" 25 '<')" = atteinte ] || v="MANQUÉE"
        printf '  %s\n' "dépôt 10 Kio, 8 conn., $lib :"
        printf '  %-52s %16s   %s\n' "  ≥ 1 × PHP et p99 < 25 ms (wrk)" "$(f2 "$r") ; $(f2 "${R[up_$k.p99]}") ms" "$v"
        printf '  %-52s %16s   %s\n' "  … p99 vu par Apache (%D) < 25 ms" "$(f2 "${R[up_$k.d99]}") ms" "$(ok "${R[up_$k.d99]}" 25 '<')"
    done
    r="$(calc "${R[mini_prog.rps]} / ${R[mini_mini.rps]}")"
    printf '  %-52s %16s   %s\n' "GET 10 Kio ≥ 0,75 × répondeur minimal" "$(f2 "$r")" "$(ok "$r" 0.75 '>=')"
    printf '  %-52s %16s\n' "  … où le minimal + spécification est à" "$(f2 "$(calc "${R[mini_spec.rps]} / ${R[mini_mini.rps]}")")"
}
