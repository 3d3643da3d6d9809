# depot-fichiers — banc d'essai : l'Apache privé et ses hôtes (à sourcer).
#
# ecrire_conf_apache écrit $ETAT/apache.conf : la configuration de production (bloc commun
# d'apache/depot-fichiers.conf, réglages de niveau serveur d'apache/depot-fichiers-fcgid.conf,
# gabarits apache/local.*.template remplis comme apache/demo) sur 127.0.0.1:$PORT, et, dans le
# MÊME Apache, des hôtes côte à côte :
#   - le répondeur nul ($PORT_NUL), le nul + appels de la spécification ($PORT_SPEC), le répondeur
#     minimal ($PORT_MINI) et le minimal + appels et en-têtes de la spécification ($PORT_MINI_SPEC) :
#     le MÊME bloc commun, seul FcgidWrapper change ;
#   - la route mod_proxy_fcgi ($PORT_PROXY) vers `depot-fichiers --listen tcp:…:$PORT_LISTEN` ;
#   - l'hôte mod_fcgid GÉNÉRIQUE ($PORT_GEN) : le même programme sous la configuration d'une
#     application FastCGI quelconque ;
#   - la conception PHP ($PORT_PHP), par mod_proxy_fcgi vers le php-fpm privé (lib/php.sh) ;
# et $ETAT/apache-xsendfile.conf, la variante X-Sendfile (le seul hôte du programme).
# DEPOT_BENCH_APACHE_EXTRA : des directives ajoutées au bloc commun (essais de réglages mod_fcgid).
#
# Puis : demarrer_apache / arreter_apache (APACHE_CONF choisit la configuration), les journaux
# d'accès (%D : durée de chaque requête vue par Apache), le remplissage des groupes de processus
# mod_fcgid et la rafale à froid.

MODULES=/usr/lib/apache2/modules

remplir() { # remplace les marqueurs @…@ (valeurs littérales), comme apache/demo
    local t
    t="$(cat "$1")"
    shopt -u patsub_replacement 2>/dev/null || true
    t="${t//@ETAT@/"$ETAT"}"
    t="${t//@PORT@/"$PORT"}"
    t="${t//@MODULES@/"$MODULES"}"
    t="${t//@UTILISATEUR@/"$UTILISATEUR"}"
    t="${t//@GROUPE@/"$GROUPE"}"
    t="${t//@BIN@/"$BIN"}"
    t="${t//@CONFIG@/"$ETAT/config.toml"}"
    t="${t//@TOKEN@/"$TOKEN"}"
    t="${t//@URL_BASE@/"$URL"}"
    t="${t//@FCGI_ADRESSE@/"fcgi://127.0.0.1:$PORT_LISTEN"}"
    t="${t//@FCGID_SERVEUR@/"Include \"$RACINE/apache/depot-fichiers-fcgid.conf\""}"
    t="${t//@BLOC@/"Include \"$ETAT/bloc.conf\""}"
    printf '%s\n' "$t"
}

