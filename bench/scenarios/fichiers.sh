# depot-fichiers — banc d'essai, scénario : le programme contre les mêmes fichiers en statique (le
# plafond de la machine), les transferts, MCP, le démarrage à froid, X-Sendfile et le balayage (à
# sourcer ; lib/ d'abord).
#
#   mesures_nombre_de_fichiers   GET 10 Kio avec 0, 1 000 et 10 000 autres fichiers (n0, n1000, n10000)
#   mesures_transferts           dépôts de 1 Mio, GROS_MIO Mio, le même avec reprise ; téléchargements
#   mesures_mcp                  /mcp.php tools/list et tools/call (liste, appel)
#   demarrage_a_froid            FROIDS fois : Apache démarré, première requête (froid, chaud)
#   mesures_xsendfile            x_sendfile = true + mod_xsendfile (xdlg, xn10000)
#   mesure_balayage              examples/bench_sweep.rs (SWEEP_SORTIE)
# et tableau_fichiers, cibles_fichiers (dont tableau_transferts, cibles_transferts : --seulement-transferts).

# 5.1 Petit téléchargement, 0 / 1 000 / 10 000 autres fichiers.
mesurer_petit() { # CLÉ
    local cle="$1" i rps=() p50=() p99=() srps=() sp50=() sp99=() err=0 tot=0 serr=0 stot=0 a b c d e
    wrk_echauffement "$(dl petit.bin)"
    wrk_echauffement "$URL/statique/petit.bin"
    for i in $(seq 1 "$REPETITIONS"); do
        read -r a b c d e < <(wrk_mesure "$(dl petit.bin)" "" "$cle programme")
        rps+=("$a"); p50+=("$b"); p99+=("$c"); err=$((err + d)); tot=$((tot + e))
        read -r a b c d e < <(wrk_mesure "$URL/statique/petit.bin" "" "$cle statique")
        srps+=("$a"); sp50+=("$b"); sp99+=("$c"); serr=$((serr + d)); stot=$((stot + e))
    done
    erreurs_wrk "GET 10 Kio ($cle)" "$err" "$tot"; erreurs_wrk "statique ($cle)" "$serr" "$stot"
    R[$cle.err]="$err"; R[$cle.serr]="$serr"
    R[$cle.rps]="$(mediane "${rps[@]}")"; R[$cle.p50]="$(mediane "${p50[@]}")"; R[$cle.p99]="$(mediane "${p99[@]}")"
    R[$cle.srps]="$(mediane "${srps[@]}")"; R[$cle.sp50]="$(mediane "${sp50[@]}")"; R[$cle.sp99]="$(mediane "${sp99[@]}")"
    info "  $cle : ${R[$cle.rps]} req/s (statique ${R[$cle.srps]})"
}

mesures_nombre_de_fichiers() {
    info "GET /download.php 10 Kio (wrk, 8 connexions)"
    # Les fichiers déjà là (gros fichiers, dépôts des mesures précédentes), petit.bin exclu.
    R[n0.autres]=$(($(find "$ETAT/files" -mindepth 1 -maxdepth 1 -type f | wc -l) - 1))
    mesurer_petit n0
    "${EN_TANT_QUE[@]}" "$PYTHON_SYSTEME" "$RACINE/bench/peupler.py" "$ETAT/files" 1000
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$(dl autre-00999.bin)")" = 200 ] \
        || echec "les fichiers de remplissage ne sont pas servis (format du dépôt changé ? bench/peupler.py)"
    mesurer_petit n1000
    "${EN_TANT_QUE[@]}" "$PYTHON_SYSTEME" "$RACINE/bench/peupler.py" "$ETAT/files" 10000
    mesurer_petit n10000
}

