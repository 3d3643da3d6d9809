//! The command line (`clap` definition), shared by the program and by the man page generator.
//!
//! It is parsed only when the program is not a CGI script (see `main.rs`): a CGI server turns
//! an `=`-less query string into arguments, and those belong to the client.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// `depot-fichiers [--config CHEMIN] [--listen ADRESSE] [SOUS-COMMANDE]`.
#[derive(Parser)]
#[command(
    name = "depot-fichiers",
    version,
    about = "Dépôt de fichiers temporaire : programme FastCGI (mod_fcgid, PHP-FPM, CGI)"
)]
pub struct Cli {
    /// Fichier de configuration (sinon $DEPOT_FICHIERS_CONFIG, sinon
    /// ~/.config/depot-fichiers/config.toml s'il existe, sinon /etc/depot-fichiers/config.toml)
    #[arg(long, global = true, value_name = "CHEMIN", long_help = config_long_help())]
    pub config: Option<PathBuf>,

    /// Écouter soi-même au lieu d'hériter de la socket du serveur web : tcp:HÔTE:PORT ou unix:CHEMIN
    #[arg(long, value_name = "ADRESSE")]
    pub listen: Option<String>,

    /// Sous-commande d'administration ; sans elle, le programme sert les requêtes
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The long help of `--config` (`--help`, man page): the whole search order.
fn config_long_help() -> String {
    format!(
        "Fichier de configuration. Ordre de recherche : {}",
        crate::config::SEARCH_ORDER
    )
}

/// The administration subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Vérifie la configuration et affiche la configuration effective (secrets masqués) ; en
    /// root, vérifie sous le compte propriétaire du dépôt
    CheckConfig,
    /// Lance un balayage complet et affiche ce qui a été supprimé
    Sweep,
    /// Affiche l'état du dépôt sans rien y écrire : fichiers et octets tenus face à la
    /// capacité, retard de l'index des échéances, marche, dernier balayage, dernières erreurs du
    /// journal ; code de sortie à la Nagios (0 bon, 1 attention, 2 critique, 3 inconnu) ; en
    /// root, lit sous le compte propriétaire du dépôt
    #[command(name = "etat")]
    Status {
        /// Sortie JSON pour la supervision (clés stables, décrites dans le README)
        #[arg(long)]
        json: bool,
        /// Compte aussi les fichiers du dépôt, sans verrou, et dit l'écart avec les totaux
        /// tenus (lit tout le dossier : long sur un gros dépôt)
        #[arg(long = "compter")]
        count: bool,
    },
    /// Affiche le paragraphe à coller dans les consignes permanentes de l'agent
    #[command(name = "consignes")]
    Instructions {
        /// Inclure le vrai token au lieu de <TOKEN_ACCES>
        #[arg(long = "avec-token")]
        with_token: bool,
        /// Nom du connecteur MCP tel que déclaré chez le client
        #[arg(
            long = "connecteur",
            value_name = "CONNECTEUR",
            default_value = "depot-fichiers"
        )]
        connector: String,
    },
}