ecrire_conf_apache() {
    sed -n '/# >>> bloc commun/,/# <<< bloc commun/p' "$RACINE/apache/depot-fichiers.conf" >"$ETAT/bloc.conf"
    [ -s "$ETAT/bloc.conf" ] || echec "bloc commun introuvable dans apache/depot-fichiers.conf"
    if [ -n "${DEPOT_BENCH_APACHE_EXTRA:-}" ]; then # essais de réglages mod_fcgid (voir docs/PERFORMANCE.md)
        printf '%s\n' "$DEPOT_BENCH_APACHE_EXTRA" >>"$ETAT/bloc.conf"
    fi
    remplir "$RACINE/apache/local.conf.template" >"$ETAT/apache.conf"
    # Variante X-Sendfile (mesurée à la fin) : mod_xsendfile chargé et activé, x_sendfile = true.
    { cat "$ETAT/bloc.conf"; printf 'XSendFile On\nXSendFilePath "%s"\n' "$ETAT/files"; } >"$ETAT/bloc-xsendfile.conf"
    { sed -e "s|$ETAT/bloc.conf|$ETAT/bloc-xsendfile.conf|" "$ETAT/apache.conf"
      printf 'LoadModule xsendfile_module %s/mod_xsendfile.so\n' "$MODULES"; } >"$ETAT/apache-xsendfile.conf"
    # D'autres hôtes virtuels dans le même Apache (pas dans la variante X-Sendfile) :
    # - le répondeur nul, avec le MÊME bloc commun ; seul le programme de FcgidWrapper change ; de
    #   même le répondeur nul avec les appels de la spécification, et le répondeur minimal ;
    # - la route mod_proxy_fcgi (bloc commun de apache/depot-fichiers-proxy-fcgi.conf) vers le
    #   programme lancé avec --listen tcp:127.0.0.1:$PORT_LISTEN (démarré seulement pour sa mesure) ;
    # - la conception PHP et l'hôte mod_fcgid générique (plus bas).
    sed -e "s|\${DEPOT_FICHIERS_BIN}|$NUL|" "$ETAT/bloc.conf" >"$ETAT/bloc-nul.conf"
    grep -q "FcgidWrapper \"$NUL " "$ETAT/bloc-nul.conf" || echec "FcgidWrapper introuvable dans le bloc commun"
    sed -e "s|\${DEPOT_FICHIERS_BIN}|$SPEC|" "$ETAT/bloc.conf" >"$ETAT/bloc-spec.conf"
    sed -e "s|\${DEPOT_FICHIERS_BIN}|$MINI|" "$ETAT/bloc.conf" >"$ETAT/bloc-minimal.conf"
    sed -e "s|\${DEPOT_FICHIERS_BIN}|$MINI_SPEC|" "$ETAT/bloc.conf" >"$ETAT/bloc-minimal-spec.conf"
    sed -n '/# >>> bloc commun/,/# <<< bloc commun/p' "$RACINE/apache/depot-fichiers-proxy-fcgi.conf" >"$ETAT/bloc-proxy.conf"
    cat >>"$ETAT/apache.conf" <<EOF

Listen 127.0.0.1:$PORT_NUL
<VirtualHost 127.0.0.1:$PORT_NUL>
    ServerName 127.0.0.1
    ErrorLog  "$ETAT/serveur/log/apache-error.log"
    CustomLog "$ETAT/serveur/log/nul-access.log" depot_fichiers
    Include "$ETAT/bloc-nul.conf"
</VirtualHost>
Listen 127.0.0.1:$PORT_SPEC
<VirtualHost 127.0.0.1:$PORT_SPEC>
    ServerName 127.0.0.1
    ErrorLog  "$ETAT/serveur/log/apache-error.log"
    CustomLog "$ETAT/serveur/log/spec-access.log" depot_fichiers
    Include "$ETAT/bloc-spec.conf"
</VirtualHost>
Listen 127.0.0.1:$PORT_PROXY
<VirtualHost 127.0.0.1:$PORT_PROXY>
    ServerName 127.0.0.1
    ErrorLog  "$ETAT/serveur/log/apache-error.log"
    CustomLog "$ETAT/serveur/log/proxy-access.log" depot_fichiers
    Include "$ETAT/bloc-proxy.conf"
</VirtualHost>
Listen 127.0.0.1:$PORT_MINI
<VirtualHost 127.0.0.1:$PORT_MINI>
    ServerName 127.0.0.1
    ErrorLog  "$ETAT/serveur/log/apache-error.log"
    CustomLog "$ETAT/serveur/log/minimal-access.log" depot_fichiers
    Include "$ETAT/bloc-minimal.conf"
</VirtualHost>
Listen 127.0.0.1:$PORT_MINI_SPEC
<VirtualHost 127.0.0.1:$PORT_MINI_SPEC>
    ServerName 127.0.0.1
    ErrorLog  "$ETAT/serveur/log/apache-error.log"
    CustomLog "$ETAT/serveur/log/minimal-spec-access.log" depot_fichiers
    Include "$ETAT/bloc-minimal-spec.conf"
</VirtualHost>
EOF
    # L'hôte mod_fcgid GÉNÉRIQUE : le même programme (une copie du binaire, pour compter ses processus
    # à part), le même config.toml, donc le même dépôt que l'hôte du bloc livré (jamais mesurés en même
    # temps), sous la configuration mod_fcgid la plus simple, celle d'une application FastCGI
    # quelconque : AddHandler fcgid-script .php, FcgidWrapper … virtual (les .php n'existent pas),
    # FcgidMaxProcessesPerClass 16, et RIEN d'autre : pas de FcgidAccessChecker ;
    # FcgidMinProcessesPerClass, FcgidMaxRequestsPerProcess, FcgidMaxRequestLen (128 Kio : assez pour
    # le dépôt de 10 Kio), FcgidIOTimeout, FcgidBusyTimeout, FcgidIdleTimeout et LimitRequestBody à
    # leur valeur par défaut. Les réglages de niveau serveur (score de lancement…) ne peuvent pas différer d'un hôte à
    # l'autre : ce sont ceux de apache/depot-fichiers-fcgid.conf, pour tous. S'y ajoute seulement ce
    # qu'exige toute application FastCGI sous Apache : +ExecCGI, et CGIPassAuth On sans lequel
    # l'en-tête Authorization n'arrive pas. Son groupe de processus est rempli avant les mesures
    # comme les autres (requêtes lentes en parallèle) : sans cela, chaque processus ajouté coûte une
    # requête bloquée 1 s (mod_fcgid 2.3.9), ce qui mesurerait la croissance du groupe et non le
    # programme ; php-fpm, lui, démarre ses 16 processus d'emblée.
    cat >>"$ETAT/apache.conf" <<EOF
Listen 127.0.0.1:$PORT_GEN
<VirtualHost 127.0.0.1:$PORT_GEN>
    ServerName 127.0.0.1
    ErrorLog  "$ETAT/serveur/log/apache-error.log"
    CustomLog "$ETAT/serveur/log/generique-access.log" depot_fichiers
    DocumentRoot "$ETAT/www-generique"
    FcgidMaxProcessesPerClass 16
    <Directory "$ETAT/www-generique">
        Options +ExecCGI
        AllowOverride None
        Require all granted
        CGIPassAuth On
        AddHandler fcgid-script .php
        FcgidWrapper "$BIN_GEN --config $ETAT/config.toml" .php virtual
    </Directory>
</VirtualHost>
EOF
    # La conception PHP du cahier des charges (bench/php/), servie par un php-fpm PRIVÉ par
    # mod_proxy_fcgi sur une socket Unix, avec les réglages du bloc mod_proxy_fcgi livré qui la
    # concernent : LimitRequestBody 1 pour tout l'hôte et 1 Gio pour upload.php (comme le bloc
    # mod_fcgid), ProxyTimeout 300, CGIPassAuth On (sinon pas d'Authorization), nosniff, et
    # ap_trust_cgilike_cl (Apache ≥ 2.4.59 retirerait sinon le Content-Length que download.php envoie,
    # comme le veut le cahier des charges §6.2). config.php n'est jamais servi.
    PHP_SOCK="$ETAT/serveur/run/php-fpm.sock"
    [ -z "$PHP_FPM" ] || cat >>"$ETAT/apache.conf" <<EOF
Listen 127.0.0.1:$PORT_PHP
<VirtualHost 127.0.0.1:$PORT_PHP>
    ServerName 127.0.0.1
    ErrorLog  "$ETAT/serveur/log/apache-error.log"
    CustomLog "$ETAT/serveur/log/php-access.log" depot_fichiers
    DocumentRoot "$ETAT/php/www"
    DirectoryIndex disabled
    Header onsuccess unset X-Content-Type-Options
    Header always set X-Content-Type-Options "nosniff"
    LimitRequestBody 1
    ProxyTimeout 300
    SetEnv ap_trust_cgilike_cl 1
    <Directory "$ETAT/php/www">
        Options -Indexes -FollowSymLinks
        AllowOverride None
        Require all granted
        CGIPassAuth On
        <FilesMatch "^(upload|download)\.php\$">
            SetHandler "proxy:unix:$PHP_SOCK|fcgi://localhost"
        </FilesMatch>
        <Files "upload.php">
            LimitRequestBody 1073741824
        </Files>
        <Files "config.php">
            Require all denied
        </Files>
    </Directory>
</VirtualHost>
EOF
    APACHE_CONF="$ETAT/apache.conf"
    mkdir -p "$ETAT/www-generique"
    journaux_apache
}

