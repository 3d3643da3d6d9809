//! The paragraph to paste into the agent's standing instructions (the original brief's closing section), filled from
//! the configuration: the real upload URL, the connector name, and the token or its placeholder.
//!
//! Used by `depot-fichiers --config P consignes [--avec-token] [--connecteur NOM]`.

use crate::config::Config;
use crate::wording::size_fr;

/// Connector name used when none is given on the command line.
pub(crate) const DEFAULT_CONNECTOR: &str = "depot-fichiers";

/// Placeholder written instead of the token unless `with_token` is set.
pub(crate) const TOKEN_PLACEHOLDER: &str = "<TOKEN_ACCES>";

/// Renders the French paragraph of the original brief's closing section for this deployment.
///
/// `with_token` writes the real `token_acces` (the output is then a secret); otherwise the
/// placeholder [`TOKEN_PLACEHOLDER`] is left for the user to fill in. An empty `connector` means
/// [`DEFAULT_CONNECTOR`].
pub fn render(cfg: &Config, with_token: bool, connector: &str) -> String {
    let connector = match connector.trim() {
        "" => DEFAULT_CONNECTOR,
        c => c,
    };
    let token = if with_token {
        cfg.access.token.as_str()
    } else {
        TOKEN_PLACEHOLDER
    };
    let base = cfg.site.base_url.trim_end_matches('/');
    let upload_url = format!("{base}/upload.php");
    let example_link = format!("{base}/download.php?fichier=fichier.ext&token=xxxxx");
    let delays = deletion_delays(cfg);
    let max_size = size_fr(cfg.limits.max_file_bytes);
    let expire = cfg.expiry.max_age_secs;
    let function = resumable_function(&upload_url, token);

    format!(
        r#"**Dépôt de fichiers temporaire (pont sandbox ↔ extérieur)**

Un fichier présent dans ta sandbox (calcul, conversion, génération de document...) n'est pas directement accessible en dehors de celle-ci : aucun connecteur MCP externe n'a d'accès disque partagé avec ta sandbox. Le faire transiter par la conversation en base64 est possible mais lent et coûteux en tokens au-delà de quelques dizaines de Ko — n'y recours pas si tu peux faire autrement.

Dès que tu as besoin de faire sortir un fichier de ta sandbox vers l'extérieur, et que ce fichier n'est pas trivialement petit (quelques lignes de texte), procède ainsi.

**1. Dans la sandbox, avec `curl`, fais sortir le fichier vers l'extérieur en le déposant sur un site web intermédiaire (le « dépôt »)** :
```bash
curl -X POST {upload_url} \
  -H "Authorization: Bearer {token}" \
  -F "fichier=@/chemin/vers/le/fichier.ext"
```
Cette commande s'exécute entièrement dans la sandbox : elle ne fait pas transiter le fichier par la conversation. Sa sortie (un petit JSON) revient dans ton contexte comme la sortie de n'importe quelle commande shell, par exemple :
```json
{{"succes":true,"nom":"fichier.ext","taille_octets":18655,"url_telechargement":"{example_link}","expire_au_plus_tard_dans_secondes":{expire}}}
```
Retiens le champ `"nom"` (le nom exact du fichier, à réutiliser tel quel, jamais redéduit du chemin local) et le champ `"url_telechargement"`. Taille maximale d'un fichier : {max_size}. Pour que le dépôt vérifie que les octets sont arrivés intacts, ajoute `-F "sha256=$(sha256sum /chemin/vers/le/fichier.ext | cut -c1-64)"` : il ne publie alors le fichier que si son empreinte SHA-256 est celle-là (sinon erreur `empreinte_incorrecte`, rien n'est gardé).

**Un seul téléchargement, une vie plus courte, un effacement** : si le fichier ne doit être récupéré qu'une fois (par un connecteur, par une personne), ajoute `-F "telechargements_max=1"` au dépôt : il est effacé dès que ce téléchargement s'est terminé, et personne ne peut le récupérer une seconde fois (un aperçu de lien, une requête `HEAD` ou un téléchargement interrompu ne le consomment pas ; la réponse le confirme par `"telechargements_restants":1`). `-F "duree_max_secondes=600"` raccourcit sa vie (ici à 10 minutes au plus). Et dès que le fichier a servi, efface-le sans attendre :
```bash
curl -X DELETE -G --data-urlencode "fichier=fichier.ext" \
  -H "Authorization: Bearer {token}" {upload_url}
```
(réponse `{{"succes":true,"nom":"fichier.ext","supprime":true}}` ; `"supprime":false` si rien n'était là). Un connecteur qui a récupéré le fichier peut aussi l'effacer lui-même avec le lien `"url_suppression"` de la réponse du dépôt (requête `DELETE` ou `POST` ; ce lien n'efface que ce fichier et ne permet pas de le lire).

**Gros fichier (plus de quelques dizaines de Mo) ou réseau instable** : envoie-le par parties, avec reprise et empreinte vérifiée, grâce à cette fonction shell (POSIX : `curl`, `tail`, `head`, `sha256sum`, `base64`) :
```sh
{function}
```
puis `depot_envoyer /chemin/vers/le/fichier.ext` (un second argument donne un autre nom au fichier déposé). Elle envoie le fichier par parties de 8 Mio ; si une partie échoue (connexion coupée, serveur momentanément indisponible), elle demande au dépôt à quel octet il en est et reprend de là. Le dépôt ne publie le fichier qu'au bout de la dernière partie, et seulement si son empreinte SHA-256 est celle du fichier local. Sa sortie est le même JSON que ci-dessus ; en cas d'échec définitif, elle explique pourquoi sur la sortie d'erreur et rend un code non nul.

**2. Ensuite, selon ce dont TU as besoin à ce moment-là :**

- **Tu as seulement besoin d'une URL qui pointe vers ce fichier** (par exemple pour la donner en paramètre à un outil ou un connecteur qui ira chercher le fichier lui-même à cette adresse) : utilise directement la valeur `"url_telechargement"` obtenue à l'étape 1, telle quelle, comme un simple paramètre texte. **Pas besoin d'appeler le serveur MCP `{connector}` dans ce cas** : l'URL est déjà connue. Si tu ne l'as plus sous la main (contexte compacté, trop de temps écoulé) mais que tu connais encore le nom du fichier, appelle alors le tool `recuperer_fichier` du serveur MCP `{connector}` avec `mode="lien"` pour l'obtenir à nouveau.

- **Un autre outil que tu dois appeler exige le contenu du fichier lui-même, encodé en base64, comme argument texte** (parce qu'il n'accepte pas d'URL) : appelle le tool `recuperer_fichier` du serveur MCP `{connector}` avec `mode="base64"` :
```json
{{"name": "recuperer_fichier", "arguments": {{"nom_fichier": "fichier.ext", "mode": "base64"}}}}
```
Il te renvoie le contenu encodé en base64 (champ `contenu_base64`) : transmets ce champ tel quel, en argument, à l'outil qui l'exige.

**N'utilise `mode="base64"` que pour ce cas précis** (fournir le contenu en argument texte à un outil qui l'exige). Si tu as besoin du fichier brut ailleurs — dans la sandbox, ou pour qu'un système tiers le récupère —, n'utilise jamais `mode="base64"` pour ça : reviens au cas précédent (l'URL de téléchargement, éventuellement récupérée via `mode="lien"`), qui donne accès au fichier original sans jamais le faire transiter par ta conversation. Faire un aller-retour par `mode="base64"` puis « décoder » ensuite n'aurait aucun sens : le contenu aurait de toute façon déjà traversé ta conversation en entier, ce qui est précisément ce que ce mécanisme sert à éviter.

Dans tous les cas :
1. Ne lis jamais le contenu binaire d'un fichier directement dans la conversation par un autre moyen (ex: `cat` suivi d'un encodage manuel) — c'est précisément ce que ce mécanisme permet d'éviter.
2. Un fichier déposé est effacé automatiquement ({delays}) — efface-le toi-même dès qu'il a servi, et n'y dépose jamais de contenu confidentiel ou sensible (le token de dépôt est un simple secret partagé, pas un contrôle d'accès fin).
3. Ce mécanisme sert uniquement dans le sens sandbox → extérieur. Pour ramener un fichier de la sandbox vers le dossier local de l'utilisateur, ce n'est **pas nécessaire** : sandbox et dossier local communiquent déjà directement.
"#
    )
}

/// The POSIX shell function that sends a file as a resumable upload with its SHA-256 (the
/// `consignes` paragraph and the README show it; a test runs it as printed): creation with the
/// length, the name and `Repr-Digest`, then parts of 8 MiB, each from the offset the server last
/// stated (the `Upload-Offset` of the answer to the part before, with curl ≥ 7.84's
/// `%header{}`; otherwise, and after any failure, asked by `HEAD`); a failed part (no answer,
/// 1xx, 409, 5xx) sent again after a second, 20 failures in a row at most; 4xx other than 409
/// stops it. Prints the upload's JSON.
pub(crate) fn resumable_function(upload_url: &str, token: &str) -> String {
    format!(
        r#"depot_envoyer() (
  f=$1; n=${{2:-${{1##*/}}}}; p=8388608; e=0; l=; k=; z='
'
  u='{upload_url}'; a='Authorization: Bearer {token}'
  t=$(wc -c <"$f") || return 1; t=$((t))
  o=; for x in $(sha256sum "$f" | cut -c1-64 | sed 's/../& /g'); do o="$o\\0$(printf %o "0x$x")"; done
  d=$(printf '%b' "$o" | base64); n=$(printf '%s' "$n" | sed 's/[\\"]/\\&/g')
  while [ $e -lt 20 ]; do
    r=
    if [ -z "$l" ]; then
      r=$(curl -sS -w '\n:%{{http_code}}' -X POST -H "$a" -H 'Upload-Complete: ?0' -H "Upload-Length: $t" \
        -H "Repr-Digest: sha-256=:$d:" -H "Content-Disposition: attachment; filename=\"$n\"" "$u")
      l=$(printf '%s' "$r" | sed -n 's/.*"url_reprise":"\([^"]*\)".*/\1/p'); k=0
    elif [ -z "$k" ]; then
      h=$(curl -sS -I -H "$a" "$l" | tr -d '\r')
      case $h in
        *[Uu]pload-[Cc]omplete:\ \?1*) curl -sSf -H "$a" "$l" && return 0 ;;
        'HTTP/'*' 404'*) echo 'reprise expirée ou inconnue : recommencer' >&2; return 1 ;;
      esac
      k=$(printf '%s\n' "$h" | sed -n 's/^[Uu]pload-[Oo]ffset: *//p')
      [ -n "$k" ] || {{ e=$((e + 1)); sleep 1; }}
      continue
    else
      m=$((t - k)); c='?1'; [ $m -le $p ] || {{ m=$p; c='?0'; }}
      r=$(tail -c +$((k + 1)) "$f" | head -c $m | curl -sS -w '\n%header{{upload-offset}}:%{{http_code}}' \
        -X PATCH -H "$a" -H "Upload-Offset: $k" -H "Upload-Complete: $c" -H 'Expect:' \
        -H 'Content-Type: application/partial-upload' --data-binary @- "$l")
      k=${{r%:*}}; k=${{k##*[!0-9]}}
    fi
    case ${{r##*:}} in
      200) printf '%s\n' "${{r%%"$z"*}}"; return 0 ;;
      201|204) e=0 ;;
      409) e=$((e + 1)); sleep 1 ;;
      1??|5??|000|'') e=$((e + 1)); k=; sleep 1 ;;
      *) printf '%s' "${{r%:*}}" >&2; return 1 ;;
    esac
  done
  echo "abandon après $e échecs de suite" >&2; return 1
)"#
    )
}

/// When a deposited file is erased, in this deployment's durations: "10 minutes sans
/// téléchargement, ou 1h maximum après le dépôt". Said the same way to the agent ([`render`]) and
/// to every MCP client ([`mcp_instructions`]).
pub fn deletion_delays(cfg: &Config) -> String {
    format!(
        "{} sans téléchargement, ou {} maximum après le dépôt",
        duration_fr(cfg.expiry.max_idle_secs),
        duration_fr(cfg.expiry.max_age_secs)
    )
}

/// The server `instructions` given to MCP clients (`initialize`, `server/discover`).
pub fn mcp_instructions(cfg: &Config) -> String {
    format!(
        "Dépôt de fichiers temporaire : l'outil recuperer_fichier rend un fichier déposé par upload.php, sous forme de lien (mode=\"lien\", par défaut) ou de contenu base64 (mode=\"base64\", seulement si un outil l'exige). Les fichiers sont effacés automatiquement ({}).",
        deletion_delays(cfg)
    )
}

/// A duration in French words: "10 minutes", "1h", "1h30", "45 secondes".
fn duration_fr(secs: u64) -> String {
    if secs >= 3600 && secs.is_multiple_of(60) {
        let (h, m) = (secs / 3600, (secs % 3600) / 60);
        if m == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{m:02}")
        }
    } else if secs >= 60 && secs.is_multiple_of(60) {
        let m = secs / 60;
        format!("{m} minute{}", if m > 1 { "s" } else { "" })
    } else {
        format!("{secs} seconde{}", if secs > 1 { "s" } else { "" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        crate::config::parse(crate::config::tests::MINIMAL).unwrap()
    }

    #[test]
    fn fills_the_upload_url_from_url_base() {
        let out = render(&cfg(), false, "");
        assert!(
            out.contains("curl -X POST https://depot.example.org/upload.php \\"),
            "{out}"
        );
        assert!(out.contains(
            "\"url_telechargement\":\"https://depot.example.org/download.php?fichier=fichier.ext&token=xxxxx\""
        ));
        assert!(
            !out.contains("desvigne"),
            "no leftover from the specification's example"
        );
    }

    #[test]
    fn token_is_a_placeholder_unless_asked() {
        let c = cfg();
        let without = render(&c, false, "");
        assert!(without.contains("-H \"Authorization: Bearer <TOKEN_ACCES>\""));
        assert!(!without.contains(&c.access.token));
        let with = render(&c, true, "");
        assert!(with.contains(&format!("-H \"Authorization: Bearer {}\"", c.access.token)));
        assert!(!with.contains(TOKEN_PLACEHOLDER));
    }

    #[test]
    fn connector_name_defaults_and_is_used_everywhere() {
        let out = render(&cfg(), false, "");
        assert_eq!(out.matches("serveur MCP `depot-fichiers`").count(), 3);
        let out = render(&cfg(), false, "MCP-depot-fichiers");
        assert_eq!(out.matches("serveur MCP `MCP-depot-fichiers`").count(), 3);
        assert!(!out.contains("serveur MCP `depot-fichiers`"));
    }

    #[test]
    fn delays_and_limits_follow_the_config() {
        let mut c = cfg();
        let out = render(&c, false, "");
        assert!(out.contains("(10 minutes sans téléchargement, ou 1h maximum après le dépôt)"));
        assert!(out.contains("\"expire_au_plus_tard_dans_secondes\":3600}"));
        assert!(out.contains("Taille maximale d'un fichier : 200 Mio."));
        c.expiry.max_idle_secs = 90;
        c.expiry.max_age_secs = 5400;
        c.limits.max_file_bytes = 1536 * 1024;
        let out = render(&c, false, "");
        assert!(out.contains("(90 secondes sans téléchargement, ou 1h30 maximum après le dépôt)"));
        assert!(out.contains("\"expire_au_plus_tard_dans_secondes\":5400}"));
        assert!(out.contains("Taille maximale d'un fichier : 1,5 Mio."));
    }

    #[test]
    fn mcp_instructions_follow_the_config() {
        let mut c = cfg();
        assert!(mcp_instructions(&c).ends_with(
            "effacés automatiquement (10 minutes sans téléchargement, ou 1h maximum après le dépôt)."
        ));
        c.expiry.max_idle_secs = 90;
        c.expiry.max_age_secs = 5400;
        let out = mcp_instructions(&c);
        assert!(
            out.ends_with("(90 secondes sans téléchargement, ou 1h30 maximum après le dépôt)."),
            "{out}"
        );
        assert!(render(&c, false, "").contains(&format!("({})", deletion_delays(&c))));
    }

    #[test]
    fn json_examples_are_valid_json() {
        let out = render(&cfg(), true, "x");
        let blocks: Vec<&str> = out
            .split("```json\n")
            .skip(1)
            .map(|b| b.split("\n```").next().unwrap())
            .collect();
        assert_eq!(blocks.len(), 2);
        for b in blocks {
            serde_json::from_str::<serde_json::Value>(b).unwrap_or_else(|e| panic!("{b}: {e}"));
        }
    }

    #[test]
    fn the_resumable_function_is_in_the_paragraph_and_the_readme() {
        let c = cfg();
        let f = resumable_function("https://depot.example.org/upload.php", TOKEN_PLACEHOLDER);
        assert!(render(&c, false, "").contains(&format!("```sh\n{f}\n```")));
        assert!(f.contains("a='Authorization: Bearer <TOKEN_ACCES>'"));
        let with = render(&c, true, "");
        assert!(with.contains(&format!("a='Authorization: Bearer {}'", c.access.token)));
        // The README's usage section shows it as rendered for the example deployment.
        assert!(
            include_str!("../../README.md").contains(&format!("```sh\n{f}\n```")),
            "README.md: the function differs from consignes::resumable_function"
        );
    }

    #[test]
    fn french_units() {
        assert_eq!(duration_fr(600), "10 minutes");
        assert_eq!(duration_fr(60), "1 minute");
        assert_eq!(duration_fr(3600), "1h");
        assert_eq!(duration_fr(7200), "2h");
        assert_eq!(duration_fr(1), "1 seconde");
        assert_eq!(size_fr(200 << 20), "200 Mio");
        assert_eq!(size_fr(512), "512 octets");
        assert_eq!(size_fr(1 << 30), "1 Gio");
    }
}
