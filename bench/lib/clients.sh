# depot-fichiers — banc d'essai : les clients (curl, scripts Lua de wrk) et les transferts (à
# sourcer).

telecharger() { # URL → « durée_s code »
    curl -s -o /dev/null -w '%{time_total} %{http_code}\n' "$1"
}
deposer() { # FICHIER NOM [URL_DU_SITE] → « durée_s code »
    curl -s -o "$ETAT/travail/reponse.json" -w '%{time_total} %{http_code}\n' \
        -H "Authorization: Bearer $TOKEN" -F "fichier=@$1;filename=$2" "${3:-$URL}/upload.php"
}
dl() { echo "${2:-$URL}/download.php?fichier=$1&token=$TOKEN"; } # NOM [URL_DU_SITE]
# Le dépôt avec reprise, comme le fait la fonction de `depot-fichiers consignes` : création avec
# la longueur, le nom et Repr-Digest, puis des parties de 8 Mio prises du fichier (par dd ici, par
# tail et head dans la fonction) et envoyées par curl --data-binary, chacune au décalage que la
# réponse à la précédente a donné (Upload-Offset). L'empreinte est calculée avant : le temps de
# sha256sum chez l'agent n'est pas celui du serveur.
deposer_reprise() { # FICHIER NOM EMPREINTE_BASE64 → « durée_s code durée_de_la_dernière_partie_s »
    local f="$1" n="$2" t k=0 m c l r code=000 dern=0 debut
    t="$(stat -c %s "$f")"
    debut="$(date +%s.%N)"
    l="$(curl -s -X POST -H "Authorization: Bearer $TOKEN" -H 'Upload-Complete: ?0' -H "Upload-Length: $t" \
        -H "Repr-Digest: sha-256=:$3:" -H "Content-Disposition: attachment; filename=\"$n\"" "$URL/upload.php" \
        | sed -n 's/.*"url_reprise":"\([^"]*\)".*/\1/p')"
    [ -n "$l" ] || { echo "0 000 0"; return 0; }
    while :; do
        m=$((t - k)); c='?1'; [ "$m" -le 8388608 ] || { m=8388608; c='?0'; }
        # dd lit exactement la partie : `tail | head` ferait mourir tail de SIGPIPE, ce que
        # pipefail prendrait pour un échec du script.
        r="$(dd if="$f" iflag=skip_bytes,count_bytes skip="$k" count="$m" bs=1M status=none \
            | curl -s -o "$ETAT/travail/reponse.json" -w '%{time_total} %{http_code} %header{upload-offset}' \
                -X PATCH -H "Authorization: Bearer $TOKEN" -H "Upload-Offset: $k" -H "Upload-Complete: $c" \
                -H 'Expect:' -H 'Content-Type: application/partial-upload' --data-binary @- "$l")"
        read -r dern code k <<<"$r"
        [ "$c" = '?0' ] && [ "$code" = 204 ] && [ -n "$k" ] || break
    done
    echo "$(awk -v a="$debut" -v b="$(date +%s.%N)" 'BEGIN { printf "%.6f", b - a }') $code $dern"
}

# Les scripts Lua de wrk, dans $ETAT/travail (le token et le jeton MCP de la passe y sont écrits) :
# depot.lua (dépôt de 10 Kio, multipart, toujours le même nom ; le répondeur nul lit tout le corps),
# depot-tournant.lua (32 noms tournants par fil wrk), lien.lua, liste.lua, appel.lua (MCP).
ecrire_scripts_lua() {
    cat >"$ETAT/travail/depot.lua" <<EOF
wrk.method = "POST"
local limite = "----banc-depot-fichiers"
wrk.body = "--" .. limite .. "\r\nContent-Disposition: form-data; name=\"fichier\"; filename=\"banc-depot.bin\"\r\n"
    .. "Content-Type: application/octet-stream\r\n\r\n" .. string.rep("x", 10240) .. "\r\n--" .. limite .. "--\r\n"
wrk.headers["Content-Type"] = "multipart/form-data; boundary=" .. limite
wrk.headers["Authorization"] = "Bearer $TOKEN"
EOF
    # Dépôt de 10 Kio avec 32 noms tournants par fil wrk (banc-<fil>-<1…32>.bin) : chaque dépôt en
    # remplace un autre du même fil, comme une sandbox qui redépose ses fichiers ; les 32 requêtes de
    # chaque fil sont construites une fois, dans init().
    cat >"$ETAT/travail/depot-tournant.lua" <<EOF
local fils = 0
function setup(thread)
    fils = fils + 1
    thread:set("fil", fils)
end
local requetes, n = {}, 0
function init(args)
    local limite = "----banc-depot-fichiers"
    local contenu = string.rep("x", 10240)
    local entetes = {}
    entetes["Content-Type"] = "multipart/form-data; boundary=" .. limite
    entetes["Authorization"] = "Bearer $TOKEN"
    for k = 1, 32 do
        local corps = "--" .. limite .. "\r\nContent-Disposition: form-data; name=\"fichier\"; filename=\"banc-"
            .. fil .. "-" .. k .. ".bin\"\r\nContent-Type: application/octet-stream\r\n\r\n" .. contenu
            .. "\r\n--" .. limite .. "--\r\n"
        requetes[k] = wrk.format("POST", nil, entetes, corps)
    end
end
function request()
    n = n % 32 + 1
    return requetes[n]
end
EOF
    # MCP tools/call recuperer_fichier mode=lien (introspection HTTP locale à chaque requête).
    cat >"$ETAT/travail/lien.lua" <<EOF
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"recuperer_fichier","arguments":{"nom_fichier":"petit.bin","mode":"lien"}}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["Authorization"] = "Bearer $JETON_MCP"
EOF
    cat >"$ETAT/travail/liste.lua" <<EOF
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["Authorization"] = "Bearer $JETON_MCP"
EOF
    sed -e 's|"method":"tools/list"}|"method":"tools/call","params":{"name":"recuperer_fichier","arguments":{"nom_fichier":"petit.bin"}}}|' \
        "$ETAT/travail/liste.lua" >"$ETAT/travail/appel.lua"
}