# Les journaux d'accès de chaque hôte, et la taille du groupe de processus du bloc livré.
journaux_apache() {
    JOURNAL_PROG="$ETAT/serveur/log/apache-access.log"
    JOURNAL_NUL="$ETAT/serveur/log/nul-access.log"
    JOURNAL_SPEC="$ETAT/serveur/log/spec-access.log"
    JOURNAL_PROXY="$ETAT/serveur/log/proxy-access.log"
    JOURNAL_PHP="$ETAT/serveur/log/php-access.log"
    JOURNAL_GEN="$ETAT/serveur/log/generique-access.log"
    JOURNAL_MINI="$ETAT/serveur/log/minimal-access.log"
    JOURNAL_MINI_SPEC="$ETAT/serveur/log/minimal-spec-access.log"
    GROUPE_MAX="$(awk '$1 == "FcgidMaxProcessesPerClass" { print $2 }' "$ETAT/bloc.conf")"
    [ -n "$GROUPE_MAX" ] || echec "FcgidMaxProcessesPerClass introuvable dans le bloc commun"
}

# La configuration se lit (apache2 -t) et le programme accepte son config.toml.
verifier_conf() {
    "${EN_TANT_QUE[@]}" "$BIN" --config "$ETAT/config.toml" check-config >/dev/null \
        || echec "check-config a échoué"
    local c
    for c in "$ETAT/apache.conf" "$ETAT/apache-xsendfile.conf"; do
        "$APACHE2" -t -f "$c" >/dev/null 2>&1 || { "$APACHE2" -t -f "$c" >&2 || true; echec "configuration Apache invalide : $c"; }
    done
}

