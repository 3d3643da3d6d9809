//! `GET|HEAD /download.php` (contract §2.2).
use crate::http::{Request, Response};
use crate::router::App;

pub fn handle(app: &App, req: &Request) -> Response {
    let _ = (app, req);
    todo!()
}
