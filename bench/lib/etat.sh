# depot-fichiers — banc d'essai : le dossier d'état d'une passe (à sourcer).
#
# preparer_etat [PARENT] crée le dossier d'état (sous PARENT, par défaut $TMPDIR ou /tmp), y copie
# le programme (BIN, et BIN_GEN pour l'hôte mod_fcgid générique), compile les répondeurs FastCGI
# (NUL, SPEC, MINI, MINI_SPEC), tire les ports (PORT, PORT_NUL, PORT_SPEC, PORT_PROXY, PORT_LISTEN,
# PORT_PHP, PORT_GEN, PORT_MINI, PORT_MINI_SPEC et leurs URL_…), le token (TOKEN) et le jeton MCP (JETON_MCP), et pose le
# piège de fin (nettoyer : Apache, php-fpm, processus lancés, dossier effacé sauf DEPOT_GARDER=1 ou
# ETAT_JETABLE=1 — un système de fichiers jeté avec lui — ; puis, dans l'ordre inverse, les
# fonctions inscrites dans A_NETTOYER).
#
# Disposition (celle d'apache/local.conf.template : tout ce que l'Apache lancé en root lit ou écrit
# est à root ; seuls files/, log/, run/fcgid/, config.toml et le dépôt de PHP sont au compte des
# enfants, www-data sous root) :
#   bin/        les programmes servis          files/, log/   le dépôt et le journal du programme
#   www/        la racine web (statique/)      php/           la conception PHP (lib/php.sh)
#   serveur/    configuration, pid, journaux   travail/       fichiers des mesures, wrk.txt, rapport
#   run/fcgid/  les sockets de mod_fcgid

APACHE_PID=""; INTRO_PID=""; LISTEN_PID=""; PHP_PID=""
A_NETTOYER=()

preparer_etat() {
    if [ "$(id -u)" -eq 0 ]; then
        UTILISATEUR=www-data
        GROUPE="$(id -gn www-data 2>/dev/null)" || echec "le compte www-data n'existe pas"
        EN_TANT_QUE=(setpriv --reuid="$UTILISATEUR" --regid="$GROUPE" --init-groups --)
    else
        UTILISATEUR="$(id -un)"; GROUPE="$(id -gn)"; EN_TANT_QUE=()
    fi
    # Le Python du système : celui du PATH de root (pyenv…) peut être illisible pour www-data.
    PYTHON_SYSTEME=/usr/bin/python3
    [ -x "$PYTHON_SYSTEME" ] || PYTHON_SYSTEME="$(command -v python3)"
    ETAT="$(mktemp -d "${1:-${TMPDIR:-/tmp}}/depot-fichiers-bench.XXXXXX")"
    trap nettoyer EXIT
    trap 'exit 130' INT TERM
    mkdir -p "$ETAT"/{www/statique,files,log,run/fcgid,bin,travail,serveur/run,serveur/log}
    install -m 755 "$BIN_SOURCE" "$ETAT/bin/depot-fichiers"
    BIN="$ETAT/bin/depot-fichiers"
    # Le même programme pour l'hôte mod_fcgid générique : une copie, pour compter ses processus à part.
    install -m 755 "$BIN_SOURCE" "$ETAT/bin/depot-fichiers-generique"
    BIN_GEN="$ETAT/bin/depot-fichiers-generique"
    NUL="$ETAT/bin/repondeur-nul"
    cc -O2 -o "$NUL" "$RACINE/bench/repondeur-nul.c" || echec "compilation de bench/repondeur-nul.c"
    # Le même, plus les appels système de la spécification (voir bench/repondeur-nul.c), sur le dépôt de $ETAT.
    SPEC="$ETAT/bin/repondeur-spec"
    cc -O2 -DAPPELS_DE_LA_SPEC="\"$ETAT\"" -o "$SPEC" "$RACINE/bench/repondeur-nul.c" \
        || echec "compilation de bench/repondeur-nul.c (appels de la spécification)"
    # Le répondeur minimal : une lecture, une réponse calculée d'avance en un seul write.
    MINI="$ETAT/bin/repondeur-minimal"
    cc -O2 -o "$MINI" "$RACINE/bench/repondeur-minimal.c" || echec "compilation de bench/repondeur-minimal.c"
    # Le même, plus les appels système et les en-têtes de la spécification : le plancher de tout
    # programme qui tient le contrat (voir bench/repondeur-minimal.c).
    MINI_SPEC="$ETAT/bin/repondeur-minimal-spec"
    cc -O2 -DAPPELS_DE_LA_SPEC="\"$ETAT\"" -o "$MINI_SPEC" "$RACINE/bench/repondeur-minimal.c" \
        || echec "compilation de bench/repondeur-minimal.c (appels de la spécification)"
    PORT="$(port_libre)"; URL="http://127.0.0.1:$PORT"
    # Le répondeur nul (mod_fcgid) et la route mod_proxy_fcgi → programme lancé avec --listen.
    PORT_NUL="$(port_libre)"; URL_NUL="http://127.0.0.1:$PORT_NUL"
    PORT_SPEC="$(port_libre)"; URL_SPEC="http://127.0.0.1:$PORT_SPEC"
    PORT_PROXY="$(port_libre)"; URL_PROXY="http://127.0.0.1:$PORT_PROXY"
    PORT_LISTEN="$(port_libre)"
    # La conception PHP (php-fpm par mod_proxy_fcgi), l'hôte mod_fcgid générique, le répondeur minimal.
    PORT_PHP="$(port_libre)"; URL_PHP="http://127.0.0.1:$PORT_PHP"
    PORT_GEN="$(port_libre)"; URL_GEN="http://127.0.0.1:$PORT_GEN"
    PORT_MINI="$(port_libre)"; URL_MINI="http://127.0.0.1:$PORT_MINI"
    PORT_MINI_SPEC="$(port_libre)"; URL_MINI_SPEC="http://127.0.0.1:$PORT_MINI_SPEC"
    TOKEN="$(jeton_aleatoire 32)"
    JETON_MCP="jeton-bench-$(jeton_aleatoire 8)"
}