demarrer_apache() {
    "$APACHE2" -f "$APACHE_CONF" -DFOREGROUND &
    APACHE_PID=$!
    local _
    for _ in $(seq 1 500); do
        kill -0 "$APACHE_PID" 2>/dev/null || break
        if curl -s -o /dev/null -f "$URL/statique/petit.bin" 2>/dev/null; then
            # Lancé en root, il ne touche que des fichiers de root (tests/proprietaires-apache).
            "$RACINE/tests/proprietaires-apache" "$APACHE_CONF" "$APACHE_PID" >&2 \
                || echec "l'Apache du banc d'essai touche des fichiers que ses enfants peuvent remplacer"
            return 0
        fi
        sleep 0.01
    done
    cat "$ETAT/serveur/log/apache-error.log" >&2 2>/dev/null || true
    echec "Apache n'a pas démarré sur le port $PORT"
}

arreter_apache() {
    if [ -n "$APACHE_PID" ] && kill -0 "$APACHE_PID" 2>/dev/null; then
        kill -TERM "$APACHE_PID" 2>/dev/null || true
        for _ in $(seq 1 150); do kill -0 "$APACHE_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$APACHE_PID" 2>/dev/null || true
        wait "$APACHE_PID" 2>/dev/null || true
    fi
    APACHE_PID=""
    # Les processus depot-fichiers de CET Apache (notre copie du programme) ne lui survivent pas.
    local p
    for p in $(pids_depot) $(pids_exe "$BIN_GEN") $(pids_exe "$NUL") $(pids_exe "$SPEC") $(pids_exe "$MINI") $(pids_exe "$MINI_SPEC"); do
        kill -KILL "$p" 2>/dev/null || true
    done
}