# Dépôts et téléchargements, avec le pic de mémoire résidente.
mesures_transferts() {
    info "Transferts (curl ; pic de mémoire VmHWM)"
    raz_pic_memoire; R[repos.mem]="$(pic_memoire_kio)"
    transfert up1 depot "$ETAT/travail/moyen.bin"
    EMPREINTE_GROS="$(python3 -c 'import base64, hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for b in iter(lambda: f.read(1 << 20), b""):
        h.update(b)
print(base64.b64encode(h.digest()).decode())' "$ETAT/travail/gros.bin")"
    # Le dépôt d'un coup et les deux dépôts avec reprise (un curl par partie comme la fonction des
    # consignes ; une seule connexion, bench/reprise.py), entrelacés.
    transferts_entrelaces "$ETAT/travail/gros.bin" upg:depot upr:reprise upk:reprise-connexion
    cmp -s <(curl -s "$(dl reprise-gros.bin)") "$ETAT/travail/gros.bin" || echec "reprise-gros.bin téléchargé différent"
    transfert dl1 get moyen.bin "$URL/statique/moyen.bin"
    transfert dlg get gros.bin "$URL/statique/gros.bin"
    cmp -s <(curl -s "$(dl gros.bin)") "$ETAT/travail/gros.bin" || echec "gros.bin téléchargé différent"
    # Fichiers comptés (telechargements_max) contre libres : dépôts et GET de 10 Kio entrelacés sur
    # une connexion gardée (bench/comptes.py), médianes par requête.
    info "Fichiers comptés contre libres (bench/comptes.py)"
    local tours=5
    [ "$RAPIDE" = 1 ] && tours=1
    read -r R[cpl.up] R[cpc.up] R[cpl.get] R[cpc.get] \
        < <(python3 "$RACINE/bench/comptes.py" "$URL" "$TOKEN" "$ETAT/travail/petit.bin" "$tours")
    [ -n "${R[cpc.get]}" ] || echec "bench/comptes.py n'a rien mesuré"
}

# MCP (chaque requête : introspection HTTP du token au serveur local).
mesurer_mcp() { # CLÉ LUA
    local i rps=() p50=() a b c d e err=0 tot=0
    wrk_echauffement "$URL/mcp.php" "$2"
    for i in $(seq 1 "$REPETITIONS"); do
        read -r a b c d e < <(wrk_mesure "$URL/mcp.php" "$2" "MCP $1")
        rps+=("$a"); p50+=("$b"); err=$((err + d)); tot=$((tot + e))
    done
    erreurs_wrk "MCP $1" "$err" "$tot"
    R[$1.err]="$err"
    R[$1.rps]="$(mediane "${rps[@]}")"; R[$1.p50]="$(mediane "${p50[@]}")"
    info "  $1 : ${R[$1.rps]} req/s"
}
mesures_mcp() {
    verifier_mcp
    info "/mcp.php (wrk, 8 connexions, introspection locale)"
    mesurer_mcp liste "$ETAT/travail/liste.lua"
    mesurer_mcp appel "$ETAT/travail/appel.lua"
}

# Démarrage à froid : arrêt d'Apache, démarrage, première requête (lancement du processus compris).
demarrage_a_froid() {
    local froids=() chauds=() i t code
    info "Démarrage à froid ($FROIDS fois)"
    for i in $(seq 1 "$FROIDS"); do
        arreter_apache
        demarrer_apache
        read -r t code < <(telecharger "$(dl petit.bin)")
        [ "$code" = 200 ] || echec "démarrage à froid : HTTP $code"
        froids+=("$t")
        read -r t code < <(telecharger "$(dl petit.bin)")
        chauds+=("$t")
    done
    R[froid]="$(mediane "${froids[@]}")"; R[chaud]="$(mediane "${chauds[@]}")"
    arreter_apache
}