nettoyer() {
    trap - EXIT INT TERM
    arreter_apache
    arreter_php
    if [ -n "$LISTEN_PID" ]; then kill "$LISTEN_PID" 2>/dev/null || true; wait "$LISTEN_PID" 2>/dev/null || true; fi
    if [ -n "$INTRO_PID" ]; then kill "$INTRO_PID" 2>/dev/null || true; wait "$INTRO_PID" 2>/dev/null || true; fi
    if [ "${DEPOT_GARDER:-0}" = 1 ]; then info "Dossier d'état conservé : $ETAT"
    elif [ "${ETAT_JETABLE:-0}" = 0 ]; then rm -rf "$ETAT"; fi
    local i
    for ((i = ${#A_NETTOYER[@]} - 1; i >= 0; i--)); do "${A_NETTOYER[i]}" || true; done
}

# Serveur d'introspection (RFC 7662) sur 127.0.0.1 (bench/introspection.py) : INTRO_URL.
demarrer_introspection() {
    python3 "$RACINE/bench/introspection.py" "$ETAT/serveur/run/introspection.port" "$URL/mcp.php" &
    INTRO_PID=$!
    local _
    for _ in $(seq 1 100); do [ -s "$ETAT/serveur/run/introspection.port" ] && break; sleep 0.05; done
    [ -s "$ETAT/serveur/run/introspection.port" ] || echec "le serveur d'introspection n'a pas démarré"
    INTRO_URL="http://127.0.0.1:$(cat "$ETAT/serveur/run/introspection.port")/introspect"
}

# Le config.toml de la démonstration (apache/local.config.toml.template), avec le serveur
# d'introspection local à la place du faux ; LIGNES_EN_PLUS… ajoutées à la fin.
ecrire_config_toml() {
    remplir "$RACINE/apache/local.config.toml.template" \
        | sed -e "s|^oauth_url = .*|oauth_url = \"${INTRO_URL%/introspect}\"|" >"$ETAT/config.toml"
    printf 'oauth_introspection_url = "%s"\n' "$INTRO_URL" >>"$ETAT/config.toml"
    local l
    for l in "$@"; do printf '%s\n' "$l" >>"$ETAT/config.toml"; done
    chmod 600 "$ETAT/config.toml"
    chmod 700 "$ETAT/files" "$ETAT/log"
}

# Les fichiers du dépôt et du compte des enfants leur reviennent (sous root).
proprietaire() {
    if [ "$(id -u)" -eq 0 ]; then
        chown -R "$UTILISATEUR:$GROUPE" "$ETAT/files" "$ETAT/log" "$ETAT/run/fcgid" "$ETAT/config.toml"
        [ -z "${PHP_FPM:-}" ] || chown -R "$UTILISATEUR:$GROUPE" "$ETAT/php/files" "$ETAT/php/log" "$ETAT/php/tmp" \
            "$ETAT/php/www/config.php"
        chmod 755 "$ETAT"
    fi
}

# Les processus qui exécutent EXÉCUTABLE (sans pgrep : procps peut manquer).
pids_exe() {
    local p
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/exe" 2>/dev/null)" = "$1" ] && echo "${p#/proc/}"
    done
    return 0
}
pids_depot() { pids_exe "$BIN"; } # les processus qui exécutent NOTRE copie du programme
raz_pic_memoire() {
    local p
    for p in $(pids_depot); do echo 5 >"/proc/$p/clear_refs" 2>/dev/null || true; done
}
pic_memoire_kio() { # le plus grand VmHWM des processus depot-fichiers
    local p v max=0
    for p in $(pids_depot); do
        v="$(awk '/^VmHWM:/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)"
        [ "${v:-0}" -gt "$max" ] && max="$v"
    done
    echo "$max"
}
