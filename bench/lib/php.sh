# depot-fichiers — banc d'essai : la conception PHP du cahier des charges et son php-fpm privé (à
# sourcer).
#
# bench/php/ (upload.php, download.php, config.php.modele : move_uploaded_file, un sidecar JSON par
# fichier, balayage complet du dossier à chaque requête, aucun fsync), servie par un php-fpm PRIVÉ
# (paquet php-fpm de Debian ; sa configuration, son pid, son journal et sa socket Unix dans le
# dossier d'état ; pm = static, 16 processus lancés d'emblée, sous le compte des enfants de
# mod_fcgid) derrière le même Apache (l'hôte $PORT_PHP de lib/apache.sh), avec son propre dépôt
# ($ETAT/php/files) et le même token. PHP_FPM vide : rien de tout cela.

# Disposition (comme pour Apache : ce que le maître php-fpm, lancé en root, lit ou écrit est à root) :
#   $ETAT/php/www             root          upload.php, download.php (bench/php/), la racine web
#   $ETAT/php/www/config.php  $UTILISATEUR  (0600, cahier des charges §9) le token, les dossiers
#   $ETAT/php/files, log, tmp $UTILISATEUR  son dépôt (et .meta/), son journal, les fichiers
#                                           temporaires des dépôts (upload_tmp_dir : même système de
#                                           fichiers, move_uploaded_file est un renommage)
#   $ETAT/serveur/php-fpm.conf, run/php-fpm.{pid,sock}, log/php-fpm.log   root
ecrire_conf_php() {
    [ -n "$PHP_FPM" ] || return 0
    mkdir -p "$ETAT/php/www" "$ETAT/php/files/.meta" "$ETAT/php/log" "$ETAT/php/tmp"
    install -m 644 "$RACINE/bench/php/upload.php" "$RACINE/bench/php/download.php" "$ETAT/php/www/"
    sed -e "s|@TOKEN@|$TOKEN|; s|@FICHIERS@|$ETAT/php/files|; s|@LOG@|$ETAT/php/log|; s|@URL_BASE@|$URL_PHP|" \
        "$RACINE/bench/php/config.php.modele" >"$ETAT/php/www/config.php"
    ! grep -q '@[A-Z_]*@' "$ETAT/php/www/config.php" || echec "marqueur non remplacé dans bench/php/config.php.modele"
    chmod 600 "$ETAT/php/www/config.php"
    chmod 700 "$ETAT/php/files" "$ETAT/php/files/.meta" "$ETAT/php/log" "$ETAT/php/tmp"
    {
        echo "; php-fpm privé du banc d'essai (bench/run) : la conception PHP du cahier des charges."
        echo "[global]"
        echo "pid = $ETAT/serveur/run/php-fpm.pid"
        echo "error_log = $ETAT/serveur/log/php-fpm.log"
        echo "daemonize = no"
        echo
        echo "[depot]"
        # Le compte des enfants de mod_fcgid (sans root, aucun changement de compte : tout tourne
        # sous celui qui lance le banc).
        [ "$(id -u)" -ne 0 ] || printf 'user = %s\ngroup = %s\n' "$UTILISATEUR" "$GROUPE"
        echo "listen = $PHP_SOCK"
        echo "listen.owner = $UTILISATEUR"
        echo "listen.group = $GROUPE"
        echo "listen.mode = 0660"
        echo "; pm = static, 16 processus : lancés d'emblée et gardés, pour 8 connexions simultanées"
        echo "; avec de la marge (un dépôt occupe un processus pendant ses écritures) ; c'est le"
        echo "; pendant des 16 processus de l'hôte mod_fcgid générique et du groupe rempli du bloc"
        echo "; livré (20) : aucune mesure ne paie la croissance d'un groupe."
        echo "pm = static"
        echo "pm.max_children = 16"
        echo "; Réglages de php.ini (le reste : /etc/php/*/fpm/php.ini de Debian, opcache compris)."
        echo "; 2 Gio : la limite de php.ini que donne le cahier des charges (annexe A) ; la"
        echo "; constante TAILLE_MAX_FICHIER_OCTETS (200 Mio) est vérifiée par upload.php, et"
        echo "; Apache refuse au-delà de 1 Gio (LimitRequestBody)."
        echo "php_admin_value[upload_max_filesize] = 2G"
        echo "php_admin_value[post_max_size] = 2G"
        echo "php_admin_flag[file_uploads] = on"
        echo "php_admin_value[upload_tmp_dir] = $ETAT/php/tmp"
        echo "php_admin_value[max_input_time] = 300"
        echo "php_admin_value[max_execution_time] = 300"
        echo "php_admin_flag[log_errors] = on"
        echo "php_admin_value[error_log] = $ETAT/php/log/php-erreurs.log"
    } >"$ETAT/serveur/php-fpm.conf"
    "$PHP_FPM" -t -y "$ETAT/serveur/php-fpm.conf" >/dev/null 2>&1 \
        || { "$PHP_FPM" -t -y "$ETAT/serveur/php-fpm.conf" >&2 || true; echec "configuration php-fpm invalide"; }
}

