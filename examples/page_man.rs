//! Writes the French man page `depot-fichiers.1` from the CLI definition (`src/cli.rs`), so that
//! the page cannot drift from the program's options.
//!
//!     cargo run --release --example page_man -- target/man 2026-11-30
//!
//! Run by `debian/construire-paquet` before `cargo deb`, which ships the gzipped page.

use std::io::Write;
use std::path::PathBuf;

use clap::CommandFactory;
use clap_mangen::Man;
use clap_mangen::roff::{Roff, bold, roman};
use depot_fichiers::cli::Cli;

const USAGE: &str = "usage : page_man DOSSIER_DE_SORTIE DATE (AAAA-MM-JJ)";

/// Sections written by hand (what the CLI definition cannot say), in roff.
const DESCRIPTION: &str = r#".SH DESCRIPTION
Un seul programme FastCGI qui sert un dépôt de fichiers temporaire :
\fB/upload.php\fR (dépôt par POST multipart, jeton fixe),
\fB/download.php\fR (lien de téléchargement),
\fB/mcp.php\fR (outil MCP \fBrecuperer_fichier\fR, OAuth 2.1 par introspection RFC 7662)
et \fB/.well-known/oauth-protected-resource\fR (RFC 9728).
Un fichier disparaît une heure après son dépôt ou dix minutes après son dernier
téléchargement : chaque requête balaie, sans cron ni démon.
.PP
Sans sous-commande, le programme sert les requêtes : lancé par Apache \fBmod_fcgid\fR
(\fBFcgidWrapper\fR), il hérite de la socket FastCGI sur son entrée standard ; avec
\fB\-\-listen\fR, il écoute lui-même (mod_proxy_fcgi, nginx) ; lancé en CGI, il le détecte seul.
"#;

const FILES: &str = r#".SH FICHIERS
.TP
.I /etc/depot-fichiers/config.toml
Configuration (TOML, lisible par www-data seul), écrite à la première installation du paquet
avec un \fBtoken_acces\fR tiré au hasard. Modèle commenté :
.IR /usr/share/depot-fichiers/config.example.toml .
.TP
.I ~/.config/depot-fichiers/config.toml
Configuration du compte qui exécute le programme (hébergement mutualisé, suEXEC), lue
avant celle de
.I /etc
quand ni \fB\-\-config\fR ni \fBDEPOT_FICHIERS_CONFIG\fR n'en donnent une, si elle existe :
~ est le dossier personnel du compte lu dans la base des utilisateurs, jamais dans \fBHOME\fR.
.TP
.I /var/lib/depot-fichiers/files
Fichiers déposés et leurs métadonnées (\fB.meta/\fR), hors de la racine web.
.TP
.I /var/lib/depot-fichiers/www
Racine web de l'hôte Apache, vide : les trois \fB.php\fR sont des noms virtuels.
.TP
.I /var/log/depot-fichiers/depot-fichiers.log
Journal du programme (rotation intégrée).
.TP
.I /etc/apache2/sites-available/depot-fichiers.conf
Hôte virtuel Apache (mod_fcgid, HTTPS).
.TP
.I /etc/apache2/conf-available/depot-fichiers-fcgid.conf
Réglages mod_fcgid du serveur entier.
.SH ENVIRONNEMENT
.TP
.B DEPOT_FICHIERS_CONFIG
Chemin de la configuration quand \fB\-\-config\fR est absent.
.SH "VOIR AUSSI"
.BR apache2 (8),
.BR a2ensite (8),
.IR /usr/share/doc/depot-fichiers/DEPLOIEMENT.md .
"#;

fn render(section: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) -> String {
    let mut out = Vec::new();
    section(&mut out).expect("roff rendering");
    String::from_utf8(out).expect("roff is UTF-8")
}

/// Replaces the `.SH` heading that clap_mangen writes in English.
fn heading(roff: String, english: &str, french: &str) -> String {
    roff.replacen(&format!(".SH {english}\n"), &format!(".SH {french}\n"), 1)
}

/// clap's own help and version entries, in French.
fn french_builtins(cmd: clap::Command) -> clap::Command {
    let mut cmd = cmd;
    cmd.build();
    let has = |cmd: &clap::Command, id: &str| cmd.get_arguments().any(|a| a.get_id() == id);
    if has(&cmd, "help") {
        cmd = cmd.mut_arg("help", |a| a.help("Affiche l'aide"));
    }
    if has(&cmd, "version") {
        cmd = cmd.mut_arg("version", |a| a.help("Affiche la version"));
    }
    cmd
}

/// One subcommand: its name and description, then its own options (not the global ones).
fn subcommand(sub: &clap::Command) -> String {
    let mut roff = Roff::default();
    roff.control("TP", []);
    roff.text([bold(sub.get_name())]);
    roff.text([roman(
        sub.get_about().map(|a| a.to_string()).unwrap_or_default(),
    )]);
    let mut own = sub.clone();
    for global in sub.get_arguments().filter(|a| a.is_global_set()) {
        own = own.mut_arg(global.get_id().clone(), |a| a.hide(true));
    }
    // Global options and -h are already listed under OPTIONS.
    let mut own = french_builtins(own);
    if own.get_arguments().any(|a| a.get_id() == "help") {
        own = own.mut_arg("help", |a| a.hide(true));
    }
    let mut text = roff.to_roff();
    if own.get_arguments().any(|a| !a.is_hide_set()) {
        let options = render(|w| Man::new(own).render_options_section(w));
        text.push_str(&options.replacen(
            ".SH OPTIONS\n",
            &format!(".RS\n.PP\nOptions de \\fB{}\\fR :\n", sub.get_name()),
            1,
        ));
        text.push_str(".RE\n");
    }
    text
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().expect(USAGE));
    let date = args.next().expect(USAGE);
    std::fs::create_dir_all(&dir).expect("output folder");
    let cmd = french_builtins(
        Cli::command()
            .disable_help_subcommand(true)
            .subcommand_help_heading("SOUS-COMMANDES"),
    );
    let man = Man::new(cmd.clone())
        .title("DEPOT-FICHIERS")
        .section("1")
        .date(date)
        .source(format!("depot-fichiers {}", env!("CARGO_PKG_VERSION")))
        .manual("Commandes utilisateur");

    let mut page = String::new();
    page.push_str(&render(|w| man.render_title(w)));
    page.push_str(&heading(
        render(|w| man.render_name_section(w)),
        "NAME",
        "NOM",
    ));
    page.push_str(&render(|w| man.render_synopsis_section(w)));
    page.push_str(DESCRIPTION);
    page.push_str(&render(|w| man.render_options_section(w)));
    page.push_str(".SH SOUS-COMMANDES\n");
    for sub in cmd.get_subcommands() {
        page.push_str(&subcommand(sub));
    }
    page.push_str(FILES);
    page.push_str(&heading(
        render(|w| man.render_version_section(w)),
        "VERSION",
        "VERSION",
    ));

    // clap_mangen writes the default values in English.
    let page = page.replace("[default: ", "[défaut : ");
    let path = dir.join("depot-fichiers.1");
    let mut f = std::fs::File::create(&path).expect("man page file");
    f.write_all(page.as_bytes()).expect("write man page");
    println!("{}", path.display());
}