# Vérifie que MCP tools/call recuperer_fichier répond un lien (MODE : lien, ou vide pour le mode
# par défaut).
verifier_mcp() {
    local verif args='"nom_fichier":"petit.bin"'
    [ -z "${1:-}" ] || args+=",\"mode\":\"$1\""
    verif="$(curl -s -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
        -H "Authorization: Bearer $JETON_MCP" \
        -d "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"recuperer_fichier\",\"arguments\":{$args}}}" \
        "$URL/mcp.php")"
    case "$verif" in *download.php*) ;; *) echec "tools/call${1:+ mode=$1} ne répond pas comme prévu : $verif" ;; esac
}

# Un transfert (curl, une connexion), REPETITIONS fois : durées et pic de mémoire résidente (VmHWM)
# des processus du programme, médianes dans R[CLÉ.t], R[CLÉ.mem], R[CLÉ.memmax] (et R[CLÉ.st] contre
# le statique, R[CLÉ.dern] : la dernière partie d'un dépôt avec reprise, EMPREINTE_GROS son SHA-256).
transfert() { # CLÉ depot|reprise|reprise-connexion|get FICHIER_OU_NOM [URL_STATIQUE]
    local cle="$1" sens="$2" quoi="$3" i t d code mem temps=() mems=() stemps=() dernieres=()
    for i in $(seq 1 "$REPETITIONS"); do
        raz_pic_memoire
        if [ "$sens" = depot ]; then
            read -r t code < <(deposer "$quoi" "$(basename "$quoi")")
        elif [ "$sens" = reprise ]; then
            read -r t code d < <(deposer_reprise "$quoi" "reprise-$(basename "$quoi")" "$EMPREINTE_GROS")
            dernieres+=("$d")
        elif [ "$sens" = reprise-connexion ]; then
            read -r t code d < <(python3 "$RACINE/bench/reprise.py" "$URL/upload.php" "$TOKEN" "$quoi" \
                "reprise-connexion-$(basename "$quoi")" "$EMPREINTE_GROS")
            dernieres+=("$d")
        else
            read -r t code < <(telecharger "$(dl "$quoi")")
        fi
        [ "$code" = 200 ] || echec "$cle : HTTP $code"
        mem="$(pic_memoire_kio)"
        temps+=("$t"); mems+=("$mem")
        if [ -n "${4:-}" ]; then
            read -r t code < <(telecharger "$4")
            [ "$code" = 200 ] || echec "$cle (statique) : HTTP $code"
            stemps+=("$t")
        fi
    done
    resumer_transfert "$cle" "${temps[*]}" "${mems[*]}" "${stemps[*]-}" "${dernieres[*]-}"
    info "  $cle : ${R[$cle.t]} s, pic ${R[$cle.mem]} Kio"
}

# Les médianes d'un transfert dans R (R[CLÉ.t], R[CLÉ.mem], R[CLÉ.memmax], R[CLÉ.st], R[CLÉ.dern]) :
# chaque liste de mesures en une chaîne, vide quand rien n'a été mesuré.
resumer_transfert() { # CLÉ "DURÉES" "PICS" "DURÉES_STATIQUES" "DURÉES_DE_LA_DERNIÈRE_PARTIE"
    local cle="$1" a=()
    read -ra a <<<"$2"; R[$cle.t]="$(mediane "${a[@]}")"
    read -ra a <<<"$3"; R[$cle.mem]="$(mediane "${a[@]}")"
    R[$cle.memmax]="$(printf '%s\n' "${a[@]}" | sort -n | tail -1)"
    read -ra a <<<"$4"; [ "${#a[@]}" = 0 ] || R[$cle.st]="$(mediane "${a[@]}")"
    read -ra a <<<"$5"; [ "${#a[@]}" = 0 ] || R[$cle.dern]="$(mediane "${a[@]}")"
}

# Plusieurs transferts entrelacés : une répétition de chacun tour à tour, REPETITIONS fois, puis
# les médianes de chacun, comme transfert.
transferts_entrelaces() { # FICHIER CLÉ:SENS…
    local quoi="$1" i paire cle sens
    shift
    declare -A T M D
    for i in $(seq 1 "$REPETITIONS"); do
        for paire in "$@"; do
            cle="${paire%%:*}"; sens="${paire#*:}"
            REPETITIONS=1 transfert "$cle" "$sens" "$quoi"
            T[$cle]+="${R[$cle.t]} "; M[$cle]+="${R[$cle.mem]} "; D[$cle]+="${R[$cle.dern]:-} "
        done
    done
    for paire in "$@"; do
        cle="${paire%%:*}"
        resumer_transfert "$cle" "${T[$cle]}" "${M[$cle]}" "" "${D[$cle]}"
        info "  $cle : ${R[$cle.t]} s, pic ${R[$cle.mem]} Kio (entrelacé)"
    done
}
