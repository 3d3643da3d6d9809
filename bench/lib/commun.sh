# depot-fichiers — banc d'essai : ce que tout script de bench/ partage (à sourcer, jamais lancé).
#
# Messages, calculs et mise en forme des chiffres (awk), médianes, paquets (installés sans démarrer
# de service, comme tests/run), compilation du programme. Variables lues : RACINE (le dépôt),
# CARGO (facultatif), DEPOT_BIN (un programme déjà compilé). Fixe : APACHE2, PHP_FPM,
# PHP_VERSION, BIN_SOURCE, SOURCE_PROGRAMME, PROGRAMME_AFFICHE.
#
# Pourquoi du bash et pas un `xtask` en Rust : un banc d'essai ne fait qu'orchestrer des outils du
# système (apache2, php-fpm, wrk, curl, gnuplot, losetup) et lire leurs journaux ; en Rust, ces
# lancements et ces lectures s'écriraient plus longuement, sans rien mesurer de plus, et chaque
# passe paierait une compilation de plus. Ce qui se mesure en Rust (le codec, l'automate, le dépôt
# à 10⁶ fichiers) l'est déjà : benches/codec.rs, examples/echelle.rs, examples/bench_sweep.rs.

info() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
echec() { printf '\033[31mErreur : %s\033[0m\n' "$*" >&2; exit 1; }