# Option X-Sendfile (x_sendfile = true + mod_xsendfile) : Apache envoie lui-même le fichier.
mesures_xsendfile() {
    info "Option X-Sendfile (mod_xsendfile)"
    printf 'x_sendfile = true\n' >>"$ETAT/config.toml"
    APACHE_CONF="$ETAT/apache-xsendfile.conf"
    demarrer_apache
    [ -n "$(curl -s -D - -o /dev/null "$(dl petit.bin)" | grep -i '^content-length: 10240')" ] \
        || echec "X-Sendfile : le petit fichier n'est pas servi entier"
    transfert xdlg get gros.bin "$URL/statique/gros.bin"
    cmp -s <(curl -s "$(dl gros.bin)") "$ETAT/travail/gros.bin" || echec "gros.bin (X-Sendfile) différent"
    mesurer_petit xn10000
    arreter_apache
}

# Balayage (examples/bench_sweep.rs), sur $TMPDIR (/dev/shm en passe rapide).
mesure_balayage() {
    SWEEP_SORTIE=""
    if [ "$BALAYAGE" = 1 ] && [ -n "$CARGO" ]; then
        DOSSIER_BALAYAGE="${TMPDIR:-/tmp}"
        if [ "$RAPIDE" = 1 ] && [ -d /dev/shm ]; then DOSSIER_BALAYAGE=/dev/shm; fi
        info "Balayage : cargo run --release --example bench_sweep $DOSSIER_BALAYAGE"
        SWEEP_SORTIE="$(cd "$RACINE" && "$CARGO" run -q --release --example bench_sweep "$DOSSIER_BALAYAGE")"
    fi
}

# Le tableau des transferts (mesures_transferts, et X-Sendfile quand il a été mesuré).
tableau_transferts() {
    local GROS_LIB="$GROS_MIO Mio" dlg_debit dlg_sdebit
    dlg_debit="$(debit "$GROS_MIO" "${R[dlg.t]}")"; dlg_sdebit="$(debit "$GROS_MIO" "${R[dlg.st]}")"
    printf '%-44s %16s %16s %8s %14s\n' "Transferts (curl, 1 connexion)" "durée" "débit" "statique" "pic mémoire"
    printf '%-44s %14s s %10s Mio/s %8s %10s Mio\n' "  dépôt 1 Mio" "$(f2 "${R[up1.t]}")" "$(debit 1 "${R[up1.t]}")" "—" "$(mio "${R[up1.mem]}")"
    printf '%-44s %14s s %10s Mio/s %8s %10s Mio\n' "  dépôt $GROS_LIB" "$(f2 "${R[upg.t]}")" "$(debit "$GROS_MIO" "${R[upg.t]}")" "—" "$(mio "${R[upg.mem]}")"
    printf '%-44s %14s s %10s Mio/s %8s %10s Mio\n' "  dépôt $GROS_LIB avec reprise, parties de 8 Mio" "$(f2 "${R[upr.t]}")" \
        "$(debit "$GROS_MIO" "${R[upr.t]}")" "—" "$(mio "${R[upr.mem]}")"
    printf '%-44s %14s s\n' "      dont la dernière partie (empreinte, publication)" "$(f2 "${R[upr.dern]}")"
    printf '%-44s %14s s %10s Mio/s %8s %10s Mio\n' "  … une connexion pour toutes les parties" "$(f2 "${R[upk.t]}")" \
        "$(debit "$GROS_MIO" "${R[upk.t]}")" "—" "$(mio "${R[upk.mem]}")"
    printf '%-44s %14s s %10s Mio/s %8s %10s Mio\n' "  téléchargement 1 Mio" "$(f2 "${R[dl1.t]}")" "$(debit 1 "${R[dl1.t]}")" \
        "$(debit 1 "${R[dl1.st]}")" "$(mio "${R[dl1.mem]}")"
    printf '%-44s %14s s %10s Mio/s %8s %10s Mio\n' "  téléchargement $GROS_LIB" "$(f2 "${R[dlg.t]}")" "$dlg_debit" \
        "$dlg_sdebit" "$(mio "${R[dlg.mem]}")"
    [ -z "${R[xdlg.t]:-}" ] || printf '%-44s %14s s %10s Mio/s %8s %10s Mio\n' "  téléchargement $GROS_LIB, option X-Sendfile" "$(f2 "${R[xdlg.t]}")" \
        "$(debit "$GROS_MIO" "${R[xdlg.t]}")" "$(debit "$GROS_MIO" "${R[xdlg.st]}")" "$(mio "${R[xdlg.mem]}")"
    printf '%-44s %45s %10s Mio\n' "  (processus au repos)" "" "$(mio "${R[repos.mem]}")"
    echo
    printf '%-44s %16s %16s %8s\n' "10 Kio, une connexion gardée (médiane, ms)" "libre" "compté" "rapport"
    printf '%-44s %16s %16s %8s\n' "  dépôt (telechargements_max=100)" "$(f2 "${R[cpl.up]}")" "$(f2 "${R[cpc.up]}")" \
        "$(f2 "$(calc "${R[cpc.up]} / ${R[cpl.up]}")")"
    printf '%-44s %16s %16s %8s\n' "  GET (une place prise puis dépensée)" "$(f2 "${R[cpl.get]}")" "$(f2 "${R[cpc.get]}")" \
        "$(f2 "$(calc "${R[cpc.get]} / ${R[cpl.get]}")")"
}

