//! The configuration file as written (specification §3): one field per key, named as the key, in
//! the order of `config.example.toml`. Each field's type says what the key accepts — its bounds
//! included — and its default; a refusal is a French sentence of that type, which the caller
//! gives with the key at fault ([`File::read`]). Serialised back, secrets masked, for
//! `check-config`.

use std::fmt::Display;
use std::path::PathBuf;

use serde::de::{self, Deserialize, Deserializer};
use serde::{Serialize, Serializer};

use super::ConfigError;

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;
const TIB: u64 = 1024 * GIB;
/// Ten years, in seconds: the longest delay, far from any overflow of the expiry arithmetic.
const TEN_YEARS_SECS: u64 = 10 * 365 * 24 * 3600;

/// Every key of the file. A key without a default is an `Option` (`None`: absent, refused by
/// [`super::Config::from_file`]); `oauth_introspection_url` and `mcp_resource_url`, whose
/// defaults come from other keys, too.
#[derive(Debug, Clone, serde::Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct File {
    #[serde(serialize_with = "masked")]
    pub token_acces: Option<Text>,
    #[serde(default)]
    pub taille_max_fichier_octets: Bounded<1, TIB, { 200 * MIB }>,
    #[serde(default)]
    pub duree_max_depot_secondes: Bounded<1, TEN_YEARS_SECS, 3600>,
    #[serde(default)]
    pub duree_inactivite_secondes: Bounded<1, TEN_YEARS_SECS, 600>,
    pub dossier_fichiers: Option<Folder>,
    pub dossier_log: Option<Folder>,
    #[serde(default)]
    pub debug: Flag<false>,
    pub url_base: Option<Text>,
    pub oauth_url: Option<Text>,
    pub oauth_introspection_url: Option<Text>,
    pub oauth_client_id: Option<Text>,
    #[serde(serialize_with = "masked")]
    pub oauth_client_secret: Option<Text>,
    #[serde(default)]
    pub oauth_scope_requis: Text,
    pub mcp_resource_url: Option<Text>,
    #[serde(default)]
    pub(crate) oauth_audience_obligatoire: Flag<true>,
    #[serde(default)]
    pub origines_autorisees: List,
    #[serde(default)]
    pub taille_max_base64_octets: Bounded<0, { 256 * MIB }, { 5 * MIB }>,
    #[serde(default)]
    pub balayage_intervalle_min_ms: Bounded<0, 3_600_000, 1000>,
    #[serde(default)]
    pub taille_max_totale_octets: Bounded<0, { 1024 * TIB }, 0>,
    #[serde(default)]
    pub nombre_max_reprises_en_cours: Bounded<1, 1_000_000, 1024>,
    #[serde(default)]
    pub(crate) telechargements_max_par_fichier: Bounded<1, 1000, 100>,
    #[serde(default)]
    pub mcp_taille_max_requete_octets: Bounded<1024, { 64 * MIB }, MIB>,
    #[serde(default)]
    pub oauth_delai_max_secondes: Timeout,
    #[serde(default)]
    pub(crate) taille_max_log_octets: Bounded<4096, GIB, { 8 * MIB }>,
    #[serde(default)]
    pub(crate) nombre_logs_conserves: Bounded<0, 1000, 3>,
    #[serde(default)]
    pub x_sendfile: Flag<false>,
    #[serde(default)]
    pub x_sendfile_taille_min_octets: Bounded<0, TIB, MIB>,
    #[serde(default)]
    pub liens_par_fichier: Flag<false>,
}

impl File {
    /// The file's keys from its parsed table: an unknown key is refused first; then every
    /// value is checked by the type of its key, and a refusal names the key whose value alone
    /// is refused.
    pub(super) fn read(table: toml::Table) -> Result<File, ConfigError> {
        if let Some(unknown) = table.keys().find(|k| !keys().contains(&k.as_str())) {
            return Err(super::err(
                unknown,
                "clé inconnue (voir config.example.toml)",
            ));
        }
        File::deserialize(table.clone()).map_err(|whole| {
            let alone = |(key, value): (&String, &toml::Value)| {
                let one = toml::Table::from_iter([(key.clone(), value.clone())]);
                File::deserialize(one)
                    .err()
                    .map(|e| super::err(key, e.message()))
            };
            table.iter().find_map(alone).unwrap_or(ConfigError {
                key: None,
                message: whole.message().to_string(),
            })
        })
    }
}