durees_depuis() { # JOURNAL LIGNE_DE_DÉPART → la durée de chaque requête (µs, %D), une par ligne
    # %D : durée vue par Apache, de la lecture de la requête à la fin de la réponse (sans l'attente
    # du client wrk lui-même pour un processeur : sur une machine chargée, c'est l'autre p99 utile).
    tail -n +"$(($2 + 1))" "$1" 2>/dev/null | awk -F'"' '{ split($3, a, " "); print a[3] + 0 }'
}
lents_depuis() { # JOURNAL LIGNE_DE_DÉPART → « requêtes_de_plus_de_500_ms requêtes max_ms p99_ms »
    durees_depuis "$1" "$2" | sort -n \
        | awk '{ d[NR] = $1; if ($1 > 500000) lents++ }
            END { i = int(NR * 0.99); if (i < 1) i = 1
                  printf "%d %d %.1f %.2f\n", lents, NR, d[NR] / 1000, d[i] / 1000 }'
}
# Remplissage du groupe de processus : mod_fcgid n'ajoute un processus qu'à une requête qui ne
# trouve aucun processus libre, après 1 s d'attente. On envoie donc GROUPE_MAX requêtes LENTES en
# parallèle (chacune garde son processus plus d'une seconde), deux fois : la première vague lance
# une partie du groupe (score de lancement, processus volés par une autre requête), la seconde le
# complète. Programme : MCP tools/list avec un token « lent-… », que le serveur d'introspection
# local met 1,5 s à valider (un téléchargement limité en débit ne suffit pas : les tampons des
# sockets absorbent plusieurs Mio et libèrent le processus trop tôt) ; répondeur nul : GET avec
# « lent » dans la chaîne de requête (il dort 1,5 s). En production, voir docs/DEPLOIEMENT.md.
# Une requête lente par classe de processus (argument : son rang, pour un jeton MCP distinct).
lent_prog() {
    curl -s -o /dev/null -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
        -H "Authorization: Bearer lent-$1" -d '{"jsonrpc":"2.0","id":1,"method":"tools/list"}' "$URL/mcp.php"
}
lent_reference() {
    curl -s -o /dev/null -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
        -H "Authorization: Bearer lent-r$1" -d '{"jsonrpc":"2.0","id":1,"method":"tools/list"}' "$URL_NUL/mcp.php"
}
lent_nul() { curl -s -o /dev/null "$URL_NUL/download.php?lent=1"; }
lent_spec() { curl -s -o /dev/null "$URL_SPEC/download.php?lent=1"; }
# L'hôte générique : le même programme, le même MCP lent ; le répondeur minimal : un POST d'un
# octet (tout corps le fait attendre 1,5 s ; LimitRequestBody 1 le laisse passer).
lent_generique() {
    curl -s -o /dev/null -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
        -H "Authorization: Bearer lent-g$1" -d '{"jsonrpc":"2.0","id":1,"method":"tools/list"}' "$URL_GEN/mcp.php"
}
lent_minimal() { curl -s -o /dev/null --data-binary x "$URL_MINI/download.php"; }
lent_minimal_spec() { curl -s -o /dev/null --data-binary x "$URL_MINI_SPEC/download.php"; }
deux_vagues() { # FONCTION… : deux fois, N requêtes lentes de chaque FONCTION en parallèle (N : $VAGUE, défaut GROUPE_MAX)
    local tour i f pids
    for tour in 1 2; do
        pids=()
        for i in $(seq 1 "${VAGUE:-$GROUPE_MAX}"); do
            for f in "$@"; do "$f" "$i" & pids+=($!); done
        done
        wait "${pids[@]}" || true
    done
}
GROUPE_MAX_GEN=16 # FcgidMaxProcessesPerClass de l'hôte générique
remplir_groupes() { # CLÉ [tous] : les nombres de processus obtenus vont dans R[CLÉ.prog], R[CLÉ.nul]…
    if [ "$REFERENCE" = 1 ]; then
        deux_vagues lent_prog lent_reference
    elif [ "$SEULEMENT_DEPOT" = 1 ]; then
        deux_vagues lent_prog
    else
        deux_vagues lent_prog lent_nul
        # Le groupe du nul avec les appels de la spécification, à part : trois groupes remplis
        # ensemble dépassent ce que le score de lancement de mod_fcgid accorde d'un coup.
        deux_vagues lent_spec
    fi
    # L'hôte générique et le répondeur minimal, ensemble, 16 requêtes lentes chacun, puis le minimal
    # avec les appels de la spécification (« tous » : au premier remplissage seulement ; 16
    # processus suffisent à 8 connexions).
    [ "${2:-}" != tous ] || VAGUE="$GROUPE_MAX_GEN" deux_vagues lent_generique lent_minimal
    [ "${2:-}" != tous ] || VAGUE="$GROUPE_MAX_GEN" deux_vagues lent_minimal_spec
    R[$1.prog]="$(pids_depot | wc -l)"; R[$1.nul]="$(pids_exe "$NUL" | wc -l)"
    R[$1.spec]="$(pids_exe "$SPEC" | wc -l)"
    R[$1.gen]="$(pids_exe "$BIN_GEN" | wc -l)"; R[$1.mini]="$(pids_exe "$MINI" | wc -l)"
    R[$1.minispec]="$(pids_exe "$MINI_SPEC" | wc -l)"
    local autres=""
    [ "${2:-}" != tous ] || autres=" ; ${R[$1.gen]} sous l'hôte générique (max $GROUPE_MAX_GEN), ${R[$1.mini]} répondeurs minimaux (max $GROUPE_MAX)"
    if [ "$SEULEMENT_DEPOT" = 1 ]; then
        info "  groupes remplis : ${R[$1.prog]} processus depot-fichiers (max $GROUPE_MAX)$autres"
    else
        info "  groupe rempli : ${R[$1.prog]} processus depot-fichiers, ${R[$1.nul]} répondeurs nuls, ${R[$1.spec]} avec les appels de la spécification (max $GROUPE_MAX)$autres"
    fi
}

# Rafale à froid : Apache redémarré (groupe vide), 8 clients en parallèle × 20 téléchargements
# (une connexion persistante par client), requêtes de plus de 500 ms comptées dans le journal.
rafale_froide() { # CLÉ JOURNAL URL
    local i j d0 pids=() urls=() l n m
    arreter_apache; demarrer_apache
    d0="$(lignes "$2")"
    for j in $(seq 1 20); do urls+=(-o /dev/null "$3"); done
    for i in $(seq 1 8); do curl -s "${urls[@]}" & pids+=($!); done
    wait "${pids[@]}" || true
    read -r l n m _ < <(lents_depuis "$2" "$d0")
    R[$1.lents]="$l"; R[$1.n]="$n"; R[$1.max]="$m"
    info "  rafale à froid $1 : $l requête(s) sur $n au-delà de 500 ms (max $m ms)"
}