# Les tableaux de ces mesures dans rapport.txt.
tableau_fichiers() {
    local k lib
    printf '%-44s %16s %16s %8s\n' "GET /download.php, 10 Kio" "depot-fichiers" "statique" "rapport"
    for k in n0 n1000 n10000; do
        lib="${k#n}"
        printf '%-44s %16s %16s %8s\n' "  $lib autres fichiers : req/s" "$(f1 "${R[$k.rps]}")" "$(f1 "${R[$k.srps]}")" \
            "$(f2 "$(calc "${R[$k.rps]} / ${R[$k.srps]}")")"
        printf '%-44s %16s %16s\n' "      latence p50 / p99 (ms)" "$(f2 "${R[$k.p50]}") / $(f2 "${R[$k.p99]}")" \
            "$(f2 "${R[$k.sp50]}") / $(f2 "${R[$k.sp99]}")"
        [ "${R[$k.err]}${R[$k.serr]}" = 00 ] || printf '%-44s %16s %16s\n' "      réponses en erreur" "${R[$k.err]}" "${R[$k.serr]}"
    done
    echo "  (« 0 » : sans compter ${R[n0.autres]} fichiers déposés par les mesures précédentes)"
    printf '%-44s %16s %16s %8s\n' "  10000 autres, option X-Sendfile : req/s" "$(f1 "${R[xn10000.rps]}")" \
        "$(f1 "${R[xn10000.srps]}")" "$(f2 "$(calc "${R[xn10000.rps]} / ${R[xn10000.srps]}")")"
    echo
    tableau_transferts
    echo
    printf '%-44s %16s %16s\n' "/mcp.php (introspection HTTP locale)" "req/s" "p50 (ms)"
    printf '%-44s %16s %16s\n' "  tools/list" "$(f1 "${R[liste.rps]}")" "$(f2 "${R[liste.p50]}")"
    printf '%-44s %16s %16s\n' "  tools/call recuperer_fichier (lien)" "$(f1 "${R[appel.rps]}")" "$(f2 "${R[appel.p50]}")"
    echo
    printf '%-44s %16s %16s\n' "Démarrage à froid (1re requête, lancement compris)" "$(f1 "$(calc "${R[froid]} * 1000")") ms" \
        "(2e : $(f1 "$(calc "${R[chaud]} * 1000")") ms)"
    if [ -n "$SWEEP_SORTIE" ]; then
        echo
        echo "Balayage (examples/bench_sweep, dossier ${DOSSIER_BALAYAGE}) :"
        printf '%s\n' "$SWEEP_SORTIE" | sed 1d
    fi
}