/// Every key the file may hold, in the order of [`File`] (and of the example file): the field
/// names serde's derived `Deserialize` hands to a deserializer.
pub fn keys() -> &'static [&'static str] {
    use serde::de::Visitor;
    struct FieldNames<'a>(&'a mut &'static [&'static str]);
    impl<'de> Deserializer<'de> for FieldNames<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("only a struct is introspected"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("field names only"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = File::deserialize(FieldNames(&mut fields));
    fields
}

/// A TOML value, refused with `message` unless `accept` takes it.
fn value<'de, D: Deserializer<'de>, T>(
    d: D,
    accept: impl FnOnce(toml::Value) -> Result<T, String>,
) -> Result<T, D::Error> {
    let v = toml::Value::deserialize(d)?;
    accept(v).map_err(de::Error::custom)
}

/// Why a value of the wrong type is refused (it is never quoted: it may be a secret).
fn wrong_type(expected: impl Display) -> String {
    format!("valeur de type incorrect ({expected})")
}

/// An integer key: within `MIN..=MAX`, `DEFAULT` when absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Bounded<const MIN: u64, const MAX: u64, const DEFAULT: u64>(pub u64);

impl<const MIN: u64, const MAX: u64, const DEFAULT: u64> Default for Bounded<MIN, MAX, DEFAULT> {
    fn default() -> Self {
        const {
            assert!(
                MIN <= DEFAULT && DEFAULT <= MAX,
                "a default within its bounds"
            )
        };
        Bounded(DEFAULT)
    }
}

impl<'de, const MIN: u64, const MAX: u64, const DEFAULT: u64> Deserialize<'de>
    for Bounded<MIN, MAX, DEFAULT>
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        value(d, |v| match v {
            toml::Value::Integer(i) => match u64::try_from(i) {
                Ok(n) if (MIN..=MAX).contains(&n) => Ok(Bounded(n)),
                _ => Err(format!(
                    "valeur {i} hors des limites permises : de {MIN} à {MAX}"
                )),
            },
            _ => Err(wrong_type("un nombre entier est attendu")),
        })
    }
}

impl<const MIN: u64, const MAX: u64, const DEFAULT: u64> Serialize for Bounded<MIN, MAX, DEFAULT> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

/// `oauth_delai_max_secondes`: seconds, decimals allowed, within [`Timeout::RANGE`]; 5 when
/// absent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Timeout(pub f64);

impl Timeout {
    /// The allowed range, in seconds.
    pub(super) const RANGE: (f64, f64) = (0.1, 300.0);
}

impl Default for Timeout {
    fn default() -> Self {
        Timeout(5.0)
    }
}

impl<'de> Deserialize<'de> for Timeout {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        value(d, |v| {
            let secs = match v {
                toml::Value::Float(f) => f,
                toml::Value::Integer(i) => i as f64,
                _ => return Err(wrong_type("un nombre est attendu")),
            };
            let (min, max) = Timeout::RANGE;
            if !(min..=max).contains(&secs) {
                return Err(format!(
                    "valeur {secs} hors des limites permises : de {min} à {max} secondes"
                ));
            }
            Ok(Timeout(secs))
        })
    }
}

impl Serialize for Timeout {
    /// A whole number without `.0`, as the file would write it.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.fract() == 0.0 && self.0.abs() < 1e15 {
            s.serialize_i64(self.0 as i64)
        } else {
            s.serialize_f64(self.0)
        }
    }
}

/// A boolean key, `DEFAULT` when absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Flag<const DEFAULT: bool>(pub bool);

impl<const DEFAULT: bool> Default for Flag<DEFAULT> {
    fn default() -> Self {
        Flag(DEFAULT)
    }
}

impl<'de, const DEFAULT: bool> Deserialize<'de> for Flag<DEFAULT> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        value(d, |v| match v {
            toml::Value::Boolean(b) => Ok(Flag(b)),
            _ => Err(wrong_type("true ou false est attendu")),
        })
    }
}

impl<const DEFAULT: bool> Serialize for Flag<DEFAULT> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(self.0)
    }
}

/// A string key (empty when absent and optional).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Text(pub String);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        value(d, |v| match v {
            toml::Value::String(s) => Ok(Text(s)),
            _ => Err(wrong_type("une chaîne entre guillemets est attendue")),
        })
    }
}

impl Serialize for Text {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// `serialize_with` of the secrets: only their masked form is ever serialised.
fn masked<S: Serializer>(secret: &Option<Text>, s: S) -> Result<S::Ok, S::Error> {
    match secret {
        Some(t) => s.serialize_str(&super::mask(&t.0)),
        None => s.serialize_none(),
    }
}

/// A folder: an absolute path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Folder(pub PathBuf);

impl<'de> Deserialize<'de> for Folder {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        value(d, |v| match v {
            toml::Value::String(s) if PathBuf::from(&s).is_absolute() => {
                Ok(Folder(PathBuf::from(s)))
            }
            toml::Value::String(s) => Err(format!("« {s} » doit être un chemin absolu")),
            _ => Err(wrong_type("une chaîne entre guillemets est attendue")),
        })
    }
}

impl Serialize for Folder {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// A list of strings, empty when absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct List(pub Vec<String>);

impl<'de> Deserialize<'de> for List {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        value(d, |v| {
            let wrong = || wrong_type("une liste de chaînes entre guillemets est attendue");
            let toml::Value::Array(items) = v else {
                return Err(wrong());
            };
            items
                .into_iter()
                .map(|i| match i {
                    toml::Value::String(s) => Ok(s),
                    _ => Err(wrong()),
                })
                .collect::<Result<_, _>>()
                .map(List)
        })
    }
}

impl Serialize for List {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}