# Le php-fpm privé, au premier plan en tâche de fond (son pid : PHP_PID, arrêté par nettoyer).
demarrer_php() {
    "$PHP_FPM" -F -y "$ETAT/serveur/php-fpm.conf" >>"$ETAT/serveur/log/php-fpm.sortie" 2>&1 &
    PHP_PID=$!
    local _
    for _ in $(seq 1 100); do
        kill -0 "$PHP_PID" 2>/dev/null || break
        [ -S "$PHP_SOCK" ] && return 0
        sleep 0.05
    done
    cat "$ETAT/serveur/log/php-fpm.sortie" "$ETAT/serveur/log/php-fpm.log" >&2 2>/dev/null || true
    echec "php-fpm n'a pas démarré (socket $PHP_SOCK)"
}

# Démarre php-fpm, y dépose FICHIERS… (des noms de $ETAT/travail : petit.bin, cent.bin) par son
# upload.php, et vérifie que la conception répond comme le cahier des charges le dit (lien,
# sidecar, Content-Length, 401 sans token, config.php jamais servi) ; et que l'hôte générique sert
# petit.bin du dépôt du programme.
demarrer_et_verifier_php() {
    info "php-fpm privé ($PHP_FPM, socket $PHP_SOCK) derrière $URL_PHP ; hôte mod_fcgid générique $URL_GEN"
    demarrer_php
    local f code entetes
    for f in "$@"; do
        read -r _ code < <(deposer "$ETAT/travail/$f" "$f" "$URL_PHP")
        [ "$code" = 200 ] || { cat "$ETAT/travail/reponse.json" "$ETAT/php/log/php-erreurs.log" >&2 2>/dev/null
                               echec "PHP : dépôt de $f : HTTP $code"; }
    done
    grep -q "\"url_telechargement\":\"$URL_PHP/download.php?fichier=" "$ETAT/travail/reponse.json" \
        || { cat "$ETAT/travail/reponse.json" >&2; echec "PHP : la réponse du dépôt n'a pas le lien attendu"; }
    [ -s "$ETAT/php/files/.meta/petit.bin.json" ] || echec "PHP : pas de sidecar pour petit.bin"
    cmp -s <(curl -s "$(dl petit.bin "$URL_PHP")") "$ETAT/travail/petit.bin" || echec "PHP : petit.bin téléchargé différent"
    entetes="$(curl -s -D - -o /dev/null "$(dl petit.bin "$URL_PHP")")"
    grep -qi '^content-length: 10240' <<<"$entetes" || { printf '%s\n' "$entetes" >&2; echec "PHP : pas de Content-Length"; }
    [ "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer faux' -F "fichier=@$ETAT/travail/petit.bin" "$URL_PHP/upload.php")" = 401 ] \
        || echec "PHP : un dépôt sans le bon token n'est pas refusé (401)"
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL_PHP/config.php")" = 403 ] || echec "PHP : config.php est servi"
    cmp -s <(curl -s "$(dl petit.bin "$URL_GEN")") "$ETAT/travail/petit.bin" \
        || echec "l'hôte mod_fcgid générique ne sert pas petit.bin"
}

# Le php-fpm de CE banc seulement (son pid, puis ceux de ses enfants s'il en reste).
arreter_php() {
    [ -n "$PHP_PID" ] || return 0
    local enfants="" p
    for p in /proc/[0-9]*; do # ses enfants (sans pgrep : procps peut manquer)
        [ "$(awk '{ sub(/^.*\) /, ""); print $2 }' "$p/stat" 2>/dev/null)" = "$PHP_PID" ] && enfants+=" ${p#/proc/}"
    done
    if kill -0 "$PHP_PID" 2>/dev/null; then
        kill -TERM "$PHP_PID" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$PHP_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$PHP_PID" 2>/dev/null || true
        wait "$PHP_PID" 2>/dev/null || true
    fi
    for p in $enfants; do
        [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$PHP_FPM" ] && kill -KILL "$p" 2>/dev/null
    done
    PHP_PID=""
}