# Les lignes « Cibles » des transferts.
cibles_transferts() {
    local GROS_LIB="$GROS_MIO Mio" rdlg rupr rupk rxdlg memmax=0 k
    rdlg="$(calc "${R[dlg.st]} / ${R[dlg.t]}")"
    rupr="$(calc "${R[upg.t]} / ${R[upr.t]}")"
    rupk="$(calc "${R[upg.t]} / ${R[upk.t]}")"
    for k in up1 upg upr upk dl1 dlg xdlg; do
        [ -n "${R[$k.memmax]:-}" ] && [ "${R[$k.memmax]}" -gt "$memmax" ] && memmax="${R[$k.memmax]}"
    done
    printf '  %-58s %10s   %s\n' "téléchargement $GROS_LIB ≥ 0,8 × statique (débit)" "$(f2 "$rdlg")" "$(ok "$rdlg" 0.8 '>=')"
    if [ -n "${R[xdlg.t]:-}" ]; then
        rxdlg="$(calc "${R[xdlg.st]} / ${R[xdlg.t]}")"
        printf '  %-58s %10s   %s\n' "  … avec l'option X-Sendfile" "$(f2 "$rxdlg")" "$(ok "$rxdlg" 0.8 '>=')"
    fi
    printf '  %-58s %10s   %s\n' "dépôt $GROS_LIB avec reprise ≥ 0,8 × d'un coup (débit)" "$(f2 "$rupk")" "$(ok "$rupk" 0.8 '>=')"
    printf '  %-58s %10s\n' "  (un curl par partie, la fonction des consignes : débit)" "$(f2 "$rupr")"
    printf '  %-58s %6s Mio   %s\n' "pic de mémoire résidente ≤ 16 Mio (tout transfert, max)" "$(mio "$memmax")" "$(ok "$memmax" 16384 '<=')"
    local rcu rcg
    rcu="$(calc "${R[cpc.up]} / ${R[cpl.up]}")"; rcg="$(calc "${R[cpc.get]} / ${R[cpl.get]}")"
    printf '  %-58s %10s   %s\n' "dépôt d'un fichier compté ≤ 1,1 × libre (durée)" "$(f2 "$rcu")" "$(ok "$rcu" 1.1 '<=')"
    printf '  %-58s %10s   %s\n' "GET d'un fichier compté ≤ 1,1 × libre (durée)" "$(f2 "$rcg")" "$(ok "$rcg" 1.1 '<=')"
}

# Les lignes « Cibles » de ces mesures.
cibles_fichiers() {
    local r0 r10k froid_ms lecture
    r0="$(calc "${R[n0.rps]} / ${R[n0.srps]}")"
    r10k="$(calc "${R[n10000.rps]} / ${R[n0.rps]}")"
    froid_ms="$(calc "${R[froid]} * 1000")"
    printf '  %-58s %10s   %s\n' "GET 10 Kio à 0 fichier ≥ 0,5 × statique" "$(f2 "$r0")" "$(ok "$r0" 0.5 '>=')"
    printf '  %-58s %10s   %s\n' "GET 10 Kio à 10 000 fichiers ≥ 0,8 × à 0 fichier" "$(f2 "$r10k")" "$(ok "$r10k" 0.8 '>=')"
    cibles_transferts
    printf '  %-58s %7s ms   %s\n' "démarrage à froid ≤ 10 ms" "$(f1 "$froid_ms")" "$(ok "$froid_ms" 10 '<=')"
    if [ -n "$SWEEP_SORTIE" ]; then
        lecture="$(printf '%s\n' "$SWEEP_SORTIE" | awk '/ 10000 fichiers/ { for (i=1;i<=NF;i++) if ($i=="complète") { print $(i+1); exit } }')"
        [ -n "$lecture" ] && printf '  %-58s %7s ms   %s\n' "balayage complet à 10 000 fichiers < 5 ms" "$lecture" "$(ok "$lecture" 5 '<')"
    fi
}
