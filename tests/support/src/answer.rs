//! The one answer type of the tests: a status, headers in order, and the whole body.

use depot_fichiers::http::{Response, ResponseBody};
use serde_json::Value;

/// An answer as a client sees it.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    /// A handler's response held in memory (a body in a file is not expected here).
    pub fn from_response(r: Response) -> Answer {
        let body = match r.body {
            ResponseBody::Bytes(b) => b,
            ResponseBody::Empty => Vec::new(),
            ResponseBody::File { .. } => panic!("file body"),
            body @ ResponseBody::Chunks(_) => body.into_vec().unwrap(),
        };
        Answer {
            status: r.status,
            headers: r
                .headers
                .into_iter()
                .map(|(n, v)| (n.to_string(), v.into_owned()))
                .collect(),
            body,
        }
    }

    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; the answer must say `Content-Type: application/json`.
    pub fn json(&self) -> Value {
        assert_eq!(
            self.header("Content-Type"),
            Some("application/json"),
            "{}",
            self.text()
        );
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.text()))
    }

    /// A refusal of the specification: this status, `succes: false`, this `erreur` code, a message.
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "{}", self.text());
        let v = self.json();
        assert_eq!(v["succes"], false);
        assert_eq!(v["erreur"], code);
        assert!(v["message"].as_str().unwrap().len() > 10);
    }
}