# --- Chiffres -------------------------------------------------------------------------------------
calc() { awk "BEGIN { printf \"%s\", $* }"; }
f1() { awk -v v="$1" 'BEGIN { printf "%.1f", v }'; }
f2() { awk -v v="$1" 'BEGIN { printf "%.2f", v }'; }
f3() { awk -v v="$1" 'BEGIN { printf "%.3f", v }'; }
# ok VALEUR CIBLE OPÉRATEUR → « atteinte » ou « MANQUÉE »
ok() { if awk -v v="$1" -v c="$2" 'BEGIN { exit !(v '"$3"' c) }'; then echo "atteinte"; else echo "MANQUÉE"; fi; }
mio() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
debit() { awk -v m="$1" -v t="$2" 'BEGIN { printf "%.0f", m / t }'; }
mediane() { # médiane des nombres donnés
    printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {
        if (NR == 0) { print "nan"; exit }
        if (NR % 2) print v[(NR+1)/2]; else printf "%.6g\n", (v[NR/2] + v[NR/2+1]) / 2 }'
}
lignes() { if [ -e "$1" ]; then wc -l <"$1"; else echo 0; fi; }
port_libre() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
jeton_aleatoire() { head -c "${1:-32}" /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# --- Paquets (comme tests/run : sans démarrer de service) -----------------------------------------
installer_sans_demarrer() {
    local politique=/usr/sbin/policy-rc.d pose=0
    if [ ! -e "$politique" ]; then
        printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$politique" >/dev/null
        "${SUDO[@]}" chmod 755 "$politique"
        pose=1
    fi
    local rc=0
    { "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" \
        || { "${SUDO[@]}" apt-get update -q && "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
                 apt-get install -y -q --no-install-recommends "$@"; }; } || rc=$?
    [ "$pose" = 0 ] || "${SUDO[@]}" rm -f "$politique"
    return "$rc"
}
# php-fpm de Debian (la conception PHP du cahier des charges ; php8.2-fpm sous bookworm) : le
# paquet « php-fpm » tire la version de la distribution ; déjà là si un php-fpm<version> l'est.
php_fpm() { find /usr/sbin -maxdepth 1 -name 'php-fpm[0-9]*' 2>/dev/null | sort -V | tail -n 1; }
# paquets_du_banc AVEC_PHP(0|1) : installe ce qui manque, puis fixe APACHE2, PHP_FPM, PHP_VERSION.
paquets_du_banc() {
    local p manquants=()
    for p in apache2 libapache2-mod-fcgid libapache2-mod-xsendfile wrk curl python3 gcc libc6-dev time gnuplot-nox; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || manquants+=("$p")
    done
    [ "$1" = 0 ] || [ -n "$(php_fpm)" ] || manquants+=(php-fpm)
    if [ "${#manquants[@]}" -gt 0 ]; then
        info "Installation de : ${manquants[*]}"
        if [ "$(id -u)" -eq 0 ]; then SUDO=(); elif command -v sudo >/dev/null; then SUDO=(sudo); else
            echec "paquets manquants (${manquants[*]}) : relancer en root (sudo $0)"
        fi
        installer_sans_demarrer "${manquants[@]}"
    fi
    APACHE2="$(command -v apache2 || echo /usr/sbin/apache2)"
    PHP_FPM=""; PHP_VERSION=""
    if [ "$1" = 1 ]; then
        PHP_FPM="$(php_fpm)"
        [ -x "$PHP_FPM" ] || echec "php-fpm introuvable dans /usr/sbin après l'installation du paquet php-fpm"
        PHP_VERSION="$("$PHP_FPM" -v 2>/dev/null | awk 'NR == 1 { print $1, $2 }')"
    fi
}

# --- Programme ------------------------------------------------------------------------------------
# programme_du_banc : DEPOT_BIN, ou le programme compilé ici (cargo build --release) ; fixe
# BIN_SOURCE et, pour machine.txt, lus maintenant, le source d'où vient le programme (le dossier
# peut changer pendant la passe) et son chemin, relatif au dépôt quand il y est.
programme_du_banc() {
    if [ -z "${CARGO:-}" ]; then
        if command -v cargo >/dev/null 2>&1; then CARGO=cargo; elif [ -x "$HOME/.cargo/bin/cargo" ]; then
            CARGO="$HOME/.cargo/bin/cargo"; else CARGO=""; fi
    fi
    if [ -n "${DEPOT_BIN:-}" ]; then
        BIN_SOURCE="$DEPOT_BIN"
    else
        [ -n "$CARGO" ] || echec "cargo introuvable (ou donner DEPOT_BIN=/chemin/depot-fichiers)"
        info "Compilation (cargo build --release)"
        (cd "$RACINE" && "$CARGO" build --release -q --bin depot-fichiers)
        BIN_SOURCE="$RACINE/target/release/depot-fichiers"
    fi
    [ -x "$BIN_SOURCE" ] || echec "$BIN_SOURCE absent"
    SOURCE_PROGRAMME="$(git -c safe.directory="$RACINE" -C "$RACINE" describe --always --dirty 2>/dev/null || echo inconnue)"
    PROGRAMME_AFFICHE="${BIN_SOURCE#"$RACINE"/}"
    command -v cc >/dev/null || echec "cc introuvable (paquet gcc) : il compile bench/repondeur-nul.c"
}

# --- Sortie brute ---------------------------------------------------------------------------------
# dossier_de_passe [FICHIER] : bench/runs/<AAAA-MM-JJ>-<machine>[-k]/, le premier qui n'existe pas
# encore (sans argument), ou le premier qui n'a pas encore FICHIER ; créé, son chemin affiché.
dossier_de_passe() {
    local base sortie i=2
    base="$RACINE/bench/runs/$(date +%Y-%m-%d)-$(hostname -s 2>/dev/null || uname -n)"
    sortie="$base"
    while if [ -n "${1:-}" ]; then [ -e "$sortie/$1" ]; else [ -e "$sortie" ]; fi; do
        sortie="$base-$i"; i=$((i + 1))
    done
    mkdir -p "$sortie"
    echo "$sortie"
}
# machine_txt : les lignes de machine.txt que toutes les passes partagent (à compléter).
machine_txt() {
    echo "programme : ${PROGRAMME_AFFICHE:-?} ; source : ${SOURCE_PROGRAMME:-?} (lu au début de la passe)"
    echo "machine : $(hostname -s 2>/dev/null || uname -n), $(nproc) cœurs,$(awk -F: '/^model name/ { print $2; exit }' /proc/cpuinfo), $(awk '/^MemTotal/ { printf "%.1f Gio", $2 / 1048576 }' /proc/meminfo)"
    echo "système : $(uname -srm) ; $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME") ; / monté avec : $(findmnt -no FSTYPE,OPTIONS / 2>/dev/null)"
    recuperation_memoire
}
# recuperation_memoire : la ligne qui dit si le noyau rend au système des pages de fichier que
# personne n'a lues depuis un moment (DAMON, action `pageout`, comme certaines machines virtuelles
# le font pour rendre leur mémoire à l'hôte). Les fichiers d'un grand dépôt sortent alors du cache :
# un GET lit le disque (docs/PERFORMANCE.md, § 3.5).
recuperation_memoire() {
    local k c age aggr actions=""
    for k in /sys/kernel/mm/damon/admin/kdamonds/[0-9]*; do
        [ "$(cat "$k/state" 2>/dev/null)" = on ] || continue
        for c in "$k"/contexts/[0-9]*/schemes/[0-9]*; do
            age="$(cat "$c/access_pattern/age/min" 2>/dev/null)"
            aggr="$(cat "$c/../../monitoring_attrs/intervals/aggr_us" 2>/dev/null)"
            actions="$actions $(cat "$c/action" 2>/dev/null) après $((${age:-0} * ${aggr:-0} / 1000000)) s sans accès,"
        done
    done
    if [ -n "$actions" ]; then
        echo "récupération de la mémoire : DAMON actif :${actions%,}"
    else
        echo "récupération de la mémoire : pas de DAMON actif"
    fi
}
